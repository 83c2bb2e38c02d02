"""The ``--watch`` file: everything the report saw of a cluster, one JSON object a line, appended as it came, so a
window longer than the events' life (1 h by default) can be reported on later (``--journal``).

A watch session starts with a header line (``{"journal": "gpu-loadtest capacity", "version": 1, "namespace",
"deployment", "karpenter", "events_api", "started"}``), then one line per object seen: ``{"seen": <Unix seconds>,
"type": "LISTED" | "ADDED" | "MODIFIED" | "DELETED", "resource": "pods" | "events" | "nodes" | "nodeclaims" |
"hpas" | "deployments", "object": {...}}``, the object as the API server sent it. Sessions append to the same file;
reading replays every line into one set of records (:class:`.collect.Collector`). A line that does not parse (a
session cut mid-write) is skipped and counted."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from loadtest.measure.cluster.collect import RESOURCES, Collector

__all__ = ["Journal", "JournalError", "Replayed", "replay"]


class JournalError(ValueError):
    pass


class Journal:
    """Appends to the file, one line per call, from any thread."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path, self.clock = path, clock
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        self.lines = 0

    def __enter__(self) -> Journal:
        try:
            self._file = open(self.path, "a", encoding="utf-8")  # closed in __exit__
        except OSError as exc:
            raise JournalError(f"--watch {self.path}: {exc.strerror or exc}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, doc: Mapping[str, Any]) -> None:
        line = json.dumps(doc, separators=(",", ":"))
        with self._lock:
            if self._file is None:  # closed: a watch left behind after a stop records nothing more
                return
            self._file.write(line + "\n")
            self._file.flush()
            self.lines += 1

    def header(self, **fields: Any) -> None:
        self._write({"journal": "gpu-loadtest capacity", "version": 1, "started": self.clock(), **fields})

    def record(self, kind: str, resource: str, obj: Mapping[str, Any]) -> None:
        self._write({"seen": self.clock(), "type": kind, "resource": resource, "object": obj})


@dataclass
class Replayed:
    """The journal's records; ``first`` and ``last``: when its first and last line were seen; ``headers``: its
    sessions' header lines; ``skipped``: lines that did not parse."""

    collector: Collector
    first: float | None = None
    last: float | None = None
    headers: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0


def replay(path: Path) -> Replayed:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise JournalError(f"--journal {path}: {exc.strerror or exc}") from None
    out = Replayed(Collector())
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            out.skipped += 1
            continue
        if not isinstance(doc, dict):
            out.skipped += 1
        elif "journal" in doc:
            out.headers.append(doc)
            if "karpenter" in doc and out.collector.karpenter is not True:
                out.collector.karpenter = doc["karpenter"]
        elif doc.get("resource") in RESOURCES and isinstance(doc.get("object"), dict) and \
                isinstance(doc.get("seen"), (int, float)):
            seen = float(doc["seen"])
            out.first = seen if out.first is None else min(out.first, seen)
            out.last = seen if out.last is None else max(out.last, seen)
            out.collector.add(doc["resource"], doc["object"], seen if doc.get("type") == "DELETED" else None, seen)
        else:
            out.skipped += 1
    if not out.headers and out.first is None:
        raise JournalError(f"--journal {path}: not a journal written by gpu-loadtest capacity --watch")
    return out
