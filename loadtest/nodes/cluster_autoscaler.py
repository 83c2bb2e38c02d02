"""Cluster Autoscaler as a pure model: the scan loop, upcoming nodes, node group sizes, GPU nodes that are Ready
before their GPUs, expendable pods, and the scale-down timers.

Read from kubernetes/autoscaler ``cluster-autoscaler/FAQ.md`` (its flag table and "How does scale-up work?", "How
does scale-down work?", "How does Cluster Autoscaler work with Pod Priority and Preemption?") and
``cluster-autoscaler/utils/gpu/gpu.go``:

* Every ``--scan-interval`` (10 s) it looks at the unschedulable pods. Pods with a priority below
  ``--expendable-pods-priority-cutoff`` (-10) trigger no scale-up (and do not hold a node at scale-down).
* Pods that fit on nodes it already asked for count as placed: a node not registered yet (until
  ``--max-node-provision-time``, 15 min) or registered and not Ready yet (``MaxNodeStartupTime``, 15 min) is an
  *upcoming* node at its group's template capacity (``clusterstate/clusterstate.go`` ``GetUpcomingNodes``: the
  target size less the Ready, Unready, long-not-started and long-unregistered nodes); a Ready node with the GPU
  label whose ``nvidia.com/gpu`` is not allocatable yet is taken at its template's GPUs (``utils/gpu``: otherwise
  each GPU node would cause a second, needless scale-up while its driver starts). A group whose nodes lack the
  label (:attr:`NodeGroup.gpu_label` False) shows that second scale-up.
* The rest are bin-packed onto template nodes of each group that can host them (the ``binpacking`` estimator),
  no more nodes than the group's ``maxSize`` leaves room for (``estimator/sng_capacity_threshold.go``); the pods
  those nodes hold are the option's pods. The expander (``least-waste``, the default) then picks a group. Upstream
  (``expander/waste/waste.go``) scores an option by the unrequested fraction of its nodes' CPU plus that of their
  memory, and never looks at GPUs. This model has no CPU or memory figures, only GPUs, so it scores the
  unrequested fraction of the nodes' GPUs instead: the same formula over another resource, a stand-in that can
  rank groups otherwise than Cluster Autoscaler does (two groups whose nodes leave the same share of GPUs idle but
  not the same share of CPU, say). The first group in the file wins a tie (Cluster Autoscaler's default expander
  chain breaks ties at random). One group grows per loop.
* Scale-down: in a loop without scale-up, a node is unneeded while its GPUs' requested share is below
  ``--scale-down-gpu-utilization-threshold`` (0.5) and its pods (expendable ones aside) fit on the other nodes;
  unneeded for ``--scale-down-unneeded-time`` (10 min), it is removed (empty nodes together, a non-empty one at a
  time, never below ``minSize``), but not within ``--scale-down-delay-after-add`` (10 min) of a scale-up nor
  ``--scale-down-delay-after-delete`` (0 s) of a removal: the cool-down stops removals, not the unneeded clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadtest.nodes.cluster import Cluster, Node, Pod
from loadtest.nodes.placement import first_fit
from loadtest.nodes.shapes import NodeGroup

__all__ = ["AutoscalerSettings", "ClusterAutoscaler"]


@dataclass(frozen=True)
class AutoscalerSettings:
    scan_interval_s: float = 10.0
    scale_down_unneeded_time_s: float = 600.0
    scale_down_delay_after_add_s: float = 600.0
    scale_down_delay_after_delete_s: float = 0.0
    max_node_provision_time_s: float = 900.0
    scale_down_gpu_utilization_threshold: float = 0.5
    expendable_pods_priority_cutoff: int = -10


@dataclass
class _Scan:
    last_scale_up: float | None = None
    last_delete: float | None = None
    unneeded_since: dict[str, float] = field(default_factory=dict)


class ClusterAutoscaler:
    name = "cluster-autoscaler"

    def __init__(self, groups: tuple[NodeGroup, ...], settings: AutoscalerSettings = AutoscalerSettings()) -> None:
        self.groups = groups
        self.settings = settings
        self._next_scan: float | None = None
        self._state = _Scan()
        self.scale_ups: list[tuple[float, str, int]] = []  # (time, group, nodes)

    def owner(self, group: NodeGroup) -> str:
        return f"{self.name}/{group.name}"

    def group_of(self, node: Node) -> NodeGroup | None:
        return next((g for g in self.groups if self.owner(g) == node.owner), None)

    def tick(self, cluster: Cluster, now: float) -> list[Node]:
        if self._next_scan is None:
            self._next_scan = now
        if now < self._next_scan:
            return []
        self._next_scan = now + self.settings.scan_interval_s
        added = self.scale_up(cluster, now)
        if not added:
            self.scale_down(cluster, now)
        return added

    def warm_nodes(self, cluster: Cluster, pods: list[Pod], now: float, images: tuple[str, ...]) -> list[Node]:
        """Nodes that are up already for ``pods``: the groups filled in the file's order, each up to its
        ``maxSize``."""
        nodes: list[Node] = []
        left = list(pods)
        for group in self.groups:
            room = group.max_size - sum(1 for n in cluster.live_nodes(now) if n.owner == self.owner(group))
            count, placed = self._binpack([p for p in left if p.gpus <= group.instance.gpus], group.instance.gpus,
                                          max(room, 0))
            nodes += [cluster.add_node(group.instance, now, self.owner(group), ready=True, images=images)
                      for _ in range(count)]
            left = [p for p in left if all(p is not q for q in placed)]
        return nodes

    # -- scale-up -------------------------------------------------------------------------------------------------
    def _capacity(self, node: Node, now: float) -> int:
        """The GPUs the simulation counts ``node`` at."""
        group = self.group_of(node)
        if now < node.ready_at:  # upcoming: not registered, or registered and not started
            return node.gpus if now - node.requested_at < self.settings.max_node_provision_time_s else 0
        if node.allocatable(now) == 0 and group is not None and group.gpu_label:
            return node.gpus  # utils/gpu: a GPU node still starting its driver
        return node.allocatable(now)

    def scale_up(self, cluster: Cluster, now: float) -> list[Node]:
        s = self.settings
        waiting = sorted((p for p in cluster.pending_pods() if p.unschedulable_at is not None
                          and p.priority >= s.expendable_pods_priority_cutoff), key=lambda p: (p.created_at, p.name))
        _, left = first_fit(waiting, [self._capacity(n, now) - sum(p.gpus for p in cluster.pods_on(n.name))
                                      for n in cluster.live_nodes(now)])
        if not left:
            return []
        options = []
        for order, group in enumerate(self.groups):
            size = sum(1 for n in cluster.live_nodes(now) if n.owner == self.owner(group))
            fitting = [p for p in left if p.gpus <= group.instance.gpus]
            if not fitting or size >= group.max_size:
                continue
            nodes, held = self._binpack(fitting, group.instance.gpus, group.max_size - size)
            avail = nodes * group.instance.gpus
            options.append(((avail - sum(p.gpus for p in held)) / avail, order, nodes, group))
        if not options:
            return []
        _, _, count, group = min(options, key=lambda o: o[:2])
        self._state.last_scale_up = now
        self.scale_ups.append((now, group.name, count))
        return [cluster.add_node(group.instance, now, self.owner(group)) for _ in range(count)]

    @staticmethod
    def _binpack(pods: list[Pod], gpus: int, limit: int) -> tuple[int, list[Pod]]:
        """Template nodes of ``gpus`` GPUs for the pods, first fit in the pods' order, at most ``limit`` of them;
        returns how many, and the pods they hold."""
        nodes: list[int] = []
        held, _ = first_fit(pods, nodes, open_nodes=limit, node_gpus=gpus)
        return len(nodes), held

    # -- scale-down -----------------------------------------------------------------------------------------------
    def scale_down(self, cluster: Cluster, now: float) -> list[Node]:
        s, state = self.settings, self._state
        unneeded = []
        for node in cluster.live_nodes(now):
            group = self.group_of(node)
            if group is None or node.allocatable(now) == 0:
                continue
            if self._unneeded(cluster, node, now):
                since = state.unneeded_since.setdefault(node.name, now)
                if now - since >= s.scale_down_unneeded_time_s:
                    unneeded.append((node, group))
            else:
                state.unneeded_since.pop(node.name, None)
        if (state.last_scale_up is not None and now - state.last_scale_up < s.scale_down_delay_after_add_s) or \
                (state.last_delete is not None and now - state.last_delete < s.scale_down_delay_after_delete_s):
            return []
        removed: list[Node] = []
        empty = [(n, g) for n, g in unneeded if not self._important(cluster, n)]
        chosen = empty or unneeded[:1]
        for node, group in chosen:
            size = sum(1 for n in cluster.live_nodes(now) if n.owner == self.owner(group))
            if size <= group.min_size:
                continue
            cluster.remove_node(node.name, now)
            state.unneeded_since.pop(node.name, None)
            removed.append(node)
        if removed:
            state.last_delete = now
        return removed

    def _important(self, cluster: Cluster, node: Node) -> list[Pod]:
        return [p for p in cluster.pods_on(node.name) if p.priority >= self.settings.expendable_pods_priority_cutoff]

    def _unneeded(self, cluster: Cluster, node: Node, now: float) -> bool:
        requested = sum(p.gpus for p in self._important(cluster, node))
        if requested / node.gpus >= self.settings.scale_down_gpu_utilization_threshold:
            return False
        others = [cluster.free_gpus(n, now) for n in cluster.live_nodes(now) if n.name != node.name]
        return not first_fit(self._important(cluster, node), others)[1]
