"""The HPA's decisions in a cluster's records, grouped into scale-ups and measured as the demo measures a surge
(pure; :mod:`loadtest.measure.time_to_capacity`).

A **decision** is one ``SuccessfulRescale`` of the workload's HPA: when, the new size, and which way (from its
reason; the size before comes from the Deployment's ``ScalingReplicaSet ... from N`` or the decision before). A
**scale-up** starts at an upward decision and takes in the further upward decisions that come before its capacity,
or within ``rounds_within`` seconds after it (the HPA's next round, once the replicas it asked for serve and show it
the load); a downward decision ends it. Its **new replicas** are the workload's pods created from its first decision
on, until the next decision outside it.

Its figures are the demo's, counted from the HPA's first decision (the load's rise and the HPA's reaction to it are
not in the API): **time to capacity** until the HPA has made its last decision of the scale-up and as many new
replicas as it asked for (``asked - before``) are Ready, or, with the size before unknown, all of them are;
**behind demand** from the decision that first asked for the final size; the four **phases** charged as the demo
charges them (at each moment the slowest new replica still on its way: ``node``, ``image``, ``model``, else
``decision``); the first new replica's wait for a GPU; the new replicas' pending pod-seconds; the nodes launched.
Requests are not in the API: unknown. Any figure that needs a mark the records lack is unknown, and a scale-up is
"not reached" only when a new replica is known to be still on its way at the end of the records.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise

from loadtest.measure.cluster import messages
from loadtest.measure.cluster.objects import Event, Records
from loadtest.measure.cluster.replicas import EventIndex, Replica, is_placeholder
from loadtest.measure.time_to_capacity import PHASES, ScaleUp, charged_phase
from loadtest.nodes.cluster import PodSpan, unbound_seconds

__all__ = ["ClusterScaleUp", "Decision", "decisions", "launches", "scale_ups"]

CREATION_SLACK_S = 1.0  # event and object times are whole seconds: a pod may read as created just before its decision
SCALED_WITHIN_S = 30.0  # the Deployment's ScalingReplicaSet follows the HPA's update of the scale within this long


@dataclass(frozen=True)
class Decision:
    t: float
    size: int
    direction: int | None
    reason: str
    before: int | None


def decisions(events: Iterable[Event], hpa: str, deployment: str) -> tuple[list[Decision], list[str]]:
    """The HPA's rescales in time order, and a note for each event that folded more rescales than it keeps."""
    index = EventIndex(events)
    scaled = [(t, said) for e in index.about("Deployment", deployment, reason="ScalingReplicaSet")
              for said in [messages.replica_set_scaled(e.message)] if said for t in e.times]
    found: dict[tuple[float, int], Decision] = {}
    notes = []
    for event in index.about("HorizontalPodAutoscaler", hpa, reason="SuccessfulRescale"):
        said = messages.rescale(event.message)
        if said is None:
            continue
        if event.count > len(event.times):
            notes.append(f"the HPA rescaled to {said.size} {event.count} times; the records keep "
                         f"{len(event.times)} of them (--watch keeps each)")
        for t in event.times:
            before = next((old for at, (_, to, old) in scaled if t - CREATION_SLACK_S <= at <= t + SCALED_WITHIN_S
                           and to == said.size and old is not None), None)
            found[(t, said.size)] = Decision(t, said.size, messages.rescale_direction(said.reason), said.reason,
                                             before)
    ordered, previous = [], None
    for d in sorted(found.values(), key=lambda d: d.t):
        before = d.before if d.before is not None else previous
        direction = d.direction if d.direction is not None or before is None else (d.size > before) - (d.size < before)
        ordered.append(Decision(d.t, d.size, direction, d.reason, before))
        previous = d.size
    return ordered, notes


def launches(records: Records, pods: set[str]) -> list[tuple[float, int]] | None:
    """``(when, nodes)`` of the node launches for ``pods`` (the workload's and its placeholders'): Karpenter's
    NodeClaims that hosted one or that a Nominated event named for one, else Cluster Autoscaler's scale-ups their
    TriggeredScaleUp events name (each node-group step once); ``None`` when neither autoscaler left records."""
    index = EventIndex(records.events)
    if records.karpenter:
        named = {messages.nominated_nodeclaim(e.message) for e in index.by_reason.get("Nominated", ())
                 if e.kind == "Pod" and e.name in pods}
        hosts = {p.node for p in records.pods if p.name in pods and p.node}
        return sorted((c.created, 1) for c in records.nodeclaims if c.name in named or c.node in hosts)
    steps: dict[tuple[str, int, int], float] = {}
    for event in index.by_reason.get("TriggeredScaleUp", ()):
        if event.kind == "Pod" and event.name in pods:
            for info in messages.triggered_scale_up(event.message) or ():
                steps.setdefault((info.group, info.current, info.new), event.first)
    if not steps:
        return None
    return sorted((t, new - current) for (_, current, new), t in steps.items())


@dataclass(frozen=True)
class ClusterScaleUp:
    """A scale-up: its figures (``figures``, the demo's ``ScaleUp``, times in seconds since the window's start),
    the decisions it took in, its new replicas, and ``state``: ``reached``, ``not reached`` or ``unknown``."""

    figures: ScaleUp
    decisions: tuple[Decision, ...]
    replicas: tuple[Replica, ...]
    state: str
    notes: tuple[str, ...] = field(default=())


def _span(r: Replica) -> PodSpan:
    m = r.marks
    return PodSpan(r.created, m["scheduled"], m["started"], m["ready"], r.deleted)


def _authoritative(r: Replica) -> bool:
    """A listed pod that is still there and never restarted: a mark its status lacks has not happened yet."""
    return not r.events_only and r.deleted is None and not r.restarted


def _known_until(r: Replica) -> float:
    """Until when the replica's state is known: for ever where its status speaks for it or where its last known
    mark came after its deletion, else up to its last mark before the first one the records lack."""
    if _authoritative(r):
        return float("inf")
    previous = r.created
    for mark in ("scheduled", "started", "ready"):
        at = r.marks[mark]
        if at is None:
            return float("inf") if r.deleted is not None and r.deleted <= previous else previous
        previous = at
    return float("inf")


def _outstanding_at_end(r: Replica) -> bool:
    """Known to be still on its way at the end of the records."""
    return _authoritative(r) and r.marks["ready"] is None


def _capacity(episode: Sequence[Decision], new: Sequence[Replica]) -> tuple[float | None, str]:
    """When the scale-up reached capacity, and ``reached``, ``not reached`` or ``unknown``."""
    asked, before = max(d.size for d in episode), episode[0].before
    need = None if before is None else asked - before
    if any(_known_until(r) < float("inf") for r in new):
        return None, "unknown"
    readies = [(r.marks["ready"], r.deleted) for r in new]
    if need is not None:
        moments = sorted({t for t, _ in readies if t is not None} | {episode[-1].t})
        for t in moments:
            ready = sum(1 for r, gone in readies if r is not None and r <= t and (gone is None or gone > t))
            if t >= episode[-1].t and ready >= need:
                return t, "reached"
        return None, "not reached"
    if any(_outstanding_at_end(r) for r in new) or not new:
        return None, "not reached" if new else "unknown"
    return max([episode[-1].t] + [t for t, gone in readies if t is not None and (gone is None or gone > t)]), \
        "reached"


def _split(start: float, end: float, new: Sequence[Replica]) -> dict[str, float | None]:
    """The demo's four phases over ``[start, end)``: at each moment the slowest new replica still on its way."""
    if any(_known_until(r) < end for r in new):
        return dict.fromkeys(PHASES)
    spans = [_span(r) for r in new]
    cuts = sorted({start, end} | {t for s in spans for t in (s.created, s.bound, s.running, s.ready, s.deleted)
                                  if t is not None and start < t < end})
    phases = dict.fromkeys(PHASES, 0.0)
    for a, b in pairwise(cuts):
        phases[charged_phase(s.state(a) for s in spans)] += b - a
    return {k: round(v, 3) for k, v in phases.items()}


def _measure(index: int, episode: Sequence[Decision], new: Sequence[Replica], t0: float, end: float,
             launched: list[tuple[float, int]] | None) -> ClusterScaleUp:
    first = episode[0]
    capacity, state = _capacity(episode, new)
    until = capacity if capacity is not None else end
    asked = max(d.size for d in episode)
    phases = _split(first.t, until, new) if state != "unknown" else dict.fromkeys(PHASES)
    first_new = min(new, key=lambda r: r.created, default=None)
    wait = None if first_new is None else (
        None if first_new.marks["scheduled"] is None else max(0.0, first_new.marks["scheduled"] - first_new.created))
    pending = None if any(r.marks["scheduled"] is None and not _authoritative(r) for r in new) else \
        round(sum(unbound_seconds(r.created, r.marks["scheduled"], r.deleted, first.t, until) for r in new), 1)
    nodes = None if launched is None else sum(n for t, n in launched if first.t - CREATION_SLACK_S <= t < until)
    asked_at = next(d.t for d in episode if d.size >= asked)
    figures = ScaleUp(
        surge=index, load_step_s=None, first_decision_s=first.t - t0,
        time_to_capacity_s=None if capacity is None else capacity - first.t, replicas_before=first.before,
        replicas_asked=asked, phases_s=phases, first_replica_wait_s=wait, pending_pod_seconds=pending,
        requests_failed=None, requests_queued=None, nodes_launched=nodes,
        behind_demand_s=None if capacity is None else capacity - asked_at)
    unknown = ["load_step_s", "requests_failed", "requests_queued"]
    if state == "unknown":
        unknown += ["time_to_capacity_s", "behind_demand_s"]
    unknown += [f"phases_s.{k}" for k, v in phases.items() if v is None]
    unknown += [k for k, v in (("replicas_before", first.before), ("first_replica_wait_s", wait),
                               ("pending_pod_seconds", pending), ("nodes_launched", nodes)) if v is None]
    notes = [f"{r.pod}: gone, and only its events are in the records (--watch keeps such pods)"
             for r in new if r.events_only]
    return ClusterScaleUp(replace(figures, unknown=tuple(dict.fromkeys(unknown))), tuple(episode), tuple(new),
                          state, tuple(notes))


def scale_ups(found: Sequence[Decision], replicas: Sequence[Replica], records: Records, *, t0: float, until: float,
              rounds_within: float) -> list[ClusterScaleUp]:
    """The scale-ups of ``found`` (the HPA's decisions), each with its new replicas among ``replicas``."""
    pods = {r.pod for r in replicas} | {p.name for p in records.pods if is_placeholder(p)}
    launched = launches(records, pods)
    out: list[ClusterScaleUp] = []
    i = 0
    while i < len(found):
        if found[i].direction != 1:
            i += 1
            continue
        j = i + 1
        while j < len(found) and found[j].direction == 1:
            new = _new(found[i].t, found[j].t, replicas)
            capacity, _ = _capacity(found[i:j], new)
            settled = capacity if capacity is not None else max(
                [found[j - 1].t] + [r.marks["ready"] or r.created for r in new])
            if found[j].t > settled + rounds_within:
                break
            j += 1
        end = found[j].t if j < len(found) else until
        out.append(_measure(len(out) + 1, found[i:j], _new(found[i].t, end, replicas), t0, end, launched))
        i = j
    return out


def _new(start: float, end: float, replicas: Sequence[Replica]) -> list[Replica]:
    return [r for r in replicas if start - CREATION_SLACK_S <= r.created < end]
