"""Load a script of the repository (bench/, scripts/) as a module, to test its pure parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(relative: str, name: str) -> ModuleType:
    """``relative`` (e.g. ``bench/pyspy.py``) imported under ``name``, registered as Python's docs show for
    importing a source file directly (dataclasses look their module up by name)."""
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    assert spec is not None and spec.loader is not None, relative
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
