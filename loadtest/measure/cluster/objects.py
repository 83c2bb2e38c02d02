"""The API objects the capacity report reads, reduced to the times and links it needs (pure). Times are Unix
seconds; one the object does not carry is ``None``.

Shapes, as their owners write them:

* Pod (core v1): ``status.conditions`` with ``lastTransitionTime`` (PodScheduled, Ready: their last transition),
  ``status.containerStatuses[].state.running.startedAt``, ``status.nominatedNodeName`` (set by the scheduler's
  preemption), ``spec.priority`` (from the PriorityClass), the ReplicaSet owner and ``pod-template-hash`` label.
* Node (core v1): ``metadata.creationTimestamp`` (the kubelet registered it), the Ready condition, ``nvidia.com/gpu``
  in ``status.capacity``.
* NodeClaim (karpenter.sh/v1, ``pkg/apis/v1/nodeclaim_status.go``): ``status.nodeName`` and the conditions
  ``Launched`` (the cloud instance exists), ``Registered`` (its Node joined) and ``Initialized`` (the Node is Ready,
  its startup taints are gone and every requested resource, GPUs included, is allocatable:
  ``pkg/controllers/nodeclaim/lifecycle/initialization.go``), each ``status: "True"`` at its ``lastTransitionTime``.
* Event, either API: core v1 (``involvedObject``, ``message``, ``firstTimestamp``/``lastTimestamp``/``count``, or
  ``eventTime`` and ``series`` from the newer recorder) and events.k8s.io/v1 (``regarding``, ``note``, ``eventTime``,
  ``series``, ``deprecatedFirstTimestamp``/``deprecatedLastTimestamp``/``deprecatedCount``). A recorder folds
  repeats of one event into one object, so an object stands for up to ``count`` occurrences: the first and the last
  are on it (a watch sees the ones between).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["GPU_RESOURCE", "Event", "Hpa", "Node", "NodeClaim", "Pod", "Records", "event_of", "hpa_of", "node_of",
           "nodeclaim_of", "pod_of", "timestamp"]

GPU_RESOURCE = "nvidia.com/gpu"
_COMBINED = "(combined from similar events): "  # client-go's EventAggregator prefix

Obj = Mapping[str, Any]


def timestamp(text: object) -> float | None:
    """Unix seconds of an RFC 3339 time (metav1.Time, MicroTime); ``None`` for none or one that does not parse."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _condition(conditions: Iterable[Obj] | None, kind: str) -> float | None:
    """When the condition ``kind`` last turned True; ``None`` when it is not True."""
    for condition in conditions or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            return timestamp(condition.get("lastTransitionTime"))
    return None


def _gpus(resources: Obj | None) -> int:
    try:
        return int(str((resources or {}).get(GPU_RESOURCE, "0")))
    except ValueError:
        return 0


@dataclass(frozen=True)
class Pod:
    """``started``: when the last of its containers first started (``None`` once one restarted: the status keeps
    only the latest start); ``ready``: when it turned Ready (``None`` after a restart, for the same reason);
    ``deleted``: its deletionTimestamp, or when a watch saw it go."""

    name: str
    uid: str
    namespace: str
    created: float
    labels: Mapping[str, str]
    owner: str | None
    priority: int
    node: str | None
    nominated_node: str | None
    phase: str
    scheduled: float | None
    started: float | None
    ready: float | None
    deleted: float | None
    restarted: bool
    gpus: int
    ready_since: float | None = None  # its Ready condition's last turn to True, restarted or not


def _started(status: Obj) -> tuple[float | None, bool]:
    """The last first start among the app containers, and whether one restarted."""
    starts: list[float | None] = []
    restarted = False
    for container in status.get("containerStatuses") or ():
        if container.get("restartCount", 0):
            restarted = True
        state = container.get("state") or {}
        started = (state.get("running") or state.get("terminated") or {}).get("startedAt")
        starts.append(timestamp(started))
    if restarted or not starts or None in starts:
        return None, restarted
    return max(s for s in starts if s is not None), restarted


def pod_of(obj: Obj, deleted: float | None = None) -> Pod:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    owner = next((o.get("name") for o in meta.get("ownerReferences") or () if o.get("controller")), None)
    started, restarted = _started(status)
    gone = timestamp(meta.get("deletionTimestamp"))
    requests = [(c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get("limits")
                for c in spec.get("containers") or ()]
    ready = _condition(status.get("conditions"), "Ready")
    return Pod(
        name=str(meta.get("name", "")), uid=str(meta.get("uid", "")), namespace=str(meta.get("namespace", "")),
        created=timestamp(meta.get("creationTimestamp")) or 0.0, labels=dict(meta.get("labels") or {}),
        owner=owner, priority=int(spec.get("priority") or 0), node=spec.get("nodeName") or None,
        nominated_node=status.get("nominatedNodeName") or None, phase=str(status.get("phase", "")),
        scheduled=_condition(status.get("conditions"), "PodScheduled"), started=started,
        ready=None if restarted else ready,
        deleted=min((t for t in (gone, deleted) if t is not None), default=None), restarted=restarted,
        gpus=sum(_gpus(r) for r in requests), ready_since=ready)


@dataclass(frozen=True)
class Node:
    """``allocatable_gpus``: what the device plugin reports now (the kubelet shows 0 until it registers);
    ``gpus_at``: when a watch first saw them allocatable after seeing none (``None``: not seen happen)."""

    name: str
    created: float
    ready: float | None
    gpus: int
    deleted: float | None
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable_gpus: int = 0
    gpus_at: float | None = None


def node_of(obj: Obj, deleted: float | None = None) -> Node:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    gone = timestamp(meta.get("deletionTimestamp"))
    return Node(str(meta.get("name", "")), timestamp(meta.get("creationTimestamp")) or 0.0,
                _condition(status.get("conditions"), "Ready"),
                max(_gpus(status.get("capacity")), _gpus(status.get("allocatable"))),
                min((t for t in (gone, deleted) if t is not None), default=None), dict(meta.get("labels") or {}),
                _gpus(status.get("allocatable")))


@dataclass(frozen=True)
class NodeClaim:
    name: str
    created: float
    node: str | None
    launched: float | None
    registered: float | None
    initialized: float | None
    deleted: float | None
    nodepool: str | None


def nodeclaim_of(obj: Obj, deleted: float | None = None) -> NodeClaim:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    conditions = status.get("conditions")
    gone = timestamp(meta.get("deletionTimestamp"))
    return NodeClaim(str(meta.get("name", "")), timestamp(meta.get("creationTimestamp")) or 0.0,
                     status.get("nodeName") or None, _condition(conditions, "Launched"),
                     _condition(conditions, "Registered"), _condition(conditions, "Initialized"),
                     min((t for t in (gone, deleted) if t is not None), default=None),
                     (meta.get("labels") or {}).get("karpenter.sh/nodepool"))


@dataclass(frozen=True)
class Event:
    """One event object of either API: what it is about (``kind``, ``name``, ``object_uid``, ``field_path``), the
    ``related`` object's uid (events.k8s.io: the preemptor of a Preempted event), and ``times``: the occurrences it
    records (first and last of ``count``, or every one a watch saw)."""

    uid: str
    reason: str
    message: str
    kind: str
    name: str
    object_uid: str
    namespace: str
    field_path: str
    times: tuple[float, ...]
    count: int
    related_uid: str | None = None
    related_name: str | None = None

    @property
    def first(self) -> float:
        return self.times[0]


def event_of(obj: Obj) -> Event | None:
    """An event of the core v1 or the events.k8s.io/v1 API; ``None`` for one without any time."""
    meta = obj.get("metadata") or {}
    new_api = "regarding" in obj or "note" in obj or str(obj.get("apiVersion", "")).startswith("events.k8s.io")
    about = (obj.get("regarding") if new_api else obj.get("involvedObject")) or {}
    series = obj.get("series") or {}
    if new_api:
        first = timestamp(obj.get("deprecatedFirstTimestamp")) or timestamp(obj.get("eventTime"))
        last = timestamp(series.get("lastObservedTime")) or timestamp(obj.get("deprecatedLastTimestamp")) or first
        count = int(series.get("count") or obj.get("deprecatedCount") or 1)
        message = str(obj.get("note") or "")
    else:
        first = timestamp(obj.get("firstTimestamp")) or timestamp(obj.get("eventTime"))
        last = timestamp(series.get("lastObservedTime")) or timestamp(obj.get("lastTimestamp")) or first
        count = int(series.get("count") or obj.get("count") or 1)
        message = str(obj.get("message") or "")
    if first is None or last is None:
        return None
    related = obj.get("related") or {}
    times = (first,) if count < 2 or last == first else (first, last)
    return Event(str(meta.get("uid", "")), str(obj.get("reason") or ""), message.removeprefix(_COMBINED),
                 str(about.get("kind", "")), str(about.get("name", "")), str(about.get("uid", "")),
                 str(about.get("namespace") or meta.get("namespace") or ""), str(about.get("fieldPath") or ""),
                 times, count, related.get("uid") or None, related.get("name") or None)


@dataclass(frozen=True)
class Hpa:
    name: str
    target_kind: str
    target_name: str


def hpa_of(obj: Obj) -> Hpa:
    ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
    return Hpa(str((obj.get("metadata") or {}).get("name", "")), str(ref.get("kind", "")), str(ref.get("name", "")))


@dataclass(frozen=True)
class Records:
    """What the report read of one namespace and the cluster around it (listed, or replayed from a ``--watch``
    journal). ``karpenter``: the cluster serves Karpenter's NodeClaims (``None``: not known, the read was refused)."""

    pods: tuple[Pod, ...] = ()
    events: tuple[Event, ...] = ()
    nodes: tuple[Node, ...] = ()
    nodeclaims: tuple[NodeClaim, ...] = ()
    hpas: tuple[Hpa, ...] = ()
    karpenter: bool | None = False
