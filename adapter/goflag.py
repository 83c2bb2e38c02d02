"""Flag values as Go's pflag reads them, so prometheus-adapter's command lines keep their meaning here.

Durations follow ``time.ParseDuration`` (``1m30s``, ``1.5h``, ``300ms``, ``0``), booleans ``strconv.ParseBool``
(``1 t T TRUE true True`` / ``0 f F FALSE false False``).
"""

from __future__ import annotations

import csv
import re

_DURATION = re.compile(r"^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+$")
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FlagValueError(ValueError):
    """A value Go's flag parsing would refuse; the message says what was expected."""


def parse_duration(text: str) -> float:
    """A Go duration in seconds; negative durations are refused (no flag here takes one)."""
    text = text.strip()
    if text in ("0", "+0", "-0"):
        return 0.0
    if not _DURATION.match(text):
        raise FlagValueError(f"{text!r}: expected a duration like 30s, 1m, 1m30s or 1.5h")
    if text.startswith("-"):
        raise FlagValueError(f"{text!r}: a negative duration")
    return sum(float(n) * _UNIT[u] for n, u in _PART.findall(text))


def parse_bool(text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise FlagValueError(f"{text!r}: expected true or false")


def parse_int(text: str) -> int:
    try:
        return int(text, 0) if text.strip().lower().startswith(("0x", "0o", "0b")) else int(text)
    except ValueError:
        raise FlagValueError(f"{text!r}: expected an integer") from None


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise FlagValueError(f"{text!r}: expected a number") from None


def split_slice(text: str) -> list[str]:
    """A pflag string slice: one CSV record (``a,b``, ``"a,b",c``); an empty value is an empty list."""
    if not text:
        return []
    try:
        return next(csv.reader([text], skipinitialspace=False, strict=True))
    except csv.Error as exc:
        raise FlagValueError(f"{text!r}: not a comma-separated list: {exc}") from None
