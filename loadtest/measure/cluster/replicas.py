"""Each new replica's way from its pod's creation to Ready, from a cluster's records (pure).

A replica's **marks** are the moments its records hold: created; for a replica that waited for a node created after
it (``new_node``), when the autoscaler acted (Karpenter created the NodeClaim; Cluster Autoscaler wrote
TriggeredScaleUp on the pod), the instance launched (NodeClaim ``Launched``), the Node registered (``Registered``, or
the Node's creation), turned Ready, and its GPUs became allocatable (``Initialized``: Karpenter waits for every
requested resource); then bound (PodScheduled), its containers started, and Ready (the model loaded). Between them
lie the **sub-phases**: ``autoscaler``, ``launch``, ``registration``, ``node_ready``, ``gpus``, ``scheduling``,
``image_pull`` (as the kubelet reported it in its Pulled events), ``container_start`` (binding to start, less the
pull) and ``readiness``; and the demo's three per-replica **phases**: ``node`` (created to bound), ``image`` (bound to
started) and ``model`` (started to Ready). A mark the records do not hold is unknown, and so is every figure that
needs it: never guessed. A mark before the pod existed (a node launched for a placeholder earlier) counts from the
pod's creation. Cluster Autoscaler writes no launch of its own: its ``launch`` runs from TriggeredScaleUp to the
Node's registration, and ``registration`` does not apply. Without Karpenter the GPUs' arrival is on record only where
``--watch`` saw the Node's allocatable ``nvidia.com/gpu`` go from 0 to more (dated when the watch saw it); else
``gpus`` and ``scheduling`` are unknown (their sum, Ready to bound, is in ``node``).

Preemption: the scheduler writes ``Preempted`` on each victim, naming the preemptor. A replica that preempted a
placeholder (a pod under a negative priority, or the chart's ``app.kubernetes.io/component: headroom``) took its
GPU; one that was not bound to the node it preempted on, or whose room the scheduler gave to another pod first, is
**stuck**, not slow (docs/capacity.md, "Placeholder settings").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadtest.measure.cluster import messages
from loadtest.measure.cluster.objects import Event, Node, NodeClaim, Pod, Records

__all__ = ["MARKS", "PHASES", "SUB_PHASES", "EventIndex", "Preemption", "Replica", "Stuck", "is_placeholder",
           "replicas", "workload_pods"]

MARKS = ("created", "autoscaler", "launched", "registered", "node_ready", "gpus", "scheduled", "started", "ready")
SUB_PHASES = ("autoscaler", "launch", "registration", "node_ready", "gpus", "scheduling", "image_pull",
              "container_start", "readiness")
PHASES = ("node", "image", "model")
HEADROOM_LABEL = ("app.kubernetes.io/component", "headroom")  # charts/gpu-autoscaler/templates/headroom/


def is_placeholder(pod: Pod) -> bool:
    return pod.priority < 0 or pod.labels.get(HEADROOM_LABEL[0]) == HEADROOM_LABEL[1]


def _of_deployment(replica_set: str | None, deployment: str) -> bool:
    """A ReplicaSet of the Deployment is named ``<deployment>-<pod-template-hash>``."""
    return replica_set is not None and replica_set.rsplit("-", 1)[0] == deployment


def workload_pods(pods: Iterable[Pod], deployment: str) -> list[Pod]:
    return [p for p in pods if _of_deployment(p.owner, deployment) and not is_placeholder(p)]


class EventIndex:
    """Events by the object they are about (uid, else kind and name) and by reason."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.by_uid: dict[str, list[Event]] = defaultdict(list)
        self.by_name: dict[tuple[str, str], list[Event]] = defaultdict(list)
        self.by_reason: dict[str, list[Event]] = defaultdict(list)
        for event in sorted(events, key=lambda e: e.first):
            if event.object_uid:
                self.by_uid[event.object_uid].append(event)
            self.by_name[(event.kind, event.name)].append(event)
            self.by_reason[event.reason].append(event)

    def about(self, kind: str, name: str, uid: str = "", reason: str | None = None) -> list[Event]:
        found = self.by_uid.get(uid) if uid else None
        events = found if found else [e for e in self.by_name.get((kind, name), ()) if not uid or not e.object_uid
                                      or e.object_uid == uid]
        return [e for e in events if reason is None or e.reason == reason]


@dataclass(frozen=True)
class Preemption:
    """The replica preempted ``victim`` on ``node`` at ``at``; ``placeholder``: whether the victim was one of the
    headroom's placeholders (``None``: the victim is not in the records)."""

    victim: str
    placeholder: bool | None
    node: str
    at: float


@dataclass(frozen=True)
class Stuck:
    """Pending with its nomination while the room went elsewhere: from the preemption (``since``) to its binding
    (``until``; ``None``: still Pending at the end of the records); ``taken_by``: the pod the scheduler bound to that
    node meanwhile, where an event names one."""

    node: str
    since: float
    until: float | None
    taken_by: str | None


@dataclass(frozen=True)
class Replica:
    """One workload pod and what its records say. ``events_only``: the pod is gone and was never listed (nor seen by
    ``--watch``), so only its events speak for it."""

    pod: str
    uid: str
    created: float
    deleted: float | None
    node: str | None
    new_node: bool | None
    autoscaler: str | None
    nodeclaim: str | None
    marks: Mapping[str, float | None]
    image_pull_s: float | None
    image_cached: bool | None
    preemption: Preemption | None = None
    stuck: Stuck | None = None
    events_only: bool = False
    nominated_node: str | None = None
    restarted: bool = False
    unschedulable: str | None = None  # the scheduler's first FailedScheduling message: why it waited
    ready_since: float | None = None  # Ready at least since then (its first readiness may be unknown)

    def not_applicable(self) -> set[str]:
        """Sub-phases that do not apply: the node's when the replica found a node (or is not bound yet), and
        ``registration`` under Cluster Autoscaler (inside its ``launch``)."""
        if not self.new_node:
            return {"autoscaler", "launch", "registration", "node_ready", "gpus"}
        return {"registration"} if self.autoscaler == "cluster-autoscaler" else set()

    def sub_phases(self) -> dict[str, float | None]:
        """Seconds of each sub-phase that applies (``None``: unknown)."""
        m, skip = self.marks, self.not_applicable()
        ends = [("autoscaler", m["autoscaler"]), ("launch", m["launched"]), ("registration", m["registered"]),
                ("node_ready", m["node_ready"]), ("gpus", m["gpus"]), ("scheduling", m["scheduled"])]
        if self.autoscaler == "cluster-autoscaler":
            ends[1] = ("launch", m["registered"])
        out: dict[str, float | None] = {}
        before: float | None = self.created
        for name, end in (e for e in ends if e[0] not in skip):
            at = None if end is None else max(end, self.created)
            out[name] = None if at is None or before is None else max(0.0, at - before)
            before = at if at is None or before is None else max(at, before)
        scheduled, started, ready = m["scheduled"], m["started"], m["ready"]
        out["image_pull"] = self.image_pull_s
        pull = self.image_pull_s
        out["container_start"] = (None if scheduled is None or started is None or pull is None
                                  else max(0.0, started - scheduled - pull))
        out["readiness"] = _span(started, ready)
        return out

    def phases(self) -> dict[str, float | None]:
        """The demo's per-replica phases: created to bound, bound to started, started to Ready."""
        m = self.marks
        return {"node": _span(self.created, m["scheduled"]), "image": _span(m["scheduled"], m["started"]),
                "model": _span(m["started"], m["ready"])}

    def to_json(self, t0: float) -> dict[str, Any]:
        """Marks in seconds since ``t0`` (the window's start), durations to 0.1 s; ``not_applicable`` and ``unknown``
        name the sub-phases that do not apply and those the records did not hold."""
        subs = self.sub_phases()
        return {
            "pod": self.pod, "node": self.node, "new_node": self.new_node, "autoscaler": self.autoscaler,
            "nodeclaim": self.nodeclaim, "events_only": self.events_only,
            "marks_s": {k: _round(None if v is None else v - t0) for k, v in self.marks.items()},
            "phases_s": {k: _round(v) for k, v in self.phases().items()},
            "sub_phases_s": {k: _round(v) for k, v in subs.items()},
            "not_applicable": sorted(self.not_applicable()),
            "unknown": [k for k, v in {**self.phases(), **subs}.items() if v is None],
            "image_cached": self.image_cached,
            "preemption": None if self.preemption is None else {
                "victim": self.preemption.victim, "placeholder": self.preemption.placeholder,
                "node": self.preemption.node, "at_s": _round(self.preemption.at - t0)},
            "stuck": None if self.stuck is None else {
                "node": self.stuck.node, "since_s": _round(self.stuck.since - t0),
                "until_s": _round(None if self.stuck.until is None else self.stuck.until - t0),
                "taken_by": self.stuck.taken_by},
            "nominated_node": self.nominated_node, "unschedulable": self.unschedulable,
        }


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, end - start)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


class _Cluster:
    """The records around the workload's pods, indexed."""

    def __init__(self, records: Records) -> None:
        self.events = EventIndex(records.events)
        self.nodes: dict[str, Node] = {n.name: n for n in records.nodes}
        self.claims: dict[str, NodeClaim] = {c.node: c for c in records.nodeclaims if c.node}
        self.pods: dict[str, Pod] = {p.name: p for p in records.pods}
        self.placeholder_sets = {p.owner for p in records.pods if is_placeholder(p) and p.owner}
        self.preemptions = [(e, messages.preempted_by(e.message)) for e in self.events.by_reason.get("Preempted", ())]

    def placeholder(self, victim: str) -> bool | None:
        pod = self.pods.get(victim)
        if pod is not None:
            return is_placeholder(pod)
        if any(victim.rsplit("-", 1)[0] == owner for owner in self.placeholder_sets):
            return True
        return None

    def preemption_by(self, pod: Pod) -> Preemption | None:
        """The latest preemption this pod made."""
        found = None
        for event, said in self.preemptions:
            if said is None:
                continue
            uid, name, node = said
            if (pod.uid and pod.uid in (uid, event.related_uid)) or pod.name in (name, event.related_name):
                found = Preemption(event.name, self.placeholder(event.name), node, event.times[-1])
        return found

    def preemptors_on(self, node: str) -> set[str]:
        """Names of the pods that preempted on ``node`` (where the events name them, or their uid is known)."""
        by_uid = {p.uid: p.name for p in self.pods.values()}
        names = set()
        for event, said in self.preemptions:
            if said is not None and said[2] == node:
                names.add(said[1] or event.related_name or by_uid.get(said[0] or event.related_uid or "", ""))
        return names - {""}

    def assignments(self, node: str) -> list[tuple[float, str]]:
        """``(when, pod)`` of every Scheduled event onto ``node``."""
        out = []
        for event in self.events.by_reason.get("Scheduled", ()):
            said = messages.assigned(event.message)
            if said is not None and said[2] == node:
                out.append((event.first, said[1]))
        return sorted(out)


def _stuck(pod: Pod, scheduled: float | None, preemption: Preemption | None, cluster: _Cluster) -> Stuck | None:
    if preemption is None:
        return None
    others = cluster.preemptors_on(preemption.node) | {pod.name}
    takers = [(t, name) for t, name in cluster.assignments(preemption.node)
              if t >= preemption.at and (scheduled is None or t < scheduled) and name not in others]
    if pod.node == preemption.node and not takers:
        return None
    return Stuck(preemption.node, preemption.at, scheduled, takers[0][1] if takers else None)


def _pulls(events: Sequence[Event]) -> tuple[float | None, bool | None]:
    """The kubelet's pull time of the pod's images (the union of the pulls' spans: parallel pulls overlap) and
    whether every image was already on the node; ``(None, None)`` without a Pulled event."""
    spans, cached = [], True
    for event in events:
        said = messages.pull(event.message)
        if said is not None:
            spans.append((event.first - said.seconds, event.first))
            cached = cached and said.cached
    if not spans:
        return None, None
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return round(total, 3), cached


def _first_starts(events: Sequence[Event]) -> float | None:
    """The last container's first Started event."""
    firsts: dict[str, float] = {}
    for event in events:
        firsts.setdefault(event.field_path, event.first)
    return max(firsts.values()) if firsts else None


def _replica(pod: Pod, cluster: _Cluster, events_only: bool = False) -> Replica:
    about = cluster.events.about("Pod", pod.name, pod.uid)
    scheduled = pod.scheduled
    if scheduled is None:
        scheduled = next((e.first for e in about if e.reason == "Scheduled"), None)
    started = pod.started
    if started is None and not pod.restarted:
        started = _first_starts([e for e in about if e.reason == "Started"])
    node_name = pod.node or next((said[2] for e in about if e.reason == "Scheduled"
                                  for said in [messages.assigned(e.message)] if said), None)
    node = cluster.nodes.get(node_name or "")
    claim = cluster.claims.get(node_name or "")
    triggered = [e for e in about if e.reason == "TriggeredScaleUp"]
    autoscaler = "karpenter" if claim is not None else "cluster-autoscaler" if triggered else None
    registered = node.created if node is not None else None if claim is None else claim.registered
    new_node = None if registered is None else registered > pod.created
    marks: dict[str, float | None] = dict.fromkeys(MARKS)
    marks.update(created=pod.created, scheduled=scheduled, started=started, ready=pod.ready)
    if new_node is False:
        pass  # the node was there before the pod: its own marks are no part of this replica's way
    elif claim is not None:
        marks.update(autoscaler=claim.created, launched=claim.launched, registered=claim.registered,
                     gpus=claim.initialized)
    elif triggered:
        marks.update(autoscaler=triggered[0].first, registered=None if node is None else node.created,
                     gpus=None if node is None else node.gpus_at)
    elif node is not None:
        marks.update(registered=node.created, gpus=node.gpus_at)
    if new_node is not False and node is not None and node.ready is not None and \
            (scheduled is None or node.ready <= scheduled):
        marks["node_ready"] = node.ready  # a later transition is not the first Ready
    pull_s, cached = _pulls([e for e in about if e.reason == "Pulled"])
    preemption = cluster.preemption_by(pod)
    return Replica(pod.name, pod.uid, pod.created, pod.deleted, node_name, new_node, autoscaler,
                   None if claim is None else claim.name, marks, pull_s, cached, preemption,
                   _stuck(pod, scheduled, preemption, cluster), events_only,
                   pod.nominated_node if pod.node is None else None, pod.restarted,
                   next((e.message for e in about if e.reason == "FailedScheduling"), None),
                   pod.ready if pod.ready is not None else pod.ready_since)


def _from_events(name: str, created: float, cluster: _Cluster) -> Pod:
    """A pod known only from its events: created when its ReplicaSet said so, gone when it was killed or deleted."""
    about = cluster.events.about("Pod", name)
    gone = [e.first for e in about if e.reason == "Killing"]
    return Pod(name, "", "", created, {}, None, 0, None, None, "", None, None, None, min(gone, default=None),
               False, 0)


def replicas(records: Records, deployment: str, since: float, until: float) -> list[Replica]:
    """Every pod of the Deployment created in ``[since, until]``: those listed or watched, and those only its
    ReplicaSets' SuccessfulCreate events name."""
    cluster = _Cluster(records)
    known = workload_pods(records.pods, deployment)
    out = [_replica(p, cluster) for p in known if since <= p.created <= until]
    names = {p.name for p in records.pods}
    for event in cluster.events.by_reason.get("SuccessfulCreate", ()):
        name = messages.created_pod(event.message)
        if event.kind == "ReplicaSet" and _of_deployment(event.name, deployment) and name and name not in names \
                and since <= event.first <= until:
            names.add(name)
            out.append(_replica(_from_events(name, event.first, cluster), cluster, events_only=True))
    return sorted(out, key=lambda r: (r.created, r.pod))
