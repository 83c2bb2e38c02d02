"""Karpenter v1 as a pure model: batching, bin-packing onto the fewest nodes, NodePool limits, consolidation.

Read from kubernetes-sigs/karpenter (``pkg/``) and aws/karpenter-provider-aws (docs and ``pkg/``):

* **Batching** (``controllers/provisioning/batcher.go``, ``operator/options/options.go``): the first pending pod
  opens a window; each new pod extends it while pods keep coming within ``--batch-idle-duration`` (1 s), up to
  ``--batch-max-duration`` (10 s) from its start; then every provisionable pod is scheduled at once. A pod that is
  still provisionable triggers again every 10 s (``provisioning/controller.go``, ``RequeueAfter``). A pod is
  provisionable when kube-scheduler found it unschedulable and it is not about to preempt (``utils/pod``
  ``IsProvisionable``): a replica that preempts a placeholder launches nothing.
* **Bin-packing** (``provisioning/scheduling/scheduler.go``, ``queue.go``): pods in the queue's order (cpu, memory
  descending, then oldest: here all ask for GPUs only) go onto existing nodes first, in-flight ones included at the
  capacity their NodeClaim expects (``state/statenode.go``: an uninitialized node's zero ``nvidia.com/gpu`` is
  taken from the NodeClaim, so a GPU node that is Ready before its device plugin reports causes no second launch),
  then onto a NodeClaim of this batch (the one with the fewest pods first) if one of its instance types still fits
  them all, else onto a new NodeClaim. Each NodeClaim launches its cheapest instance type
  (:meth:`NodePool.cheapest`).
* **Limits** (``addToNewNodeClaim``, ``subtractMax``, docs ``concepts/nodepools.md``): instance types larger than
  what remains of ``limits["nvidia.com/gpu"]`` are dropped; a new NodeClaim counts at the largest of its instance
  types until it exists; existing nodes count at their capacity. With nothing left, pods wait.
* **Consolidation** (``controllers/nodeclaim/disruption/consolidation.go``, ``disruption/emptiness.go``,
  ``disruption/controller.go``, ``disruption/validation.go``, docs ``concepts/disruption.md``): a node becomes
  consolidatable ``consolidateAfter`` after its last pod was bound or removed (or after it initialized). The
  disruption controller is one loop: every 10 s (``pollingPeriod``) it computes one command, waits out its 15 s
  validation (``commandValidationDelay``) before anything else, removes the candidates that are still valid and
  within the budget, and after a command computes the next one at once (``RequeueImmediately``). Empty nodes are
  removed under every policy, as many in one command as the budget allows. Under ``WhenEmptyOrUnderutilized``
  (and ``Balanced``, below) the model also removes one non-empty node per command whose pods all fit on the other
  nodes' free GPUs: the one with the fewest, then the lowest-priority pods; its pods are evicted and recreated
  (:meth:`~loadtest.nodes.cluster.Cluster.remove_node`). Upstream does more per command: multi-node consolidation,
  tried before single-node, searches (binary search, up to 100 candidates) for the most nodes one command can
  delete, and candidates are ordered by price over disruption cost (``SavingsRatio``), not by pod count; so under
  these policies the model can take more commands than Karpenter to shrink a pool, and can pick another node
  first. The shipped NodePool is ``WhenEmpty``, where neither arises.
* **Disruption budgets** (``pkg/apis/v1/nodepool.go`` ``GetAllowedDisruptionsByReason``,
  ``disruption/helpers.go`` ``BuildDisruptionBudgetMapping``): a command takes at most the NodePool's allowed
  disruptions for its reason (``Empty``, ``Underutilized``): the smallest budget that applies, a percentage of the
  pool's initialized nodes rounded up (the default ``nodes: "10%"`` is 1 node up to 10 nodes, 2 up to 20), less
  the nodes already NotReady or being deleted (none here: a removed node goes at once). So the shipped NodePool
  removes its empty GPU nodes one per command, 15 s apart, where without budgets one command took them all.
* **Balanced** (``disruption/balanced.go``, v1.14.0): a move is approved when the share of the NodePool's cost it
  saves, over the share of the NodePool's disruption cost it causes, is at least 1/2 (``BalancedK`` 2); a node's
  disruption cost is 1 plus its pods' eviction costs (``utils/disruption`` ``EvictionCost``: 1 + priority / 2^25,
  clamped to [-10, 10], negatives counted as 0). The table has no prices, so the model scores a node's GPUs as its
  price (as :meth:`~loadtest.nodes.shapes.NodePool.cheapest` does), and applies the score to the non-empty
  removals above. The shipped code has neither a feature gate nor a threshold setting for it: ``Balanced`` is a
  value of ``consolidationPolicy`` that v1.14.0 and v1.14.1 act on as written (``pkg/operator/options/options.go``
  lists the gates: NodeRepair, ReservedCapacity, SpotToSpotConsolidation, NodeOverlay, StaticCapacity,
  CapacityBuffer), with ``BalancedK`` fixed at 2. The design (``designs/balanced-consolidation.md``) plans a
  ``BalancedConsolidation`` gate, off while alpha, and defers a tunable k; the RFC's ``consolidationThreshold``
  field was folded into ``consolidationPolicy`` before the merge and is not in the API. Replacing a node with a
  cheaper one, spot, drift and expiry are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadtest.nodes.cluster import Cluster, Node, Pod
from loadtest.nodes.instances import InstanceType
from loadtest.nodes.placement import first_fit
from loadtest.nodes.shapes import NodePool

__all__ = ["BALANCED_K", "Karpenter", "KarpenterSettings", "NodeClaim"]

BALANCED_K = 2
"""``BalancedK`` (``pkg/apis/v1/nodepool.go``): a Balanced move passes at a score of ``1 / BALANCED_K``."""


def _eviction_cost(pod: Pod) -> float:
    """``EvictionCost`` of a pod without a ``pod-deletion-cost`` annotation."""
    return min(10.0, max(-10.0, 1.0 + pod.priority / 2**25))


@dataclass(frozen=True)
class KarpenterSettings:
    batch_idle_s: float = 1.0
    batch_max_s: float = 10.0
    requeue_s: float = 10.0
    disruption_poll_s: float = 10.0
    validation_s: float = 15.0


@dataclass
class NodeClaim:
    """A node of one scheduling round: its pods and the instance types that still fit them."""

    options: tuple[InstanceType, ...]
    pods: list[Pod] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pods)


class Karpenter:
    name = "karpenter"

    def __init__(self, pool: NodePool, settings: KarpenterSettings = KarpenterSettings()) -> None:
        self.pool = pool
        self.settings = settings
        self._window: tuple[float, float] | None = None  # (start, last trigger)
        self._in_window: set[str] = set()
        self._triggered_at: dict[str, float] = {}
        self._next_poll: float | None = None
        self._command: tuple[float, list[Node], str] | None = None  # (validation ends, candidates, reason)
        self.launches: list[tuple[float, str, int]] = []  # (time, instance type, pods)

    # -- provisioning ---------------------------------------------------------------------------------------------
    def tick(self, cluster: Cluster, now: float) -> list[Node]:
        """Triggers, the batch window, the scheduling round when it closes; then the disruption loop."""
        s = self.settings
        for pod in self._provisionable(cluster):
            last = self._triggered_at.get(pod.name)
            if last is None or now - last >= s.requeue_s:
                self._triggered_at[pod.name] = now
                self._trigger(pod.name, now)
        launched: list[Node] = []
        if self._window is not None:
            start, last = self._window
            if now >= start + s.batch_max_s or now >= last + s.batch_idle_s:
                self._window = None
                self._in_window.clear()
                launched = self.provision(cluster, now)
        self._disrupt(cluster, now)
        return launched

    def _trigger(self, pod: str, now: float) -> None:
        if pod in self._in_window:
            return
        self._in_window.add(pod)
        self._window = (now, now) if self._window is None else (self._window[0], now)

    @staticmethod
    def _provisionable(cluster: Cluster) -> list[Pod]:
        return [p for p in cluster.pending_pods() if p.unschedulable_at is not None]

    def provision(self, cluster: Cluster, now: float) -> list[Node]:
        """One scheduling round over every provisionable pod; launches the NodeClaims it needs."""
        claims = self.schedule(cluster, self._provisionable(cluster))
        nodes = []
        for claim in claims:
            instance = self.pool.cheapest(claim.options)
            nodes.append(cluster.add_node(instance, now, self.name))
            self.launches.append((now, instance.name, len(claim.pods)))
        return nodes

    def warm_nodes(self, cluster: Cluster, pods: list[Pod], now: float, images: tuple[str, ...]) -> list[Node]:
        """Nodes that are up already for ``pods``, as this NodePool would have launched them."""
        return [cluster.add_node(self.pool.cheapest(c.options), now, self.name, ready=True, images=images)
                for c in self.schedule(cluster, pods)]

    def schedule(self, cluster: Cluster, pods: list[Pod]) -> list[NodeClaim]:
        """The NodeClaims ``pods`` need beyond the existing and in-flight nodes (the round's simulation)."""
        existing = sorted(cluster.live_nodes(cluster.now),
                          key=lambda n: (n.allocatable(cluster.now) == 0, n.name))  # initialized nodes first
        remaining = None
        if self.pool.gpu_limit is not None:
            remaining = self.pool.gpu_limit - sum(n.gpus for n in existing if n.owner == self.name)
        # Existing nodes first: a pod placed there takes nothing from the NodeClaims, so the rest go to them in order.
        _, left = first_fit(sorted(pods, key=lambda p: (p.created_at, p.name)),
                            [cluster.expected_free_gpus(n) for n in existing])
        claims: list[NodeClaim] = []
        for pod in left:
            claim = next((c for c in sorted(claims, key=lambda c: len(c.pods))
                          if any(t.gpus >= c.gpus + pod.gpus for t in c.options)), None)
            if claim is not None:
                claim.options = tuple(t for t in claim.options if t.gpus >= claim.gpus + pod.gpus)
                claim.pods.append(pod)
                continue
            options = tuple(t for t in self.pool.instance_types if t.gpus >= pod.gpus
                            and (remaining is None or t.gpus <= remaining))
            if not options:
                continue  # "all available instance types exceed limits for nodepool": the pod waits
            claims.append(NodeClaim(options, [pod]))
            if remaining is not None:
                remaining -= max(t.gpus for t in options)
        return claims

    # -- disruption -----------------------------------------------------------------------------------------------
    def _disrupt(self, cluster: Cluster, now: float) -> None:
        """The disruption loop: a command under validation blocks it; a command carried out is followed at once by
        the next; otherwise it looks every poll period."""
        s = self.settings
        if self._command is not None:
            until, nodes, reason = self._command
            if now < until:
                return
            self._command = None
            valid = [n for n in nodes if n.alive(now) and self._removable(cluster, n, now, reason)]
            for node in valid[:self.allowed_disruptions(cluster, now, reason)]:
                cluster.remove_node(node.name, now)
            if valid:
                self._next_poll = now  # RequeueImmediately
        if self._next_poll is None:
            self._next_poll = now
        if now < self._next_poll or self.pool.consolidate_after_s is None:
            return
        self._next_poll = now + s.disruption_poll_s
        candidates = [n for n in cluster.live_nodes(now) if n.owner == self.name and self._consolidatable(n, now)]
        empty = [n for n in candidates if not cluster.pods_on(n.name)]
        chosen, reason = empty[:self.allowed_disruptions(cluster, now, "Empty")], "Empty"
        if not empty and self._underutilized_too and self.allowed_disruptions(cluster, now, "Underutilized"):
            # The node that disrupts least first: fewer pods, then lower-priority pods (docs concepts/disruption.md).
            fitting = [n for n in candidates if self._pods_fit_elsewhere(cluster, n, now)
                       and self._balanced_approves(cluster, n, now)]
            chosen = sorted(fitting, key=lambda n: (len(cluster.pods_on(n.name)),
                                                    max(p.priority for p in cluster.pods_on(n.name)), n.name))[:1]
            reason = "Underutilized"
        if chosen:
            self._command = (now + s.validation_s, chosen, reason)

    def allowed_disruptions(self, cluster: Cluster, now: float, reason: str) -> int:
        """How many of the pool's nodes a command for ``reason`` may remove now: the budget over the initialized
        nodes, less those NotReady or being deleted (``BuildDisruptionBudgetMapping``; none here, see the module
        docstring)."""
        initialized = [n for n in cluster.live_nodes(now) if n.owner == self.name and n.allocatable(now) > 0]
        disrupting = sum(1 for n in initialized if not n.ready(now))
        return max(self.pool.allowed_disruptions(len(initialized), reason) - disrupting, 0)

    def _consolidatable(self, node: Node, now: float) -> bool:
        assert self.pool.consolidate_after_s is not None
        if node.allocatable(now) == 0:
            return False  # not initialized
        since = max(node.last_pod_event, node.gpus_at)
        return now >= since + self.pool.consolidate_after_s

    def _removable(self, cluster: Cluster, node: Node, now: float, reason: str) -> bool:
        """The command still holds after the validation delay: an empty node is still empty (the emptiness
        validator filters with ``IsEmpty``), a node to consolidate still has its pods fit elsewhere."""
        if not self._consolidatable(node, now):
            return False
        if not cluster.pods_on(node.name):
            return True
        return reason == "Underutilized" and self._pods_fit_elsewhere(cluster, node, now) and \
            self._balanced_approves(cluster, node, now)

    @property
    def _underutilized_too(self) -> bool:
        """Non-empty nodes are consolidated too (``consolidation.go`` ``ShouldDisrupt``: all but ``WhenEmpty``)."""
        return self.pool.consolidation_policy in ("WhenEmptyOrUnderutilized", "Balanced")

    def _balanced_approves(self, cluster: Cluster, node: Node, now: float) -> bool:
        """Under ``Balanced``, whether deleting ``node`` scores at least ``1 / BALANCED_K`` (GPUs as the price)."""
        if self.pool.consolidation_policy != "Balanced":
            return True
        pool = [n for n in cluster.live_nodes(now) if n.owner == self.name]
        cost = {n.name: 1.0 + sum(max(0.0, _eviction_cost(p)) for p in cluster.pods_on(n.name)) for n in pool}
        savings = node.gpus / sum(n.gpus for n in pool)
        disruption = cost[node.name] / sum(cost.values())
        return savings / disruption >= 1 / BALANCED_K

    @staticmethod
    def _pods_fit_elsewhere(cluster: Cluster, node: Node, now: float) -> bool:
        others = [cluster.free_gpus(n, now) for n in cluster.live_nodes(now) if n.name != node.name]
        return not first_fit(sorted(cluster.pods_on(node.name), key=lambda p: -p.gpus), others)[1]
