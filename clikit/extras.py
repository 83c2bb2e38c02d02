"""Optional dependencies: a command that needs an extra which is not installed says which one, in one line."""

from __future__ import annotations

import importlib.util


class MissingExtra(RuntimeError):
    code = 2


def require_extra(feature: str, extra: str, *modules: str) -> None:
    """Raise :class:`MissingExtra` naming ``extra`` unless every module in ``modules`` can be imported."""
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if absent:
        raise MissingExtra(f"{feature} needs {', '.join(absent)}, which is not installed: "
                           f"pip install 'gpu-autoscaler[{extra}]'")
