"""What one HPA sync decided, as a run records it: the demo's HPA loop writes one per sync, ``gpu-loadtest run``
one per change it sees in a real HPA's status; the timeline, the summary and the plot read them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["SyncRecord"]


@dataclass(frozen=True)
class SyncRecord:
    """One HPA sync (or, watching a cluster, one observed change): ``current`` -> ``desired`` at ``t``."""

    t: float
    current: int
    desired: int
    metric: float | None = None  # the first metric's value, as in ``readings``
    reason: str = ""
    error: str | None = None
    # Every metric's value as the sync read it, by name: a Pods metric's per-pod average, an Object metric's value,
    # an External metric's sum over its series.
    readings: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def direction(self) -> int:
        return (self.desired > self.current) - (self.desired < self.current)
