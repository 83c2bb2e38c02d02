"""When each virtual user of an execution starts, and the throughput cap over time, as Taurus' JMeter runs them
(pure).

Taurus turns an execution into a JMeter thread group (``LoadSettingsProcessor`` in ``bzt/jmx/tools.py``): without
``iterations`` and with a duration (``ramp-up`` + ``hold-for``) it is the Concurrency Thread Group of
jmeter-plugins; with ``iterations``, or with no duration at all (then 1 iteration), JMeter's regular Thread Group.

* Concurrency Thread Group (``ConcurrencyThreadStarter.getPlannedConcurrency`` in undera/jmeter-plugins,
  plugins/casutg): ``t`` seconds in, the planned concurrency is the target once ``t`` is past the ramp-up;
  during it, ``round(target * t / ramp-up)``, or with ``steps``, ``round(target / steps * (floor(t / step) + 1))``
  where a step lasts ``ramp-up / steps`` (``round`` is Java's ``Math.round``: halves go up). A user starts when
  the planned concurrency first reaches its number, and users run until ``ramp-up + hold-for``.
* Thread Group (``ThreadGroup`` in JMeter): user ``i`` (from 0) starts ``i * ramp-up / concurrency`` seconds in;
  each runs ``iterations`` passes, stopped at ``ramp-up + hold-for`` when ``hold-for`` is set.

The throughput cap is Taurus' RPS shaper (``_add_shaper`` in ``bzt/jmx/tools.py``, JMeter's Throughput Shaping
Timer), a list of rows ``(start rps, end rps, seconds)``: over the ramp-up, a line from ``throughput / duration``
(at least 1) to ``throughput``, or with ``steps`` one flat row per step (``throughput / steps * n``, whole seconds,
the remainder carried into the next step); then ``throughput`` for ``hold-for``. Rates are rounded to 3 decimals and
durations truncated to whole seconds, as Taurus writes them into the JMX.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RateCap", "concurrency_group_starts", "shaper_rows", "thread_group_starts"]


def _java_round(x: float) -> int:
    """Java's ``Math.round``: the nearest whole number, halves up."""
    return math.floor(x + 0.5)


def concurrency_group_starts(target: int, ramp_up: float, steps: int | None) -> list[float]:
    """The start time of each user (1..target) of a Concurrency Thread Group, in seconds from its start."""
    if ramp_up <= 0:
        return [0.0] * target
    if steps:
        step_len = ramp_up / steps
        levels = [min(_java_round(target / steps * (j + 1)), target) for j in range(steps)]
        return [next(j for j, level in enumerate(levels) if level >= k) * step_len for k in range(1, target + 1)]
    # round(target * t / ramp_up) >= k  <=>  t >= (k - 0.5) * ramp_up / target
    return [(k - 0.5) * ramp_up / target for k in range(1, target + 1)]


def thread_group_starts(threads: int, ramp_up: float) -> list[float]:
    """The start time of each thread of a regular Thread Group: evenly spread over the ramp-up, the first at 0."""
    return [i * ramp_up / threads for i in range(threads)]


def shaper_rows(throughput: float, ramp_up: float, hold: float, steps: int | None) -> list[tuple[float, float, int]]:
    """Taurus' RPS shaper schedule: ``(start rps, end rps, seconds)`` rows."""
    duration = ramp_up + hold
    rows: list[tuple[float, float, int]] = []
    if ramp_up:
        start = max(throughput / duration, 1.0)
        if not steps:
            rows.append((round(start, 3), round(throughput, 3), int(ramp_up)))
        else:
            height, width, carried = throughput / steps, ramp_up / steps, 0
            for step in range(1, steps + 1):
                seconds = int(width * step - carried)
                rows.append((round(height * step, 3), round(height * step, 3), seconds))
                carried += seconds
    if hold:
        rows.append((round(throughput, 3), round(throughput, 3), int(hold)))
    return rows


@dataclass(frozen=True)
class RateCap:
    """A shaper schedule read over time: the cap ``t`` seconds in (linear within a row), 0 once it is over."""

    rows: tuple[tuple[float, float, int], ...]

    @property
    def duration(self) -> float:
        return float(sum(seconds for _, _, seconds in self.rows))

    def rate_at(self, t: float) -> float:
        at = 0.0
        for start, end, seconds in self.rows:
            if seconds > 0 and t < at + seconds:
                return start + (end - start) * max(t - at, 0.0) / seconds
            at += seconds
        return 0.0
