"""The three duration grammars the field writes, exactly as their owners parse them.

* Go's ``time.ParseDuration`` (src/time/format.go): what Go command lines take, so dcgm-exporter's and
  prometheus-adapter's flags, and Kubernetes' ``metav1.Duration`` (``5m0s``). An optional sign, then one or more
  decimal numbers each with a unit: ``ns``, ``us`` (or ``µs``, ``μs``), ``ms``, ``s``, ``m``, ``h``, in any order
  (``10.5s4m``); ``0`` needs no unit; at most 2^63-1 nanoseconds either way.
* Prometheus' ``model.ParseDuration`` (prometheus/common model/time.go): what rules files, PromQL ranges and
  Prometheus' own APIs take (``30s``, ``1h30m``, ``2w``). Whole numbers with units ``y`` (365 days), ``w``, ``d``,
  ``h``, ``m``, ``s``, ``ms``, each at most once and from the largest to the smallest; ``0`` needs no unit; no sign,
  no fraction; at most 2^63-1 nanoseconds.
* Taurus' ``dehumanize_time`` (Blazemeter/taurus bzt/utils.py; docs: site/dat/docs/ConfigSyntax.md, "Human-Readable
  Time Specifications"): what a Taurus file's ``hold-for``, ``ramp-up``, ``delay``, ``timeout`` and ``think-time``
  take. Numbers (fractions too) with the units ``d``, ``h``, ``m``, ``s`` or ``ms`` in any case, one after another
  in any order (``10m30s``, ``1s500ms``, ``1d 2h``), spaces ignored; a number without a unit is seconds, and so is
  a YAML number (``0.75``); nothing (``None``, empty text) is 0. Stricter than Taurus in two ways, both errors rather
  than guesses: the whole text must be such parts (Taurus' ``findall`` skips what it cannot read), and ``inf`` or a
  sign is refused (a test cannot run for ever, nor for less than nothing).

Each returns seconds as a float; a text the owner refuses raises ``DurationError`` saying what was expected.
"""

from __future__ import annotations

import math
import re

_MAX = 1 << 63  # Go's time.Duration is an int64 of nanoseconds

_GO_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "h": 3_600_000_000_000}
# Prometheus' units, from the largest (position 1) to the smallest: (position, nanoseconds).
_PROMETHEUS_UNITS = {"y": (1, 365 * 86_400 * 10**9), "w": (2, 7 * 86_400 * 10**9), "d": (3, 86_400 * 10**9),
                     "h": (4, 3_600 * 10**9), "m": (5, 60 * 10**9), "s": (6, 10**9), "ms": (7, 10**6)}


_TAURUS_UNITS = {"ms": 0.001, "s": 1.0, "": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_TAURUS_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([a-zA-Z]*)")
TAURUS_EXAMPLES = "e.g. 30s, 10m30s, 1h, 1s500ms or a number of seconds"


class DurationError(ValueError):
    """A duration text its grammar refuses; the message quotes it and gives examples."""


def parse_go_duration(text: str, where: str = "") -> float:
    """Seconds in a Go duration (``1m30s``, ``1.5h``, ``300ms``, ``-2m``, ``0``); ``where`` (a flag, a field)
    starts the error message."""
    nanoseconds = _go_nanoseconds(text)
    if nanoseconds is None:
        raise DurationError(f"{where + ' ' if where else ''}{text!r}: expected a duration like 30s, 1m, 1m30s, 1.5h "
                            "or 300ms")
    return nanoseconds / 1e9


def parse_prometheus_duration(text: str, where: str = "") -> float:
    """Seconds in a Prometheus duration (``30s``, ``5m``, ``1h30m``, ``2w``, ``0``); ``where`` starts the error."""
    nanoseconds = _prometheus_nanoseconds(text)
    if nanoseconds is None:
        raise DurationError(f"{where + ' ' if where else ''}{text!r}: expected a Prometheus duration like 30s, 5m, "
                            "1h30m or 2w (whole numbers, units from the largest to the smallest)")
    return nanoseconds / 1e9


def _go_nanoseconds(text: str) -> int | None:
    """time.ParseDuration's algorithm over whole nanoseconds; None where it returns an error."""
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return 0
    if not rest:
        return None
    total = 0
    while rest:
        whole, rest, had_whole = _leading_int(rest)
        if whole is None:
            return None
        fraction, scale, had_fraction = 0, 1, False
        if rest[:1] == ".":
            fraction, scale, rest, had_fraction = _leading_fraction(rest[1:])
        if not had_whole and not had_fraction:
            return None  # no digits, e.g. ".s"
        end = 0  # the unit: everything up to the next number
        while end < len(rest) and rest[end] != "." and not "0" <= rest[end] <= "9":
            end += 1
        unit = _GO_UNITS.get(rest[:end])
        if unit is None:
            return None  # missing or unknown unit
        rest = rest[end:]
        if whole > _MAX // unit:
            return None
        value = whole * unit
        if fraction:
            # Go adds int64(float64(f) * (float64(unit) / scale)): the same rounding, for the same results.
            value += int(float(fraction) * (float(unit) / scale))
            if value > _MAX:
                return None
        total += value
        if total > _MAX:
            return None
    if negative:
        return -total
    return total if total <= _MAX - 1 else None


def _leading_int(text: str) -> tuple[int | None, str, bool]:
    """The leading decimal digits as an int (None on overflow), the rest, and whether there were digits."""
    end = 0
    while end < len(text) and "0" <= text[end] <= "9":
        end += 1
    if end == 0:
        return 0, text, False
    value = int(text[:end])
    return (value if value <= _MAX else None), text[end:], True


def _leading_fraction(text: str) -> tuple[int, int, str, bool]:
    """Digits after the point: their value and 10**count, both capped as Go caps them (later digits only round)."""
    end, value, scale, overflow = 0, 0, 1, False
    while end < len(text) and "0" <= text[end] <= "9":
        if not overflow:
            if value > (_MAX - 1) // 10:
                overflow = True
            else:
                candidate = value * 10 + int(text[end])
                if candidate > _MAX:
                    overflow = True
                else:
                    value, scale = candidate, scale * 10
        end += 1
    return value, scale, text[end:], end > 0


def _prometheus_nanoseconds(text: str) -> int | None:
    """model.ParseDuration's algorithm; None where it returns an error."""
    if text == "0":
        return 0
    if not text:
        return None
    rest, total, last_position = text, 0, 0
    while rest:
        digits = 0
        while digits < len(rest) and "0" <= rest[digits] <= "9":
            digits += 1
        if digits == 0:
            return None
        value, rest = int(rest[:digits]), rest[digits:]
        end = 0
        while end < len(rest) and not "0" <= rest[end] <= "9":
            end += 1
        unit = _PROMETHEUS_UNITS.get(rest[:end])
        if unit is None:
            return None
        rest = rest[end:]
        position, nanoseconds = unit
        if position <= last_position:  # each unit once, from the largest to the smallest
            return None
        last_position = position
        if value > _MAX // nanoseconds:
            return None
        total += value * nanoseconds
        if total > _MAX - 1:
            return None
    return total


def parse_taurus_duration(value: object, where: str = "") -> float:
    """Seconds in a Taurus duration (``10m30s``, ``1h``, ``500ms``, ``0.75``, a YAML number; ``None`` or an empty
    text is 0, as ``dehumanize_time`` returns); ``where`` starts the error."""
    start = f"{where} " if where else ""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise DurationError(f"{start}expected a duration ({TAURUS_EXAMPLES}), got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise DurationError(f"{start}{value!r}: a duration must be a finite number of seconds, not negative")
        return float(value)
    seconds = _taurus_seconds(value.replace(" ", ""))
    if seconds is None:
        raise DurationError(f"{start}bad duration {value!r} ({TAURUS_EXAMPLES}; units d, h, m, s, ms)")
    return seconds


def _taurus_seconds(text: str) -> float | None:
    """dehumanize_time's sum over ``NUMBER UNIT`` parts, when they make up the whole text; None otherwise."""
    seconds, at = 0.0, 0
    for match in _TAURUS_PART.finditer(text):
        unit = match.group(2).lower()
        if match.start() != at or unit not in _TAURUS_UNITS or (not unit and match.end() != len(text)):
            break  # (a number without a unit ends the text: Taurus reads "1.2.3" as one number, and fails)
        seconds += float(match.group(1)) * _TAURUS_UNITS[unit]
        at = match.end()
    return seconds if at == len(text) else None
