"""The node model's rules added for issue 48, as tables, each case naming the upstream file it is read from:
Karpenter's NodePool disruption budgets and its one-command-at-a-time disruption loop; pods evicted from a removed
node recreated by their ReplicaSet (and, in the demo, the replica behind them stopped); Cluster Autoscaler leaving
very new pods alone (2 s, 30 s for GPU pods), the loop that waits holding scale-down back, and how
``--unremovable-node-recheck-timeout`` and ``--scale-down-delay-after-add`` shape a removal."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from loadtest.nodes import (
    Cluster,
    ClusterAutoscaler,
    InstanceType,
    Karpenter,
    NodeGroup,
    PodTemplate,
    ShapeError,
    load_nodepool,
)
from loadtest.nodes.cluster_autoscaler import AutoscalerSettings
from loadtest.nodes.shapes import DEFAULT_BUDGETS, Budget
from tests.test_loadtest_nodes import G1, G2, G4, PLACEHOLDER, REPLICA, TIMINGS, pool, run

pytestmark = pytest.mark.unit

KARPENTER = "kubernetes-sigs/karpenter v1.14.0 "
CA = "kubernetes/autoscaler cluster-autoscaler-1.36.1 cluster-autoscaler/"


def pinned(cluster: Cluster, node_name: str, name: str, template: PodTemplate = REPLICA, owner: str = "pinned") -> None:
    """A pod already running on a node (image present, model loaded)."""
    pod = cluster.create_pod(name, owner, template, 0.0)
    pod.node, pod.bound_at, pod.running_at, pod.ready_at = node_name, 0.0, 0.0, 0.0


# ------------------------------------------------------------------------------------ Karpenter: budgets

BUDGETS = [
    # (case, upstream, empty nodes (all consolidatable at 300 s), budgets, when each goes, in the nodes' order)
    ("the default budget: 10 % of 3 nodes rounds up to 1, one node per command, each after its 15 s validation",
     "pkg/apis/v1/nodepool.go (Budgets default {nodes: 10%}; GetAllowedDisruptions rounds up); "
     "pkg/controllers/disruption/controller.go (RequeueImmediately after a command)",
     3, DEFAULT_BUDGETS, [315.0, 330.0, 345.0]),
    ("12 nodes: 10 % is 2, then 10 % of the 10 left is 1", "pkg/apis/v1/nodepool.go (GetAllowedDisruptions); "
     "disruption/helpers.go (BuildDisruptionBudgetMapping counts the initialized nodes)",
     12, DEFAULT_BUDGETS, [315.0, 315.0] + [330.0 + 15 * k for k in range(10)]),
    ("nodes: 100% lets one command take every empty node", "disruption/emptiness.go (ComputeCommands: every empty "
     "candidate within the budget)", 3, (Budget("100%"),), [315.0] * 3),
    ("no budgets (an empty list) limit nothing", "pkg/apis/v1/nodepool.go (GetAllowedDisruptionsByReason: "
     "MaxInt32 without a budget)", 3, (), [315.0] * 3),
    ("nodes: \"0\" blocks every disruption", "pkg/apis/v1/nodepool.go (a budget of 0)", 2, (Budget("0"),),
     [None, None]),
    ("a count: nodes: \"2\"", "pkg/apis/v1/nodepool.go (an int budget is taken as written)", 3, (Budget("2"),),
     [315.0, 315.0, 330.0]),
    ("a budget for another reason leaves empty nodes alone", "pkg/apis/v1/nodepool.go (Budget.reasons; "
     "GetAllowedDisruptionsByReason applies the budgets that name the reason)", 3,
     (Budget("0", ("Underutilized",)),), [315.0] * 3),
    ("the smallest applicable budget wins", "pkg/apis/v1/nodepool.go (GetAllowedDisruptionsByReason: lo.Min)", 3,
     (Budget("100%"), Budget("1", ("Empty",))), [315.0, 330.0, 345.0]),
]


@pytest.mark.parametrize(("case", "upstream", "count", "budgets", "removed"), BUDGETS, ids=[b[0] for b in BUDGETS])
def test_karpenter_disruption_budgets_limit_the_nodes_removed_at_once(
        case: str, upstream: str, count: int, budgets: tuple[Budget, ...], removed: list[float | None]) -> None:
    cluster = Cluster(TIMINGS)
    karpenter = Karpenter(replace(pool(G1, after=300.0), budgets=budgets))
    nodes = [cluster.add_node(G1, 0.0, "karpenter", ready=True) for _ in range(count)]
    run(cluster, karpenter, 600.0, step=1.0)
    assert [n.deleted_at for n in nodes] == removed, KARPENTER + upstream


def test_an_underutilized_budget_holds_consolidation_of_a_busy_node_back() -> None:
    # pkg/apis/v1/nodepool.go (DisruptionReasonUnderutilized); disruption/singlenodeconsolidation.go takes its
    # candidates within the Underutilized budget. Node b's placeholder fits on a: without the budget b goes.
    for budgets, removed in (((), 315.0), ((Budget("0", ("Underutilized",)),), None)):
        cluster = Cluster(TIMINGS)
        karpenter = Karpenter(replace(pool(G4, policy="WhenEmptyOrUnderutilized"), budgets=budgets))
        a, b = (cluster.add_node(G4, 0.0, "karpenter", ready=True, images=("inference",)) for _ in range(2))
        pinned(cluster, a.name, "a-0")
        pinned(cluster, b.name, "b-0", PLACEHOLDER)
        run(cluster, karpenter, 400.0, step=1.0)
        assert b.deleted_at == removed, budgets


def test_an_empty_node_that_got_a_pod_during_its_validation_stays() -> None:
    # disruption/validation.go (EmptinessValidator: the candidates are filtered again with IsEmpty after the 15 s).
    cluster = Cluster(TIMINGS)
    karpenter = Karpenter(pool(G1, policy="WhenEmptyOrUnderutilized", after=300.0))
    node = cluster.add_node(G1, 0.0, "karpenter", ready=True, images=("inference",))
    run(cluster, karpenter, 305.0, step=1.0)
    pinned(cluster, node.name, "late-0")  # bound at 306 s, inside the command's validation (300 s to 315 s)
    run(cluster, karpenter, 320.0, start=306.0, step=1.0)
    assert node.deleted_at is None


BUDGET_MANIFESTS = [
    # (case, spec.disruption as YAML, budgets read)
    ("absent: the CRD's default", "{consolidationPolicy: WhenEmpty}", (Budget("10%"),)),
    ("a count, a percentage and reasons", "{budgets: [{nodes: '3'}, {nodes: 50%, reasons: [Empty, Drifted]}]}",
     (Budget("3"), Budget("50%", ("Empty", "Drifted")))),
    ("an empty list: no budget", "{budgets: []}", ()),
    # A scheduled budget is active only in its cron window; the demo's clock has no date, so it is left out.
    ("a scheduled budget is left out", "{budgets: [{nodes: '0', schedule: '@daily', duration: 10m}, {nodes: '1'}]}",
     (Budget("1"),)),
]


@pytest.mark.parametrize(("case", "disruption", "budgets"), BUDGET_MANIFESTS, ids=[b[0] for b in BUDGET_MANIFESTS])
def test_nodepool_budgets_are_read_from_the_manifest(tmp_path: Path, case: str, disruption: str,
                                                     budgets: tuple[Budget, ...]) -> None:
    # pkg/apis/v1/nodepool.go (Budget: nodes, reasons, schedule, duration; +kubebuilder:default:={{nodes: "10%"}}).
    manifest = tmp_path / "pool.yaml"
    manifest.write_text("kind: NodePool\nspec:\n  template:\n    spec:\n      requirements:\n"
                        "      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g5]}\n"
                        f"  disruption: {disruption}\n")
    assert load_nodepool(manifest).budgets == budgets


@pytest.mark.parametrize(("disruption", "error"), [
    ("{budgets: [{nodes: ten}]}", "spec.disruption.budgets[0].nodes: expected a count or a percentage such as "
                                  "\"10%\", got 'ten'"),
    ("{budgets: [{nodes: 150%}]}", "spec.disruption.budgets[0].nodes"),
    ("{budgets: [{nodes: '1', reasons: [Expired]}]}", "spec.disruption.budgets[0].reasons: expected a list of "
                                                       "Underutilized, Empty, Drifted"),
    ("{budgets: {nodes: '1'}}", "spec.disruption.budgets: expected a list"),
])
def test_a_malformed_budget_is_a_one_line_error_naming_the_field(tmp_path: Path, disruption: str, error: str) -> None:
    # pkg/apis/v1/nodepool.go (Budget.nodes pattern ^((100|[0-9]{1,2})%|[0-9]+)$; DisruptionReason enum).
    manifest = tmp_path / "pool.yaml"
    manifest.write_text("kind: NodePool\nspec:\n  template:\n    spec:\n      requirements:\n"
                        "      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g5]}\n"
                        f"  disruption: {disruption}\n")
    with pytest.raises(ShapeError) as info:
        load_nodepool(manifest)
    assert "pool.yaml: " in str(info.value) and error in str(info.value) and "\n" not in str(info.value)


def test_the_shipped_nodepool_has_the_default_budget() -> None:
    # hpa-examples/karpenter/nodepool-gpu.yaml writes budgets: [{nodes: "10%"}], upstream's default.
    assert load_nodepool().budgets == (Budget("10%"),)
    assert load_nodepool().allowed_disruptions(4, "Empty") == 1


# --------------------------------------------------------------------- evicted pods are recreated

def test_a_replica_on_a_consolidated_node_is_recreated_and_loads_its_model_again() -> None:
    # Karpenter docs concepts/disruption.md (WhenEmptyOrUnderutilized deletes a node whose pods fit elsewhere: they
    # are evicted); kubernetes/kubernetes pkg/controller/replicaset (a deleted pod is replaced). Node b's replica fits
    # on node a, which lacks the image: the new pod binds there at once, pulls the image, then loads its model.
    cluster = Cluster(TIMINGS)
    karpenter = Karpenter(pool(G4, policy="WhenEmptyOrUnderutilized", after=300.0))
    a = cluster.add_node(G4, 0.0, "karpenter", ready=True)
    b = cluster.add_node(G1, 0.0, "karpenter", ready=True, images=("inference",))
    pinned(cluster, a.name, "other-0", PLACEHOLDER)
    pinned(cluster, b.name, "infer-1", owner="infer")
    run(cluster, karpenter, 320.0, step=1.0)
    assert b.deleted_at == 315.0
    [old] = cluster.retired
    new = cluster.pods["infer-1"]
    assert (old.deleted_at, old.node) == (315.0, b.name)
    assert (new.created_at, new.node, new.bound_at) == (315.0, a.name, 316.0)  # bound at the next step
    assert new.running_at == 316.0 + TIMINGS.image_pull_s and new.ready_at == new.running_at + TIMINGS.model_load_s
    assert [p.name for p in cluster.evicted] == ["infer-1"]


def test_a_placeholder_on_a_consolidated_node_is_replaced_by_its_replicaset() -> None:
    # The model's own ReplicaSets (the placeholders') replace an evicted pod under a new name at the next reconcile;
    # it is not listed as the caller's.
    cluster = Cluster(TIMINGS)
    karpenter = Karpenter(pool(G4, policy="WhenEmptyOrUnderutilized", after=300.0))
    a = cluster.add_node(G4, 0.0, "karpenter", ready=True, images=("inference",))
    b = cluster.add_node(G1, 0.0, "karpenter", ready=True, images=("inference",))
    cluster.set_replicas("infer-headroom", PLACEHOLDER, 1)
    pinned(cluster, a.name, "other-0", PLACEHOLDER)
    cluster.step(0.0)  # the placeholder's pod binds to the oldest node with room: a; move it to b
    placeholder = cluster.live_pods("infer-headroom")[0]
    placeholder.node = b.name
    run(cluster, karpenter, 320.0, step=1.0)
    assert b.deleted_at == 315.0
    [again] = cluster.live_pods("infer-headroom")
    assert again.name != placeholder.name and again.node == a.name and cluster.evicted == []


def test_a_node_layer_hands_the_workloads_evicted_pods_to_its_deployment_once() -> None:
    from loadtest.clock import DemoClock
    from loadtest.nodes.layer import NodeLayer, NodeLayerConfig, NodesKind

    layer = NodeLayer(NodeLayerConfig(NodesKind.KARPENTER, DemoClock(1.0), pool=pool(G1)), "infer")
    node = layer.cluster.add_node(G1, 0.0, "karpenter", ready=True)
    pinned(layer.cluster, node.name, "infer-0", owner="infer")
    pinned(layer.cluster, node.name, "other-0", owner="other")
    layer.cluster.remove_node(node.name, 1.0)
    assert layer.take_evicted() == ["infer-0"] and layer.take_evicted() == []
    assert not layer.may_start("infer-0")  # its new pod waits for a GPU


# ------------------------------------------------------------------ Cluster Autoscaler: scale-down timers

def test_a_loop_that_waits_for_very_new_pods_removes_nothing() -> None:
    # core/static_autoscaler.go (RunOnce: DisableScaleDownForLoop when allPodsAreNew; isScaleDownInCooldown). An
    # empty node, unneeded since 0 s, goes at 600 s; a 2-GPU pod no group can hold, created at 590 s, makes the
    # loops at 600 and 610 s wait for it, and the removal comes at 620 s, once the pod is 30 s old.
    for events, removed in (([], 600.0), ([(590.0, "infer-big", 1)], 620.0)):
        cluster, ca = Cluster(TIMINGS), ClusterAutoscaler((NodeGroup("g", G1, 0, 10),))
        node = cluster.add_node(G1, 0.0, ca.owner(ca.groups[0]), ready=True)
        run(cluster, ca, 700.0, step=1.0, events=events)
        assert node.deleted_at == removed, CA + "core/static_autoscaler.go"
        assert ca.scale_ups == []


RECHECK = [
    # (case, upstream, node type, --unremovable-node-recheck-timeout, when the node goes). A warm node holds one
    # replica, deleted at 100 s; no other node exists.
    ("a 4-GPU node at 25 % whose replica fits nowhere else is unremovable, looked at again only after 5 min: "
     "its unneeded clock starts at 300 s, not 100 s", "core/scaledown/planner/planner.go (categorizeNodes: "
     "AddTimeout(unremovable, UnremovableNodeRecheckTimeout)); core/scaledown/eligibility/eligibility.go "
     "(RecentlyUnremovable)", G4, 300.0, 900.0),
    ("a 1-GPU node with its replica is not underutilized: looked at every loop", "core/scaledown/eligibility/"
     "eligibility.go (NotUnderutilized: no timeout)", G1, 300.0, 700.0),
    ("with the recheck timeout at 0 the 4-GPU node is looked at every loop", "config/flags/flags.go "
     "(--unremovable-node-recheck-timeout, default 5m)", G4, 0.0, 700.0),
]


@pytest.mark.parametrize(("case", "upstream", "instance", "recheck", "removed"), RECHECK, ids=[r[0] for r in RECHECK])
def test_cluster_autoscaler_looks_again_at_an_unremovable_node_after_its_recheck_timeout(
        case: str, upstream: str, instance: InstanceType, recheck: float, removed: float) -> None:
    settings = AutoscalerSettings(unremovable_node_recheck_timeout_s=recheck)
    cluster, ca = Cluster(TIMINGS), ClusterAutoscaler((NodeGroup("g", instance, 0, 10),), settings)
    node = cluster.add_node(instance, 0.0, ca.owner(ca.groups[0]), ready=True)
    pinned(cluster, node.name, "infer-0", owner="infer")
    for t in range(1000):
        if t == 100:
            cluster.delete_pod("infer-0", 100.0)
        cluster.step(float(t))
        ca.tick(cluster, float(t))
    assert node.deleted_at == removed, CA + upstream


def test_a_scale_up_within_the_delay_after_add_holds_a_removal_past_its_unneeded_time() -> None:
    # core/static_autoscaler.go (isScaleDownInCooldown: lastScaleUpTime + ScaleDownDelayAfterAdd); FAQ.md flag
    # table. The node, unneeded from 230 s, would go at 830 s; a 2-GPU scale-up of the other group at 750 s (its pod
    # created at 720 s) holds it until 1350 s. The unneeded clock kept running: it is removed at once then.
    cluster = Cluster(TIMINGS)
    ca = ClusterAutoscaler((NodeGroup("g", G1, 0, 10), NodeGroup("big", G2, 0, 10)))
    run(cluster, ca, 1400.0, step=1.0, events=[(0.0, "infer", 1), (230.0, "infer", 0), (720.0, "infer-big", 1)])
    [(up, _, _), (later, group, _)] = ca.scale_ups
    first = cluster.nodes[cluster.all_pods()[0].node]
    assert (up, later, group) == (30.0, 750.0, "big") and first.deleted_at == 1350.0
