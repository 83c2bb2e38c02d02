"""Load profiles: a list of segments, each held for some seconds at a rate, or ramping linearly between two rates.

Text form (``gpu-loadtest run --profile``): comma-separated ``DURATION:RATE`` or ``DURATION:FROM..TO`` entries, e.g.
``"30s:5,60s:50,30s:5"`` or ``"15s:8,10s:8..55,60s:55,10s:55..8,55s:8"``. Durations are Go durations, as the
flags' (``1m30s``, ``500ms``); a bare number is seconds. Rates are requests per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clikit.durations import DurationError, parse_go_duration

__all__ = ["Profile", "ProfileError", "Segment", "parse_duration", "parse_profile", "parse_rate"]


class ProfileError(ValueError):
    """A profile or duration text that cannot be used; the message names the offending part."""


def parse_duration(text: str) -> float:
    """Seconds: a Go duration (``1m30s``, ``500ms``) or a plain number of seconds (``20``)."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_go_duration(text)
        except DurationError:
            raise ProfileError(f"bad duration {text!r} (expected e.g. 30s, 1m30s, 500ms)") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ProfileError(f"bad duration {text!r}: must be a finite number of seconds, not negative")
    return seconds


def parse_rate(text: str, where: str, expected: str = "requests per second") -> float:
    """A rate in requests per second; errors start with ``where`` (the entry or option it came from)."""
    try:
        rate = float(text)
    except ValueError:
        raise ProfileError(f"{where}: bad rate {text!r} ({expected})") from None
    if not math.isfinite(rate) or rate < 0:
        raise ProfileError(f"{where}: the rate must be a finite number >= 0")
    return rate


@dataclass(frozen=True)
class Segment:
    """``seconds`` long, the rate going linearly from ``start_rate`` to ``end_rate`` (equal: a constant rate)."""

    seconds: float
    start_rate: float
    end_rate: float

    @property
    def peak(self) -> float:
        return max(self.start_rate, self.end_rate)

    def rate_at(self, offset: float) -> float:
        if self.seconds <= 0:
            return self.end_rate
        share = min(max(offset / self.seconds, 0.0), 1.0)
        return self.start_rate + (self.end_rate - self.start_rate) * share

    def text(self) -> str:
        rate = f"{self.start_rate:g}" if self.start_rate == self.end_rate else f"{self.start_rate:g}..{self.end_rate:g}"
        return f"{self.seconds:g}s:{rate}"


@dataclass(frozen=True)
class Profile:
    segments: tuple[Segment, ...]

    def __post_init__(self) -> None:
        if not self.segments:
            raise ProfileError("a profile needs at least one segment")
        if self.duration <= 0:
            raise ProfileError("a profile must last longer than 0 s")

    @property
    def duration(self) -> float:
        return sum(s.seconds for s in self.segments)

    @property
    def peak_rate(self) -> float:
        return max(s.peak for s in self.segments)

    def _locate(self, t: float) -> tuple[int, float]:
        """(segment index, offset into it) at ``t``; the end of the profile belongs to the last segment."""
        start = 0.0
        for index, segment in enumerate(self.segments):
            if t < start + segment.seconds:
                return index, t - start
            start += segment.seconds
        return len(self.segments) - 1, self.segments[-1].seconds

    def rate_at(self, t: float) -> float:
        """Target requests per second at ``t`` seconds into the profile (0 outside it)."""
        if t < 0 or t > self.duration:
            return 0.0
        index, offset = self._locate(t)
        return self.segments[index].rate_at(offset)

    def starts(self) -> list[float]:
        out, at = [], 0.0
        for segment in self.segments:
            out.append(at)
            at += segment.seconds
        return out

    def phases(self) -> list[str]:
        """A name per segment: ``ramp-up``/``ramp-down`` for ramps; constant segments are ``hold`` at the peak
        rate, ``idle`` at rate 0, else ``baseline`` before the first hold and ``cool-down`` after it."""
        names: list[str] = []
        seen_peak = False
        for segment in self.segments:
            if segment.end_rate > segment.start_rate:
                names.append("ramp-up")
            elif segment.end_rate < segment.start_rate:
                names.append("ramp-down")
            elif segment.start_rate == self.peak_rate:
                names.append("hold")
            elif segment.start_rate == 0:
                names.append("idle")
            else:
                names.append("cool-down" if seen_peak else "baseline")
            seen_peak = seen_peak or segment.peak == self.peak_rate
        return names

    def phase_at(self, t: float) -> str:
        return self.phases()[self._locate(max(t, 0.0))[0]]

    @property
    def load_step_at(self) -> float | None:
        """When the load first rises above the starting rate (the start of that segment)."""
        base = self.segments[0].start_rate
        for start, segment in zip(self.starts(), self.segments, strict=True):
            if segment.peak > base:
                return start
        return None

    @property
    def load_drop_at(self) -> float | None:
        """When the load leaves the peak for good: the end of the last segment at the peak rate, or the start of a
        ramp down from it; ``None`` when the profile ends at the peak."""
        peak = self.peak_rate
        starts = self.starts()
        last = max(i for i, s in enumerate(self.segments) if s.peak == peak)
        segment = self.segments[last]
        if segment.end_rate < peak:
            return starts[last]
        if last + 1 < len(self.segments):
            return starts[last] + segment.seconds
        return None

    def text(self) -> str:
        return ",".join(s.text() for s in self.segments)

    def scaled(self, time_factor: float = 1.0, rate_factor: float = 1.0) -> Profile:
        return Profile(tuple(Segment(s.seconds * time_factor, s.start_rate * rate_factor, s.end_rate * rate_factor)
                             for s in self.segments))


def parse_profile(text: str) -> Profile:
    """Parse the text form (see the module docstring)."""
    segments: list[Segment] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            raise ProfileError(f"empty entry in profile {text!r}")
        duration_text, colon, rate_text = entry.partition(":")
        if not colon:
            raise ProfileError(f"profile entry {entry!r}: expected DURATION:RATE or DURATION:FROM..TO")
        try:
            seconds = parse_duration(duration_text)
        except ProfileError as exc:
            raise ProfileError(f"profile entry {entry!r}: {exc}") from None
        start_text, dots, end_text = rate_text.partition("..")
        start = parse_rate(start_text, f"profile entry {entry!r}")
        end = parse_rate(end_text, f"profile entry {entry!r}") if dots else start
        segments.append(Segment(seconds, start, end))
    return Profile(tuple(segments))
