"""GPU nodes and the pods on them: what kube-scheduler, the kubelet and the ReplicaSet controller do, as a pure
model on the caller's clock (seconds; call :meth:`Cluster.step` with a time that never goes back).

* A **node** goes requested -> registered -> Ready -> GPUs allocatable (:class:`~loadtest.nodes.timings.NodeTimings`):
  Ready comes before the device plugin reports ``nvidia.com/gpu``, so for that while the node is Ready and has no
  GPU to give (the provisioners count it at its instance type's GPUs so that they do not launch another node for
  the same pods).
* **Scheduling** (kube-scheduler): pending pods in priority order, then oldest first (the PrioritySort queue);
  each bound to a node whose allocatable GPUs minus its pods' requests fit it. The default scoring
  (NodeResourcesFit, LeastAllocated over cpu and memory only) does not look at ``nvidia.com/gpu``, and the
  scheduler picks at random between equal scores; this model takes the oldest node, for repeatable runs. A node
  that a provisioner removes goes at once (no cordon-and-drain phase is modelled), and its pods are evicted: each
  is deleted and its ReplicaSet creates a new one, which waits for a GPU, pulls its image on the node it gets (unless
  that node has it) and loads its model again (Karpenter's termination controller and Cluster Autoscaler's
  actuator evict through the Eviction API; ``pkg/controller/replicaset`` replaces the pods). A workload whose
  pods the caller creates (the demo's Deployment, :mod:`loadtest.standins.deployment`, which numbers them) gets
  its replacement under the evicted pod's name; :attr:`Cluster.evicted` lists them for the caller, whose replica
  behind the pod stops.
* **Preemption** (DefaultPreemption, ``SelectVictimsOnNode`` and ``pickOneNodeForPreemption``): a pod that fits no
  node, unless its ``preemptionPolicy`` is ``Never``, removes every lower-priority pod of a node in thought, gives
  back (reprieves) as many as still leave room, most important first, and the victims of the node whose most
  important victim has the lowest priority, then the lowest sum of priorities, then the fewest victims, are
  deleted. The sum counts each victim at its priority plus 2^31, as upstream does, so that more victims of a
  negative priority never sum lower than fewer of the same priority. Victims here are pause placeholders: they
  stop at once, so the preemptor binds in the same step.
* **Images** (kubelet): the first pod of an image on a node pulls it (``image_pull_s`` for the workload's image,
  nothing for others: a pause image is a few hundred kB); later pods there find it cached. A pod runs once its
  image is present; it is ready once its model has loaded (``ready_after_s`` after it runs) or, in the demo, when
  its replica process answers ``/healthz`` (:meth:`Cluster.mark_ready`).
* **ReplicaSets** keep their pods' count: a deleted or preempted pod is replaced by a new one. A scale-down
  deletes unscheduled pods first, then pods not running, then pods not ready, then the newest. Upstream
  (``pkg/controller/replicaset``, ``getPodsRankedByRelatedPodsOnSameNode`` and ``controller.ActivePodsWithRanks``)
  applies the same first three keys, then a lower ``pod-deletion-cost``, then prefers a pod with more active pods
  of the same Deployment on its node ("doubled up"), then the shorter time ready, more restarts, and the newer
  creation (times compared in logarithmic buckets under ``LogarithmicScaleDown``, ties broken by UID). The model
  leaves out the node-colocation key and the later ones on purpose: in the demo the workload's pods belong to the
  local Deployment (:mod:`loadtest.standins.deployment`), which stops its highest-numbered replica, the newest pod, and
  deletes that pod here (:meth:`Cluster.delete_pod`); the ReplicaSets of this model (the placeholders') take the
  newest too, so that both scale down alike. Upstream can thus take a pod from a full node where the model
  empties a node holding one pod, which a provisioner then removes.

Accounting: ``gpu_node_seconds`` (each node's GPUs times its life from request to removal: what a cloud bills,
roughly) and ``pending_pod_seconds`` (how long pods waited for a node, by owner).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from loadtest.nodes.instances import InstanceType
from loadtest.nodes.timings import NodeTimings

__all__ = ["Cluster", "Node", "Pod", "PodSpan", "PodTemplate", "ReplicaSet", "unbound_seconds"]


def unbound_seconds(created: float, bound: float | None, deleted: float | None, since: float, until: float) -> float:
    """How long a pod waited unbound between ``since`` and ``until``: from its creation to its binding, its deletion
    or ``until``."""
    end = bound if bound is not None else deleted
    return max(0.0, min(until, end if end is not None else until) - max(created, since))


@dataclass(frozen=True)
class PodSpan:
    """A workload pod's life: created, bound to a node, running (image present), ready (model loaded), deleted."""

    created: float
    bound: float | None = None
    running: float | None = None
    ready: float | None = None
    deleted: float | None = None

    def state(self, t: float) -> str | None:
        """``node``, ``image``, ``model``, ``ready``, or ``None`` when the pod does not exist at ``t``."""
        if t < self.created or (self.deleted is not None and t >= self.deleted):
            return None
        if self.bound is None or t < self.bound:
            return "node"
        if self.running is None or t < self.running:
            return "image"
        if self.ready is None or t < self.ready:
            return "model"
        return "ready"


@dataclass(frozen=True)
class PodTemplate:
    """What one pod of a workload asks for. ``ready_after_s``: from running to ready (its model load; 0 for a pause
    placeholder); ``None``: readiness is reported from outside (:meth:`Cluster.mark_ready`)."""

    gpus: int = 1
    priority: int = 0
    preempt_never: bool = False
    image: str = "inference"
    ready_after_s: float | None = None


@dataclass
class Node:
    name: str
    instance: InstanceType
    owner: str
    requested_at: float
    registered_at: float
    ready_at: float
    gpus_at: float
    deleted_at: float | None = None
    warm: bool = False  # up before the run started
    images: dict[str, float] = field(default_factory=dict)  # image -> when it is present
    last_pod_event: float = 0.0

    def alive(self, now: float) -> bool:
        return self.deleted_at is None or now < self.deleted_at

    def ready(self, now: float) -> bool:
        return self.alive(now) and now >= self.ready_at

    def allocatable(self, now: float) -> int:
        """``nvidia.com/gpu`` allocatable: 0 until the device plugin has reported the GPUs."""
        return self.instance.gpus if self.alive(now) and now >= self.gpus_at else 0

    @property
    def gpus(self) -> int:
        return self.instance.gpus


@dataclass
class Pod:
    name: str
    owner: str
    template: PodTemplate
    created_at: float
    node: str | None = None
    bound_at: float | None = None
    running_at: float | None = None
    ready_at: float | None = None
    deleted_at: float | None = None
    unschedulable_at: float | None = None  # PodScheduled False, reason Unschedulable (first time)
    preempted: bool = False

    @property
    def priority(self) -> int:
        return self.template.priority

    @property
    def gpus(self) -> int:
        return self.template.gpus

    def alive(self) -> bool:
        return self.deleted_at is None

    def pending(self) -> bool:
        return self.alive() and self.node is None

    def running(self, now: float) -> bool:
        return self.alive() and self.running_at is not None and now >= self.running_at

    def ready(self, now: float) -> bool:
        return self.alive() and self.ready_at is not None and now >= self.ready_at


@dataclass
class ReplicaSet:
    """A Deployment's pods: ``replicas`` of ``template``, named ``<name>-<n>``."""

    name: str
    template: PodTemplate
    replicas: int = 0


class Cluster:
    def __init__(self, timings: NodeTimings | None = None, *, workload_image: str = "inference") -> None:
        self.timings = timings = timings or NodeTimings()
        self.pull_s: Mapping[str, float] = {workload_image: timings.image_pull_s}
        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}  # by name: the latest pod of each name
        self.retired: list[Pod] = []  # earlier pods of a name used again (a Deployment's replica n recreated)
        self.replica_sets: dict[str, ReplicaSet] = {}
        self.evicted: list[Pod] = []  # replacements of the caller's pods evicted from a removed node, in order
        self._node_ids = itertools.count()
        self._pod_ids: dict[str, itertools.count[int]] = {}
        self.now = 0.0

    # -- nodes ----------------------------------------------------------------------------------------------------
    def add_node(self, instance: InstanceType, now: float, owner: str, *, ready: bool = False,
                 images: Iterable[str] = ()) -> Node:
        """A node requested at ``now`` (``ready``: one that is up already, with ``images`` pulled)."""
        t = self.timings
        name = f"{instance.name}-{next(self._node_ids)}"
        if ready:
            node = Node(name, instance, owner, now, now, now, now, warm=True, images=dict.fromkeys(images, now),
                        last_pod_event=now)
        else:
            registered = now + t.launch_s
            node = Node(name, instance, owner, now, registered, registered + t.ready_s,
                        registered + t.ready_s + t.gpu_s, last_pod_event=now)
        self.nodes[name] = node
        return node

    def live_nodes(self, now: float) -> list[Node]:
        return [n for n in self.nodes.values() if n.alive(now)]

    def remove_node(self, name: str, now: float) -> list[Pod]:
        """The node goes away now and its pods are evicted: the ReplicaSets of this model replace theirs at the next
        reconcile; a pod of any other owner is replaced at once under its name (the caller's Deployment numbers its
        pods) and listed in :attr:`evicted`. Returns the evicted pods."""
        node = self.nodes[name]
        node.deleted_at = now
        evicted = self.pods_on(name)
        for pod in evicted:
            self._delete(pod, now)
            if pod.owner not in self.replica_sets:
                self.evicted.append(self.create_pod(pod.name, pod.owner, pod.template, now))
        return evicted

    def pods_on(self, node: str) -> list[Pod]:
        return [p for p in self.pods.values() if p.alive() and p.node == node]

    def free_gpus(self, node: Node, now: float) -> int:
        return node.allocatable(now) - sum(p.gpus for p in self.pods_on(node.name))

    def expected_free_gpus(self, node: Node) -> int:
        """Free GPUs counting a node whose GPUs are not allocatable yet at its instance type's: what a provisioner
        assumes of a node it launched (Karpenter's in-flight NodeClaim capacity, Cluster Autoscaler's upcoming
        node and ``utils/gpu``)."""
        return node.gpus - sum(p.gpus for p in self.pods_on(node.name))

    # -- pods -----------------------------------------------------------------------------------------------------
    def create_pod(self, name: str, owner: str, template: PodTemplate, now: float) -> Pod:
        old = self.pods.get(name)
        if old is not None:
            if old.alive():
                raise ValueError(f"pod {name} exists")
            self.retired.append(old)
        pod = Pod(name, owner, template, now)
        self.pods[name] = pod
        return pod

    def all_pods(self) -> list[Pod]:
        """Every pod there has been, deleted ones included."""
        return [*self.retired, *self.pods.values()]

    def delete_pod(self, name: str, now: float) -> None:
        pod = self.pods.get(name)
        if pod is not None and pod.alive():
            self._delete(pod, now)

    def _delete(self, pod: Pod, now: float) -> None:
        pod.deleted_at = now
        if pod.node is not None:
            self.nodes[pod.node].last_pod_event = now

    def mark_ready(self, name: str, now: float) -> None:
        pod = self.pods[name]
        if pod.ready_at is None:
            pod.ready_at = now

    def live_pods(self, owner: str | None = None) -> list[Pod]:
        return [p for p in self.pods.values() if p.alive() and (owner is None or p.owner == owner)]

    def pending_pods(self) -> list[Pod]:
        return [p for p in self.pods.values() if p.pending()]

    # -- ReplicaSets ----------------------------------------------------------------------------------------------
    def set_replicas(self, name: str, template: PodTemplate, replicas: int) -> None:
        rs = self.replica_sets.setdefault(name, ReplicaSet(name, template))
        rs.template, rs.replicas = template, replicas

    def _reconcile(self, now: float) -> None:
        for rs in self.replica_sets.values():
            pods = self.live_pods(rs.name)
            if len(pods) < rs.replicas:
                counter = self._pod_ids.setdefault(rs.name, itertools.count())
                for _ in range(rs.replicas - len(pods)):
                    self.create_pod(f"{rs.name}-{next(counter)}", rs.name, rs.template, now)
            for pod in sorted(pods, key=lambda p: self._deletion_rank(p, now))[:max(len(pods) - rs.replicas, 0)]:
                self._delete(pod, now)

    @staticmethod
    def _deletion_rank(pod: Pod, now: float) -> tuple[bool, bool, bool, float]:
        """The pod deleted first sorts first: upstream's first three keys, then the newest (not upstream's
        node-colocation key: see the module docstring)."""
        return pod.node is not None, pod.running(now), pod.ready(now), -pod.created_at

    # -- the step -------------------------------------------------------------------------------------------------
    def step(self, now: float) -> list[Pod]:
        """ReplicaSets, then the scheduler, then the kubelets, at ``now``; returns the pods bound in this step."""
        self.now = now
        self._reconcile(now)
        bound = self._schedule(now)
        self._reconcile(now)  # preempted pods are replaced at once; their replacements wait for the next step
        for pod in self.pods.values():
            after = pod.template.ready_after_s
            if pod.alive() and pod.running_at is not None and pod.ready_at is None and after is not None:
                pod.ready_at = pod.running_at + after
        return bound

    def _schedule(self, now: float) -> list[Pod]:
        bound = []
        for pod in sorted(self.pending_pods(), key=lambda p: (-p.priority, p.created_at, p.name)):
            node = self._fitting_node(pod, now)
            if node is None and not pod.template.preempt_never:
                node = self._preempt_for(pod, now)
            if node is None:
                if pod.unschedulable_at is None:
                    pod.unschedulable_at = now
                continue
            self._bind(pod, node, now)
            bound.append(pod)
        return bound

    def _fitting_node(self, pod: Pod, now: float) -> Node | None:
        fits = [n for n in self.nodes.values()
                if n.ready(now) and self.free_gpus(n, now) >= pod.gpus]
        return min(fits, key=lambda n: (n.requested_at, n.name), default=None)

    def _preempt_for(self, pod: Pod, now: float) -> Node | None:
        choices = []
        for node in self.nodes.values():
            if not node.ready(now):
                continue
            lower = sorted((p for p in self.pods_on(node.name) if p.priority < pod.priority),
                           key=lambda p: (-p.priority, p.created_at))  # most important first: reprieved first
            free = self.free_gpus(node, now) + sum(p.gpus for p in lower)
            if not lower or free < pod.gpus:
                continue
            victims = []
            for candidate in lower:
                if free - candidate.gpus >= pod.gpus:
                    free -= candidate.gpus  # reprieved: it stays
                else:
                    victims.append(candidate)
            if victims:
                total = sum(v.priority + 2**31 for v in victims)  # pickOneNodeForPreemption: MaxInt32+1 each
                choices.append(((max(v.priority for v in victims), total, len(victims), node.requested_at, node.name),
                                node, victims))
        if not choices:
            return None
        _, node, victims = min(choices, key=lambda c: c[0])
        for victim in victims:
            victim.preempted = True
            self._delete(victim, now)
        return node

    def _bind(self, pod: Pod, node: Node, now: float) -> None:
        pod.node, pod.bound_at = node.name, now
        node.last_pod_event = now
        image = pod.template.image
        if image not in node.images:
            node.images[image] = now + self.pull_s.get(image, 0.0)
        pod.running_at = max(now, node.images[image])

    # -- accounting -----------------------------------------------------------------------------------------------
    def gpu_node_seconds(self, now: float) -> float:
        """Each node's GPUs times how long it has existed, from its request to its removal (or ``now``)."""
        return sum(n.gpus * max(0.0, min(now, n.deleted_at if n.deleted_at is not None else now) - n.requested_at)
                   for n in self.nodes.values())

    def pending_pod_seconds(self, now: float, owner: str | None = None, since: float = -math.inf) -> float:
        """How long pods (of ``owner``) waited unbound between ``since`` and ``now``: from creation to binding,
        deletion or ``now``."""
        return sum(unbound_seconds(p.created_at, p.bound_at, p.deleted_at, since, now) for p in self.all_pods()
                   if owner is None or p.owner == owner)
