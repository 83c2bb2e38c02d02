"""The demo's clock: how many real seconds one demo second stands for, and every conversion between the two.

With GPU nodes under the replicas the demo runs compressed (``--time-scale``, 20 by default): a node that takes three
minutes to come up takes 9 s, a 15 s HPA sync 0.75 s, so a half-hour surge runs in minutes. Every Kubernetes and
cloud delay, every window and the load profile are real-time figures put on the demo's clock; every figure the run
reports (time to capacity, GPU-node-seconds, node timestamps) is a demo-time measurement put back in real time. The
request rates are the same numbers on both clocks (the replicas serve in real time), but a count drawn over a demo
second stands for one over ``time_scale`` real seconds.

Each conversion is a method of :class:`DemoClock`, with its rounding, so no part of the load test divides or
multiplies by the time scale on its own:

* durations: :meth:`~DemoClock.demo_seconds` and :meth:`~DemoClock.real_seconds` (exact);
* whole seconds, for the HPA fields that are integers (``periodSeconds``, ``stabilizationWindowSeconds``):
  :meth:`~DemoClock.demo_whole_seconds`, rounded as Python's ``round`` rounds (halves to even), never below ``least``;
* PromQL ranges and resolutions: :meth:`~DemoClock.demo_promql_duration`, whole milliseconds, at least 1 ms;
* settings dataclasses: :meth:`~DemoClock.demo_settings`, every ``*_s`` field;
* load profiles: :meth:`~DemoClock.demo_profile` and :meth:`~DemoClock.real_profile`;
* counts and rates of change: :meth:`~DemoClock.demo_count` (a real stretch's count as its demo second's) and
  :meth:`~DemoClock.demo_rate` (per real second to per demo second);
* reported figures and timestamps: :meth:`~DemoClock.real_figure`, demo seconds as real seconds to 0.1 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from clikit.durations import parse_prometheus_duration

if TYPE_CHECKING:
    from _typeshed import DataclassInstance  # any dataclass (typeshed's protocol; not importable at run time)

__all__ = ["REAL_TIME", "DemoClock"]

T = TypeVar("T", bound="DataclassInstance")
S = TypeVar("S", bound="Stretchable")


class Stretchable(Protocol):
    """A shape in time that stretches by a factor (a load profile)."""

    def scaled(self: S, time_factor: float = 1.0) -> S: ...


@dataclass(frozen=True)
class DemoClock:
    """``time_scale`` real seconds per demo second: 1 runs in real time, above 1 faster (never slower)."""

    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.time_scale) and self.time_scale >= 1):
            raise ValueError(f"time_scale {self.time_scale:g}: the demo's clock can run faster than real time, not "
                             "slower (expected 1 or more)")

    @property
    def compressed(self) -> bool:
        return self.time_scale != 1.0

    # -- real time -> demo time --------------------------------------------------------------------------------
    def demo_seconds(self, real_s: float) -> float:
        return real_s / self.time_scale

    def demo_whole_seconds(self, real_s: float, *, least: int = 0) -> int:
        return max(least, round(real_s / self.time_scale))

    def demo_promql_duration(self, real: str) -> str:
        """A Prometheus duration (``5m``) on the demo's clock, in whole milliseconds (``15000ms``), at least 1 ms."""
        return f"{max(round(self.demo_seconds(parse_prometheus_duration(real)) * 1000), 1)}ms"

    def demo_settings(self, settings: T) -> T:
        """``settings`` (a dataclass) with every ``*_s`` field on the demo's clock (``None`` stays ``None``)."""
        values: dict[str, Any] = {f.name: self.demo_seconds(getattr(settings, f.name))
                                  for f in fields(settings)
                                  if f.name.endswith("_s") and getattr(settings, f.name) is not None}
        return replace(settings, **values)

    def demo_profile(self, real: S) -> S:
        return real.scaled(time_factor=1 / self.time_scale)

    def demo_count(self, real_count: float) -> float:
        """What was counted over ``time_scale`` real seconds, as the count of the demo second standing for them."""
        return real_count / self.time_scale

    def demo_rate(self, per_real_second: float) -> float:
        """A rate of change per real second (a growth in requests/s per second), per demo second."""
        return per_real_second * self.time_scale

    # -- demo time -> real time --------------------------------------------------------------------------------
    def real_seconds(self, demo_s: float) -> float:
        return demo_s * self.time_scale

    def real_figure(self, demo_s: float | None) -> float | None:
        """A duration or a timestamp measured on the demo's clock, reported in real seconds to 0.1 s."""
        return None if demo_s is None else round(self.real_seconds(demo_s), 1)

    def real_profile(self, demo: S) -> S:
        return demo.scaled(time_factor=self.time_scale)


REAL_TIME = DemoClock()
"""The demo without GPU nodes, and ``gpu-loadtest run``: one demo second is one real second."""
