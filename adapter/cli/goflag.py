"""Flag values as Go's pflag reads them, so prometheus-adapter's command lines keep their meaning here.

Durations follow ``time.ParseDuration`` (``clikit.durations``), booleans ``strconv.ParseBool``
(``1 t T TRUE true True`` / ``0 f F FALSE false False``).
"""

from __future__ import annotations

import csv

from clikit.durations import DurationError, parse_go_duration

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FlagValueError(ValueError):
    """A value Go's flag parsing would refuse; the message says what was expected."""


def parse_duration(text: str) -> float:
    """A Go duration in seconds; negative durations are refused (no flag here takes one)."""
    try:
        seconds = parse_go_duration(text)
    except DurationError as exc:
        raise FlagValueError(str(exc)) from None
    if seconds < 0:
        raise FlagValueError(f"{text!r}: a negative duration")
    return seconds


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
