"""The two files the demo keeps current for its readers: the exporter's fake GPU state and the adapter's
standalone objects. Both readers re-read on change, so each write is atomic (temp file + rename)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_json", "fake_gpu_state", "standalone_pods"]


def atomic_write_json(path: str | Path, document: Any) -> None:
    """Replace ``path`` with ``document`` so a reader sees the old or the new file, never a partial one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(document, fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def fake_gpu_state(utilisation: Mapping[int, float], gpu_count: int) -> dict[str, Any]:
    """The exporter's ``--fake-state`` document: ``DCGM_FI_DEV_GPU_UTIL`` (integer percent, as NVML reports it)
    per GPU index; GPUs not given are idle (0 %)."""
    gpus = {}
    for index in range(gpu_count):
        percent = min(max(utilisation.get(index, 0.0), 0.0), 100.0)
        gpus[str(index)] = {"DCGM_FI_DEV_GPU_UTIL": round(percent)}
    return {"gpus": gpus}


def standalone_pods(pods: Sequence[str], namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The adapter's ``--standalone-objects`` document listing ``pods`` with ``labels`` in ``namespace``."""
    return {"pods": [{"namespace": namespace, "name": name, "labels": dict(labels)} for name in pods]}
