"""The messages of the events the capacity report reads, as their controllers write them (pure). Each parser takes
a message and returns what it says, or ``None`` for one it does not recognise.

* kubelet, ``pkg/kubelet/images/image_manager.go`` (reasons in ``pkg/kubelet/events/event.go``): ``Pulling``
  ``Pulling image "%s"``; ``Pulled`` ``Successfully pulled image "%s" in %v (%v including waiting). Image size: %v
  bytes.`` (Kubernetes 1.30+; 1.27-1.29 without the size; before 1.27 only ``in %v``) or ``Container image "%s"
  already present on machine``. The first duration is the pull itself, the second from the kubelet's ask (waiting
  for a serialised pull included); both are Go durations truncated to the millisecond.
* kube-scheduler, ``pkg/scheduler/schedule_one.go``: ``Scheduled`` ``Successfully assigned %v/%v to %v``; preemption
  (``pkg/scheduler/framework/preemption/preemption.go``): ``Preempted`` on the victim, ``Preempted by pod %v on node
  %v`` with the preemptor's UID (before Kubernetes 1.28: ``Preempted by %v/%v on node %v``, its namespace and name).
* HPA controller, ``pkg/controller/podautoscaler/horizontal.go``: ``SuccessfulRescale`` ``New size: %d; reason: %s``,
  the reason ``<metric> above target``, ``All metrics below target``, or ``Current number of replicas above
  Spec.MaxReplicas`` / ``below Spec.MinReplicas`` / ``must be greater than 0``.
* Deployment controller, ``pkg/controller/deployment/sync.go``: ``ScalingReplicaSet`` ``Scaled up replica set %s to
  %d from %d`` (older: without ``from``); ReplicaSet controller: ``SuccessfulCreate`` ``Created pod: %v``.
* Cluster Autoscaler, ``processors/status/eventing_scale_up_processor.go``: ``TriggeredScaleUp`` ``pod triggered
  scale-up: [{<group> <current>-><new> (max: <max>)} ...]`` (``ScaleUpInfo.String``,
  ``processors/nodegroupset/nodegroup_set_processor.go``).
* Karpenter, ``pkg/controllers/provisioning/scheduling/events.go``: ``Nominated`` ``Pod should schedule on:
  nodeclaim/<name>[, node/<name>]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clikit.durations import DurationError, parse_go_duration

__all__ = ["Pull", "Rescale", "ScaleUpInfo", "assigned", "created_pod", "nominated_nodeclaim", "preempted_by",
           "pull", "replica_set_scaled", "rescale", "rescale_direction", "triggered_scale_up"]

_PULLED = re.compile(r'Successfully pulled image "(?P<image>[^"]*)" in (?P<pull>\S+?)'
                     r'(?: \((?P<total>\S+) including waiting\))?(?:\. Image size: (?P<size>\d+) bytes)?\.?$')
_PRESENT = re.compile(r'Container image "(?P<image>[^"]*)" already present on machine')
_ASSIGNED = re.compile(r"Successfully assigned (?P<namespace>[^/\s]+)/(?P<name>\S+) to (?P<node>\S+)$")
_PREEMPTED = re.compile(r"Preempted by (?:pod (?P<uid>\S+)|(?P<namespace>[^/\s]+)/(?P<name>\S+)) "
                        r"on node (?P<node>\S+)$")
_RESCALE = re.compile(r"New size: (?P<size>\d+); reason: (?P<reason>.*)$")
_SCALED = re.compile(r"Scaled (?P<way>up|down) replica set (?P<rs>\S+) to (?P<to>\d+)(?: from (?P<from>\d+))?$")
_CREATED = re.compile(r"Created pod: (?P<name>\S+)$")
_TRIGGERED = re.compile(r"pod triggered scale-up: \[(?P<infos>.*)\]$")
_INFO = re.compile(r"\{(?P<group>\S+) (?P<current>\d+)->(?P<new>\d+) \(max: (?P<max>\d+)\)\}")
_NOMINATED = re.compile(r"Pod should schedule on: (?P<targets>.*)$")


@dataclass(frozen=True)
class Pull:
    """One image the kubelet made sure of: ``seconds`` it took as the kubelet reported it (the wait included where
    the message has it), 0 when the image was already on the node."""

    image: str
    seconds: float
    cached: bool


def pull(message: str) -> Pull | None:
    present = _PRESENT.match(message)
    if present:
        return Pull(present["image"], 0.0, True)
    pulled = _PULLED.match(message)
    if not pulled:
        return None
    try:
        seconds = parse_go_duration(pulled["total"] or pulled["pull"])
    except DurationError:
        return None
    return Pull(pulled["image"], seconds, False)


def assigned(message: str) -> tuple[str, str, str] | None:
    """``(namespace, pod, node)`` of a Scheduled event."""
    found = _ASSIGNED.match(message)
    return (found["namespace"], found["name"], found["node"]) if found else None


def preempted_by(message: str) -> tuple[str | None, str | None, str] | None:
    """``(preemptor uid, preemptor name, node)`` of a Preempted event: the uid from Kubernetes 1.28 on, the name
    before."""
    found = _PREEMPTED.match(message)
    return (found["uid"], found["name"], found["node"]) if found else None


@dataclass(frozen=True)
class Rescale:
    size: int
    reason: str


def rescale(message: str) -> Rescale | None:
    found = _RESCALE.match(message)
    return Rescale(int(found["size"]), found["reason"]) if found else None


def rescale_direction(reason: str) -> int | None:
    """+1 for a reason the controller gives when it scales up, -1 when down, ``None`` for one it does not write."""
    if reason.endswith(" above target") or reason.endswith("below Spec.MinReplicas") or \
            reason.endswith("must be greater than 0"):
        return 1
    if reason == "All metrics below target" or reason.endswith("above Spec.MaxReplicas"):
        return -1
    return None


def replica_set_scaled(message: str) -> tuple[str, int, int | None] | None:
    """``(replica set, new size, old size or None)`` of a ScalingReplicaSet event."""
    found = _SCALED.match(message)
    if not found:
        return None
    return found["rs"], int(found["to"]), None if found["from"] is None else int(found["from"])


def created_pod(message: str) -> str | None:
    found = _CREATED.match(message)
    return found["name"] if found else None


@dataclass(frozen=True)
class ScaleUpInfo:
    group: str
    current: int
    new: int
    max: int


def triggered_scale_up(message: str) -> list[ScaleUpInfo] | None:
    found = _TRIGGERED.match(message)
    if not found:
        return None
    return [ScaleUpInfo(m["group"], int(m["current"]), int(m["new"]), int(m["max"]))
            for m in _INFO.finditer(found["infos"])]


def nominated_nodeclaim(message: str) -> str | None:
    found = _NOMINATED.match(message)
    if not found:
        return None
    return next((part.strip().removeprefix("nodeclaim/") for part in found["targets"].split(",")
                 if part.strip().startswith("nodeclaim/")), None)
