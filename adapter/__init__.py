"""gpu-autoscaler adapter package."""

import sys


def _import_httpx_without_its_command_line() -> None:
    """``import httpx`` also imports its command-line tool (click, rich, pygments: ~0.1 s and 4 MiB) when those
    are installed; the adapter never runs it. httpx falls back to a stub ``main`` when that import fails, so fail
    it for this one import and leave ``httpx._main`` importable afterwards."""
    if "httpx" in sys.modules:
        return
    sys.modules["httpx._main"] = None  # type: ignore[assignment]
    try:
        import httpx  # noqa: F401
    finally:
        if sys.modules.get("httpx._main", 0) is None:
            del sys.modules["httpx._main"]


_import_httpx_without_its_command_line()
