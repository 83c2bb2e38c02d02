"""The node layer under the demo's replicas: the pure models of :mod:`loadtest.nodes` run on the demo's clock.

A replica's pod is created when the HPA scales up; it is Pending until a node has a free GPU for it (the
provisioner launches one, or it preempts a placeholder), then its image is pulled (once per node), and only then
does the demo start the replica's process, whose cold start is the model load. Placeholders (headroom) are pods of
their own Deployment, ``<workload>-headroom``, of priority -10 (the lowest that still makes Cluster Autoscaler add
nodes: its FAQ, "How can I configure overprovisioning") with ``preemptionPolicy: Never``: a fixed count, or one an
HPA sizes from the ``capacity-headroom`` preset's metric.

Every delay is a real-world figure put on the demo's clock (:class:`loadtest.clock.DemoClock`); the figures this
layer reports are put back in real time (real-time equivalents).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from loadtest.clock import DemoClock
from loadtest.nodes import (
    AutoscalerSettings,
    Cluster,
    ClusterAutoscaler,
    Karpenter,
    KarpenterSettings,
    NodeGroup,
    NodePool,
    NodeTimings,
    PodTemplate,
    Provisioner,
)
from loadtest.nodes.cluster import PodSpan
from loadtest.standins.deployment import PENDING, RUNNING, PodState

__all__ = ["PAUSE_IMAGE", "PLACEHOLDER_PRIORITY", "WORKLOAD_IMAGE", "NodeLayer",
           "NodeLayerConfig", "NodesKind", "PlaceholderDeployment", "owners"]

WORKLOAD_IMAGE = "inference"
PAUSE_IMAGE = "pause"
PLACEHOLDER_PRIORITY = -10


class NodesKind(StrEnum):
    NONE = "none"
    KARPENTER = "karpenter"
    CLUSTER_AUTOSCALER = "cluster-autoscaler"


@dataclass(frozen=True)
class NodeLayerConfig:
    """``timings`` in real seconds; ``clock`` compresses them (and the provisioners' timers) for the demo.
    ``headroom``: the placeholders, or with ``headroom_auto`` the most the HPA may ask for.
    ``placeholder_image``: what the placeholders run: a pause image (the chart's default) or the workload's image
    (the chart's ``headroom.placeholders.prePullImage``: its kubelet then has it when a replica takes the GPU).
    The auto headroom's HPA: ``headroom_min`` its minReplicas, ``headroom_signal`` what it reads (``requests``:
    the arrival rate's growth, ``queue``: the queue's), ``headroom_scale_up_s`` and ``headroom_scale_down_s`` its
    stabilisation windows (real seconds)."""

    kind: NodesKind
    clock: DemoClock
    timings: NodeTimings = field(default_factory=NodeTimings)
    pool: NodePool | None = None
    groups: tuple[NodeGroup, ...] = ()
    headroom: int = 0
    headroom_auto: bool = False
    placeholder_image: str = PAUSE_IMAGE
    provisioning_s: float | None = None  # the auto headroom's time to capacity (real s); None: the timings' sum
    headroom_min: int = 0
    headroom_signal: str = "requests"
    headroom_scale_up_s: float = 0.0
    headroom_scale_down_s: float = 300.0
    tick_s: float = 0.05

    @property
    def gpu_limit(self) -> tuple[int, str] | None:
        """The most GPUs the capacity can hold, and where that limit is written."""
        if self.kind is NodesKind.KARPENTER:
            assert self.pool is not None
            return None if self.pool.gpu_limit is None else (self.pool.gpu_limit,
                                                             f"NodePool {self.pool.name}'s limits.nvidia.com/gpu")
        total = sum(g.max_size * g.instance.gpus for g in self.groups)
        return total, "the node groups' maxSize times their GPUs"

    def check(self, replicas: int) -> None:
        """``ValueError`` (one line) for a headroom that cannot fit beside ``replicas`` within the GPU limit."""
        limit = self.gpu_limit
        if limit is not None and self.headroom and self.headroom + replicas > limit[0]:
            raise ValueError(f"--headroom {self.headroom}: {self.headroom} GPUs of headroom and {replicas} of "
                             f"replicas are more than {limit[1]} ({limit[0]})")

    def one_node(self, gpus: int) -> int:
        """The GPUs of the node the provisioner would launch for ``gpus`` one-GPU pods: static headroom of one
        node."""
        if self.kind is NodesKind.KARPENTER:
            assert self.pool is not None
            return self.pool.cheapest(tuple(t for t in self.pool.instance_types if t.gpus >= gpus)
                                      or self.pool.instance_types).gpus
        return self.groups[0].instance.gpus

    def provisioner(self) -> Provisioner:
        if self.kind is NodesKind.KARPENTER:
            assert self.pool is not None  # the NodePool's own timer (consolidateAfter) runs on the same clock
            return Karpenter(self.clock.demo_settings(self.pool), self.clock.demo_settings(KarpenterSettings()))
        return ClusterAutoscaler(self.groups, self.clock.demo_settings(AutoscalerSettings()))


class NodeLayer:
    """The replicas' gate (``pod_created``, ``pod_deleted``, ``may_start``, ``mark_ready``), the placeholders, and a
    task (:meth:`run`) that steps the cluster and the provisioner."""

    def __init__(self, config: NodeLayerConfig, workload: str) -> None:
        self.config = config
        self.workload = workload
        self.placeholder_name = f"{workload}-headroom"
        self.timings = config.clock.demo_settings(config.timings)
        self.cluster = Cluster(self.timings, workload_image=WORKLOAD_IMAGE)
        self.provisioner = config.provisioner()
        self.template = PodTemplate(gpus=1, image=WORKLOAD_IMAGE)
        self.placeholder_template = PodTemplate(gpus=1, priority=PLACEHOLDER_PRIORITY, preempt_never=True,
                                                image=config.placeholder_image, ready_after_s=0.0)
        self.placeholders = PlaceholderDeployment(self)
        self._origin = time.monotonic()
        self.load_started: float | None = None  # the layer's clock when the load started

    def now(self) -> float:
        return time.monotonic() - self._origin

    # -- the replicas' gate ---------------------------------------------------------------------------------------
    def pod_created(self, name: str) -> None:
        self.cluster.create_pod(name, self.workload, self.template, self.now())

    def pod_deleted(self, name: str) -> None:
        self.cluster.delete_pod(name, self.now())

    def may_start(self, name: str) -> bool:
        """The pod is bound and its image is on the node: its container may start."""
        pod = self.cluster.pods.get(name)
        return pod is not None and pod.running(self.now())

    def mark_ready(self, name: str) -> None:
        self.cluster.mark_ready(name, self.now())

    def take_evicted(self) -> list[str]:
        """The workload's pods evicted from a removed node since the last call: each is a new pod now, waiting for a
        GPU, and the replica that ran in the old one must stop."""
        names = [p.name for p in self.cluster.evicted if p.owner == self.workload]
        self.cluster.evicted.clear()
        return names

    # -- start-up and the loop ------------------------------------------------------------------------------------
    def bootstrap(self) -> None:
        """Nodes that are up already for the pods that exist (the workload's first, then the placeholders), as a
        cluster that has run this workload for a while has them, each with its pods' image; then the pods are
        bound."""
        now = self.now()
        standing = self.config.headroom_min if self.config.headroom_auto else self.config.headroom
        if standing:
            self.cluster.set_replicas(self.placeholder_name, self.placeholder_template, standing)
        self.cluster.step(now)
        for owner, image in ((self.workload, WORKLOAD_IMAGE), (self.placeholder_name, self.config.placeholder_image)):
            pods = [p for p in self.cluster.pending_pods() if p.owner == owner]
            if pods:  # a node holds the images of the pods it has run: pause placeholders' nodes lack the workload's
                self.provisioner.warm_nodes(self.cluster, pods, now, images=(image,))
                self.cluster.step(now)

    def step(self) -> None:
        now = self.now()
        self.cluster.step(now)
        self.provisioner.tick(self.cluster, now)

    async def run(self) -> None:
        while True:
            self.step()
            await asyncio.sleep(self.config.tick_s)

    # -- what the run records -------------------------------------------------------------------------------------
    def sample(self) -> dict[str, Any]:
        """The timeline's node columns at this moment (GPU-node-seconds: real-time equivalent, since the load
        started)."""
        now = self.now()
        nodes = self.cluster.live_nodes(now)
        base = 0.0 if self.load_started is None else self.cluster.gpu_node_seconds(self.load_started)
        return {"nodes": len(nodes), "node_gpus": sum(n.gpus for n in nodes),
                "gpus_allocatable": sum(n.allocatable(now) for n in nodes),
                "pending_pods": sum(1 for p in self.cluster.pending_pods() if p.owner == self.workload),
                "placeholders": sum(1 for p in self.cluster.live_pods(self.placeholder_name) if p.running(now)),
                "gpu_node_seconds": self.config.clock.real_figure(self.cluster.gpu_node_seconds(now) - base)}

    def spans(self) -> list[PodSpan]:
        """The workload's pods, on the load's clock (seconds since it started, demo time)."""
        origin = self.load_started or 0.0

        def rel(t: float | None) -> float | None:
            return None if t is None else t - origin

        return [PodSpan(p.created_at - origin, rel(p.bound_at), rel(p.running_at), rel(p.ready_at),
                        rel(p.deleted_at)) for p in self.cluster.all_pods() if p.owner == self.workload]

    def replicas(self, since: float, until: float) -> list[dict[str, Any]]:
        """The workload's pods created between ``since`` and ``until`` (the load's clock, demo time), each as the
        capacity report writes a replica: its node, whether it waited for a node created after it (``new_node``),
        and its phases in real time: ``node`` (created to bound), ``image`` (bound to running) and ``model``
        (running to ready), ``None`` where it did not get there."""
        origin = self.load_started or 0.0
        real = self.config.clock.real_figure

        def span(start: float | None, end: float | None) -> float | None:
            return None if start is None or end is None else real(max(0.0, end - start))

        found = []
        for pod in sorted(self.cluster.all_pods(), key=lambda p: p.created_at):
            if pod.owner != self.workload or not since <= pod.created_at - origin < until:
                continue
            node = self.cluster.nodes.get(pod.node) if pod.node is not None else None
            found.append({"pod": pod.name, "node": pod.node,
                          "new_node": None if node is None else not node.warm and node.requested_at >= pod.created_at,
                          "phases_s": {"node": span(pod.created_at, pod.bound_at),
                                       "image": span(pod.bound_at, pod.running_at),
                                       "model": span(pod.running_at, pod.ready_at)},
                          "image_cached": None if pod.bound_at is None else pod.running_at == pod.bound_at})
        return found

    def launches(self) -> list[float]:
        """When each node was requested, on the load's clock (demo time)."""
        origin = self.load_started or 0.0
        return sorted(n.requested_at - origin for n in self.cluster.nodes.values() if not n.warm)

    def totals(self, end: float | None = None) -> dict[str, Any]:
        """Run totals, real-time equivalents, over the load (``end``: the layer's clock at its end)."""
        real = self.config.clock.real_figure
        start = self.load_started or 0.0
        end = self.now() if end is None else end
        nodes = [n for n in self.cluster.nodes.values() if n.requested_at < end]
        return {
            "gpu_node_seconds": real(self.cluster.gpu_node_seconds(end) - self.cluster.gpu_node_seconds(start)),
            "pending_pod_seconds": real(self.cluster.pending_pod_seconds(end, self.workload, since=start)),
            "nodes_launched": sum(1 for n in nodes if not n.warm),
            "nodes": [{"name": n.name, "instance_type": n.instance.name, "gpus": n.gpus,
                       "requested_s": real(n.requested_at - start), "gpus_allocatable_s": real(n.gpus_at - start),
                       "removed_s": None if n.deleted_at is None else real(n.deleted_at - start)}
                      for n in nodes],
            "placeholders_preempted": sum(1 for p in self.cluster.all_pods()
                                          if p.owner == self.placeholder_name and p.preempted),
        }


@dataclass
class PlaceholderDeployment:
    """The placeholders' Deployment as the HPA loop's :class:`~loadtest.hpa.loop.Workload`."""

    layer: NodeLayer

    @property
    def spec_replicas(self) -> int:
        rs = self.layer.cluster.replica_sets.get(self.layer.placeholder_name)
        return 0 if rs is None else rs.replicas

    def pods(self) -> tuple[PodState, ...]:
        now = self.layer.now()
        return tuple(PodState(p.name, RUNNING if p.running(now) else PENDING)
                     for p in self.layer.cluster.live_pods(self.layer.placeholder_name))

    async def scale(self, replicas: int) -> None:
        self.layer.cluster.set_replicas(self.layer.placeholder_name, self.layer.placeholder_template, replicas)


def owners(layer: NodeLayer) -> Mapping[str, Sequence[str]]:
    """Deployment -> its live pods, for the kube-state-metrics stand-in."""
    found: dict[str, list[str]] = {}
    for pod in layer.cluster.live_pods():
        found.setdefault(pod.owner, []).append(pod.name)
    return found
