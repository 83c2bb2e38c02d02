"""Cluster Autoscaler as a pure model: the scan loop, upcoming nodes, node group sizes, GPU nodes that are Ready
before their GPUs, expendable pods, and the scale-down timers.

Read from kubernetes/autoscaler ``cluster-autoscaler/FAQ.md`` (its flag table and "How does scale-up work?", "How
does scale-down work?", "How does Cluster Autoscaler work with Pod Priority and Preemption?"),
``cluster-autoscaler/utils/gpu/gpu.go``, and at ``cluster-autoscaler-1.36.1`` ``core/static_autoscaler.go``
(``RunOnce``, ``allPodsAreNew``, ``scaleDown``, ``isScaleDownInCooldown``), ``core/scaledown/planner/planner.go``
(``categorizeNodes``), ``core/scaledown/eligibility/eligibility.go`` and ``core/scaledown/unremovable/nodes.go``:

* Every ``--scan-interval`` (10 s) it looks at the unschedulable pods. Pods with a priority below
  ``--expendable-pods-priority-cutoff`` (-10) trigger no scale-up (and do not hold a node at scale-down).
* **Very new pods wait** (``allPodsAreNew``): of the pods left once those that fit on existing and upcoming nodes
  are taken out, if the oldest was created less than 2 s ago (``unschedulablePodTimeBuffer``), or some request a
  GPU and the oldest of those less than 30 s ago (``unschedulablePodWithGpuTimeBuffer``: "nodes with GPU are very
  expensive and we're ready to sacrifice a bit more latency to wait for more pods"), the loop scales nothing up and
  holds scale-down back for itself (``DisableScaleDownForLoop``). Both are constants, not flags. So a GPU
  scale-up starts at the first scan at least 30 s after its oldest pod was created, 30 to 40 s with the 10 s scan
  (a real Cluster Autoscaler 1.36.1 began one about 33 s after the pods appeared, issue 48; Karpenter about 1 s).
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
* Scale-down, every loop (``scaleDown`` runs after the scale-up, whatever it did): a node whose GPUs' requested
  share (expendable pods aside) is at least ``--scale-down-gpu-utilization-threshold`` (0.5) is not underutilized
  and is looked at again next loop; an underutilized node whose pods fit on the other nodes is unneeded from that
  loop on; one whose pods fit nowhere is unremovable and not looked at again for
  ``--unremovable-node-recheck-timeout`` (5 min; ``AddTimeout``, skipped as ``RecentlyUnremovable``). Unneeded for
  ``--scale-down-unneeded-time`` (10 min), a node is removed (empty nodes together, a non-empty one at a time, never
  below ``minSize``), but not while scale-down is in cooldown: within ``--scale-down-delay-after-add`` (10 min) of a
  scale-up, ``--scale-down-delay-after-delete`` (0 s) of a removal, or in a loop that waited for very new pods. The
  cooldown holds removals back, not the unneeded clock (the planner updates every loop). How the two flags
  combine: a node is removed at the later of (the loop that first found it unneeded + unneeded time) and (the
  last scale-up + delay after add); and a node found unremovable (say one replica on a 4-GPU node, with no free
  GPU elsewhere) is looked at again only when its recheck timeout has run out, so after its last pod goes its
  unneeded clock can start up to 5 minutes late. A node at or above the threshold (the demo's 1-GPU nodes with a
  replica) is never marked unremovable: it is looked at every loop.
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
    unremovable_node_recheck_timeout_s: float = 300.0
    new_pod_buffer_s: float = 2.0  # unschedulablePodTimeBuffer (a constant upstream)
    gpu_pod_buffer_s: float = 30.0  # unschedulablePodWithGpuTimeBuffer (a constant upstream)


@dataclass
class _Scan:
    last_scale_up: float | None = None
    last_delete: float | None = None
    unneeded_since: dict[str, float] = field(default_factory=dict)
    recheck_at: dict[str, float] = field(default_factory=dict)  # unremovable nodes: when they are looked at again
    waited_for_new_pods: bool = False  # this loop: DisableScaleDownForLoop


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
        self._state.waited_for_new_pods = False
        added = self.scale_up(cluster, now)
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
        if not left or self._very_new(left, now):
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

    def _very_new(self, pods: list[Pod], now: float) -> bool:
        """``allPodsAreNew``: the oldest pod (or the oldest GPU pod) is too young; the loop then holds scale-down
        back too."""
        s = self.settings
        gpu = [p.created_at for p in pods if p.gpus > 0]
        young = now < min(p.created_at for p in pods) + s.new_pod_buffer_s or \
            (bool(gpu) and now < min(gpu) + s.gpu_pod_buffer_s)
        self._state.waited_for_new_pods = young
        return young

    @staticmethod
    def _binpack(pods: list[Pod], gpus: int, limit: int) -> tuple[int, list[Pod]]:
        """Template nodes of ``gpus`` GPUs for the pods, first fit in the pods' order, at most ``limit`` of them;
        returns how many, and the pods they hold."""
        nodes: list[int] = []
        held, _ = first_fit(pods, nodes, open_nodes=limit, node_gpus=gpus)
        return len(nodes), held

    # -- scale-down -----------------------------------------------------------------------------------------------
    def scale_down(self, cluster: Cluster, now: float) -> list[Node]:
        """The planner's update (every loop), then the removals unless scale-down is in cooldown."""
        unneeded = self._update_unneeded(cluster, now)
        if self._in_cooldown(now):
            return []
        state = self._state
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

    def _update_unneeded(self, cluster: Cluster, now: float) -> list[tuple[Node, NodeGroup]]:
        """``categorizeNodes``: each node's unneeded clock kept or cleared, unremovable ones set aside until their
        recheck; returns the nodes unneeded for ``--scale-down-unneeded-time``."""
        s, state = self.settings, self._state
        unneeded = []
        for node in cluster.live_nodes(now):
            group = self.group_of(node)
            if group is None or node.allocatable(now) == 0:
                continue
            verdict = self._verdict(cluster, node, now)
            if verdict != "unneeded":
                state.unneeded_since.pop(node.name, None)
                if verdict == "unremovable":
                    state.recheck_at[node.name] = now + s.unremovable_node_recheck_timeout_s
                continue
            since = state.unneeded_since.setdefault(node.name, now)
            if now - since >= s.scale_down_unneeded_time_s:
                unneeded.append((node, group))
        return unneeded

    def _verdict(self, cluster: Cluster, node: Node, now: float) -> str:
        """``recently unremovable`` (until its recheck), ``not underutilized``, ``unremovable`` (its pods fit on no
        other node) or ``unneeded``."""
        recheck = self._state.recheck_at.get(node.name)
        if recheck is not None and now < recheck:
            return "recently unremovable"
        self._state.recheck_at.pop(node.name, None)
        requested = sum(p.gpus for p in self._important(cluster, node))
        if requested / node.gpus >= self.settings.scale_down_gpu_utilization_threshold:
            return "not underutilized"
        others = [cluster.free_gpus(n, now) for n in cluster.live_nodes(now) if n.name != node.name]
        return "unremovable" if first_fit(self._important(cluster, node), others)[1] else "unneeded"

    def _in_cooldown(self, now: float) -> bool:
        """``isScaleDownInCooldown``: a loop that waited for very new pods, or within the delays after a scale-up
        or a removal."""
        s, state = self.settings, self._state
        return state.waited_for_new_pods or \
            (state.last_scale_up is not None and now - state.last_scale_up < s.scale_down_delay_after_add_s) or \
            (state.last_delete is not None and now - state.last_delete < s.scale_down_delay_after_delete_s)

    def _important(self, cluster: Cluster, node: Node) -> list[Pod]:
        return [p for p in cluster.pods_on(node.name) if p.priority >= self.settings.expendable_pods_priority_cutoff]
