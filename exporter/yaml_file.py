"""Strictly read small YAML configuration files: every error one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load_yaml(path: str, what: str, error: type[ValueError]) -> Any:
    """The document in ``path``; ``what`` ("web config", ...) names it in ``error``'s message."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
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
