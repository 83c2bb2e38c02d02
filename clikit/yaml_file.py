"""Strictly read small YAML configuration files: every error one line naming the file and the key.

Shared by the exporter (its web and DCGM config files) and the load test (the GPU instance-type table, NodePool
manifests, eksctl node groups, the chart's values)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

__all__ = ["load_yaml", "load_yaml_documents", "strict_mapping"]


def load_yaml(path: str, what: str, error: type[ValueError]) -> Any:
    """The document in ``path``; ``what`` ("web config", ...) names it in ``error``'s message."""
    return _read(path, what, error, yaml.safe_load)


def load_yaml_documents(path: str, what: str, error: type[ValueError]) -> list[Any]:
    """Every document of a multi-document file (``---`` between them, as manifests are written), worded as
    :func:`load_yaml`."""
    return _read(path, what, error, lambda text: list(yaml.safe_load_all(text)))


def _read(path: str, what: str, error: type[ValueError], parse: Callable[[str], Any]) -> Any:
    try:
        return parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read {what}: {getattr(exc, 'strerror', None) or exc}") from None
    except yaml.YAMLError as exc:
        raise error(f"{path}: not YAML: {' '.join(str(exc).split())}") from None


def strict_mapping(value: Any, where: str, allowed: set[str], error: type[ValueError]) -> dict[str, Any]:
    """``value`` as a mapping with only ``allowed`` keys (None: empty); the first unknown key is named."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(f"{where}: expected a mapping")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise error(f"{where}: unknown field {unknown[0]!r} (expected {', '.join(sorted(allowed))})")
    return value
