"""Go's ``time.ParseDuration`` for the dcgm-exporter flags and files that take durations (``10s``, ``1m30s``)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|\u00b5s|ms|s|m|h))+$")
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class DurationError(ValueError):
    pass


def parse_duration(text: str, where: str) -> float:
    """Seconds in ``text`` (``0`` alone needs no unit); ``where`` names the flag or field in the error."""
    text = text.strip()
    if text == "0":
        return 0.0
    if not _DURATION.match(text):
        raise DurationError(f"{where}: invalid duration {text!r} (expected e.g. 10s, 500ms, 1m30s)")
    return sum(float(n) * _UNIT[u] for n, u in _PART.findall(text))
