"""Time to capacity: for each surge of the load, how long from its start until every replica the HPA asked for
serves, and what that time was spent on (pure; times in the run's seconds since the load started).

A surge starts where the load starts to rise and lasts until it starts to fall. Its **time to capacity** ends at
the first moment after its first scale-up decision when the HPA has asked for at least the replicas the surge's load
needs (``needed``: its peak rate at the HPA's target) and every replica it asks for then is ready (``None`` when that
never happened before the load fell). The time is split into four **phases** that add up to it: at each moment the
slowest thing still outstanding is charged:

* ``node``: some replica asked for waits unscheduled for a GPU (a node is being provisioned, or none can be);
* ``image``: some replica is bound and its image is being pulled;
* ``model``: some replica runs and loads its model (not ready yet);
* ``decision``: no replica asked for is on its way: the HPA has not (yet) asked for the replicas the load needs.

For a ramp, the time to capacity includes the ramp itself, while no capacity is missing yet. **Behind demand**
measures only the wait: from the moment the surge's load first needs the replicas it ends with (its rate exceeds
what one fewer serve at the HPA's target) to capacity. For a step the two are the same.

Per surge also: how long the **first new replica waited** for a GPU (from the first scale-up decision to its
pod's binding: 0 when it took a placeholder's GPU), the workload pods' **pending pod-seconds** in it, the
**requests failed** (errors and drops) and **queued** (answered after waiting in a replica's queue: more than twice
the service time) from its start to capacity, and the **nodes launched** in it.

A scale-up measured from a cluster's records (:mod:`loadtest.measure.cluster`) has the same figures, and some of them
may be **unknown**: the records did not hold them (events expired, no autoscaler, no load in the API). Those are
``None`` and named in ``unknown``, so a ``None`` that is not named there keeps its meaning (not reached, none).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from loadtest.clock import REAL_TIME, DemoClock
from loadtest.hpa.record import SyncRecord
from loadtest.loadgen.profile import Profile
from loadtest.measure.timeline import TimelineRow
from loadtest.nodes.cluster import PodSpan, unbound_seconds

__all__ = ["PHASES", "ScaleUp", "Surge", "charged_phase", "demand_for", "measure", "no_scale_up_needed", "replicas_for",
           "replicas_needed", "surges"]

PHASES = ("decision", "node", "image", "model")


@dataclass(frozen=True)
class Surge:
    start: float
    end: float


@dataclass(frozen=True)
class ScaleUp:
    surge: int
    load_step_s: float | None  # None: the load is not known (a cluster's capacity report)
    first_decision_s: float | None
    time_to_capacity_s: float | None
    replicas_before: int | None
    replicas_asked: int | None
    phases_s: dict[str, float | None]
    first_replica_wait_s: float | None
    pending_pod_seconds: float | None
    requests_failed: int | None
    requests_queued: int | None
    nodes_launched: int | None
    behind_demand_s: float | None = None
    unknown: tuple[str, ...] = ()  # the figures the records did not hold: "time_to_capacity_s", "phases_s.node"...
    replicas_needed: int | None = None  # what the surge's load needed; replicas_before at or above it: none asked

    def to_json(self, clock: DemoClock = REAL_TIME) -> dict[str, Any]:
        """Seconds in real time (the real-time equivalents of a compressed run), to 0.1 s; ``unknown`` as a list."""
        doc = asdict(self)
        for key in ("load_step_s", "first_decision_s", "time_to_capacity_s", "first_replica_wait_s",
                    "pending_pod_seconds", "behind_demand_s"):
            doc[key] = clock.real_figure(doc[key])
        doc["phases_s"] = {k: clock.real_figure(v) for k, v in self.phases_s.items()}
        doc["unknown"] = list(self.unknown)
        return doc


def charged_phase(states: Iterable[str | None]) -> str:
    """The phase a moment of a scale-up is charged to: the slowest thing still outstanding among the states of the
    replicas asked for (``node`` before ``image`` before ``model``), else ``decision``."""
    waiting = set(states)
    return next((p for p in PHASES[1:] if p in waiting), "decision")


def no_scale_up_needed(surge: Mapping[str, Any]) -> bool:
    """A surge (its JSON) whose load the replicas already serving carried: the HPA asked for none and none was
    needed (``replicas_needed`` known, and no more than ``replicas_before``). Its time to capacity is ``None``
    without being "not reached"."""
    before, needed = surge.get("replicas_before"), surge.get("replicas_needed")
    return surge.get("time_to_capacity_s") is None and surge.get("first_decision_s") is None and \
        before is not None and needed is not None and before >= needed


def surges(profile: Profile) -> list[Surge]:
    """Each rise of the load, from where it starts to rise (a rising segment, or a step up from the previous
    segment's rate) to where it starts to fall (a falling segment, or a step down)."""
    found: list[Surge] = []
    start = None
    before = profile.segments[0].start_rate
    for at, segment in zip(profile.starts(), profile.segments, strict=True):
        rises = segment.end_rate > segment.start_rate or segment.start_rate > before
        falls = segment.end_rate < segment.start_rate or segment.start_rate < before
        if falls and start is not None:
            found.append(Surge(start, at))
            start = None
        if rises and start is None:
            start = at
        before = segment.end_rate
    if start is not None:
        found.append(Surge(start, profile.duration))
    return found


def replicas_needed(profile: Profile, surge: Surge, per_replica: float) -> int:
    """Replicas the surge's own peak rate needs at ``per_replica`` requests/s each (a surge lower than the
    profile's peak needs fewer)."""
    peak = max(segment.peak for at, segment in zip(profile.starts(), profile.segments, strict=True)
               if surge.start <= at < surge.end)
    return replicas_for(peak, per_replica)


def replicas_for(rate: float, per_replica: float) -> int:
    """Replicas that serve ``rate`` requests/s at ``per_replica`` each (the quotient rounded to 9 places first, so
    that 55 at 55/4 each is 4, not 5)."""
    return math.ceil(round(rate / per_replica, 9))


def demand_for(profile: Profile, surge: Surge, replicas: int, per_replica: float, step_s: float = 0.05) -> float:
    """When the surge's load first needs ``replicas`` (its rate above what one fewer serve at ``per_replica``
    requests/s each); the surge's start when one replica or fewer."""
    floor = (replicas - 1) * per_replica
    t = surge.start
    while t < surge.end and replicas > 1 and profile.rate_at(t) <= floor:
        t += step_s
    return min(t, surge.end)


def measure(index: int, surge: Surge, syncs: Sequence[SyncRecord], pods: Sequence[PodSpan],
            rows: Sequence[TimelineRow], launches: Sequence[float], *, needed: int, service_s: float,
            step_s: float = 0.05, demand_at: float | None = None) -> ScaleUp:
    """The figures of one surge; ``launches`` are the times nodes were requested; ``demand_at``: when the surge's
    load first needs ``needed`` replicas (:func:`demand_for`), for the time behind demand."""
    ups = [s for s in syncs if surge.start <= s.t < surge.end and s.direction > 0]
    before = next((s.current for s in reversed(syncs) if s.t < surge.start), syncs[0].current if syncs else None)
    phases = dict.fromkeys(PHASES, 0.0)
    capacity_at, asked = None, None
    if ups:
        steps = round((surge.end - surge.start) / step_s)
        desired, k = before or 0, 0
        for i in range(steps):
            t = surge.start + i * step_s
            while k < len(syncs) and syncs[k].t <= t:
                desired, k = syncs[k].desired, k + 1
            states = [p.state(t) for p in pods]
            ready = sum(1 for s in states if s == "ready")
            if t >= ups[0].t and desired >= needed and ready >= desired:
                capacity_at, asked = t, desired
                break
            phases["decision" if t < ups[0].t else charged_phase(states)] += step_s
    end = capacity_at if capacity_at is not None else surge.end
    pending = sum(unbound_seconds(p.created, p.bound, p.deleted, surge.start, end) for p in pods)
    first_new = min((p for p in pods if ups and p.created >= ups[0].t - 1e-6 and p.created < end),
                    key=lambda p: p.created, default=None)
    first_wait = None
    if first_new is not None:
        bound = first_new.bound if first_new.bound is not None else end
        first_wait = max(0.0, bound - first_new.created)
    window = [r for r in rows if surge.start <= r.t < end]
    failed = sum(r.failed for r in window)
    queued = sum(1 for r in window for latency in r.latencies_s if latency > 2 * service_s)
    if asked is None:
        asked = max((s.desired for s in ups), default=None)
    return ScaleUp(index, surge.start, ups[0].t if ups else None,
                   None if capacity_at is None else capacity_at - surge.start, before, asked,
                   {k: round(v, 3) for k, v in phases.items()}, first_wait, pending, failed, queued,
                   sum(1 for at in launches if surge.start <= at < end),
                   None if capacity_at is None or demand_at is None else max(0.0, capacity_at - demand_at),
                   replicas_needed=needed)
