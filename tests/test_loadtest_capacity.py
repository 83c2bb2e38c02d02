"""Time to capacity and the headroom comparison, pure: each surge of a profile, its time to capacity split into
decision, node, image and model phases; the ``--compare-capacity`` table and figures; the summary lines; the node
panel of the plot; the kube-state-metrics stand-in's series; the demo's settings on the compressed clock."""

from __future__ import annotations

import asyncio
import io
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from loadtest.cli.summary import print_summary
from loadtest.clock import DemoClock
from loadtest.hpa.record import SyncRecord
from loadtest.loadgen.profile import parse_profile
from loadtest.measure.progress import Progress
from loadtest.measure.summary import summarize
from loadtest.measure.time_to_capacity import ScaleUp, demand_for, measure, replicas_for, replicas_needed, surges
from loadtest.measure.timeline import TimelineRow
from loadtest.nodes import NodeTimings, load_nodepool
from loadtest.nodes.cluster import PodSpan
from loadtest.nodes.layer import NodeLayerConfig, NodesKind
from loadtest.scenarios.capacity_compare import (
    capacity_figures,
    capacity_row,
    format_capacity_table,
    run_capacity_comparison,
)
from loadtest.scenarios.capacity_options import capacity_profile
from loadtest.scenarios.demo_settings import DemoSettings, capacity_settings
from loadtest.scenarios.describe import describe_hpa
from loadtest.scenarios.outputs import Outputs, RunResult
from loadtest.standins.kube_state import OwnerSeries, replicaset_name

pytestmark = pytest.mark.unit


def test_surges_are_the_rises_of_the_load() -> None:
    assert [(s.start, s.end) for s in surges(capacity_profile("step", 2))] == [(300.0, 2400.0), (3420.0, 5520.0)]
    assert [(s.start, s.end) for s in surges(capacity_profile("ramp", 2))] == [(300.0, 2700.0), (3720.0, 6120.0)]
    assert [(s.start, s.end) for s in surges(parse_profile("10s:5,10s:5..20"))] == [(10.0, 20.0)]
    # A step up between two segments starts a surge, a step down ends it.
    assert [(s.start, s.end) for s in surges(parse_profile("10s:5,10s:20,10s:5,10s:20"))] == [(10.0, 20.0),
                                                                                             (30.0, 40.0)]


def test_the_demand_for_a_surges_capacity_comes_at_the_step_or_where_a_ramp_crosses_it() -> None:
    step, ramp = (surges(capacity_profile(shape))[0] for shape in ("step", "ramp"))
    assert demand_for(capacity_profile("step"), step, 4, 15.0) == 300.0  # 55 requests/s at once
    # The ramp from 8 to 55 over 600 s needs a 4th replica (above 3 x 15 = 45 requests/s) 472 s in.
    assert demand_for(capacity_profile("ramp"), ramp, 4, 15.0) == pytest.approx(300.0 + 37 / 47 * 600, abs=0.1)
    assert demand_for(capacity_profile("ramp"), ramp, 1, 15.0) == 300.0



def test_each_surge_needs_the_replicas_of_its_own_peak() -> None:
    profile = parse_profile("300s:8,600s:30,300s:8,600s:55,300s:8")
    low, high = surges(profile)
    assert [replicas_needed(profile, s, 15.0) for s in (low, high)] == [2, 4]  # 30 and 55 requests/s at 15 each
    assert [replicas_for(55.0, 55 / 4), replicas_for(55.0, 15.0), replicas_for(0.0, 15.0)] == [4, 4, 0]
    # The low surge's capacity is its two replicas, not the profile's peak four: with four it is never reached.
    assert demand_for(profile, low, 2, 15.0) == pytest.approx(300.0, abs=0.1)

SURGE = surges(parse_profile("10s:5,5s:5..50,100s:50,5s:50..5"))[0]  # from 10 s to 115 s
SYNCS = [SyncRecord(12.0, 1, 2), SyncRecord(50.0, 2, 4)]


def test_time_to_capacity_charges_each_moment_to_the_slowest_outstanding_phase() -> None:
    pods = [PodSpan(-100.0, -100.0, -100.0, -50.0),                     # the replica from before: ready
            PodSpan(12.0, 22.0, 30.0, 35.0),                             # 1 -> 2: node 10 s, image 8, model 5
            PodSpan(50.0, 50.0, 50.0, 55.0),                             # 2 -> 4: a placeholder's GPU and image
            PodSpan(50.0, 60.0, 60.0, 65.0)]                             # a new node, the image already there
    rows = [TimelineRow(t=float(t), phase="hold", target_rps=50.0, sent=50, ok=48, errors=2,
                        latencies_s=[0.01, 0.5]) for t in range(120)]
    up = measure(1, SURGE, SYNCS, pods, rows, launches=[12.5, 50.5, 200.0], needed=4, service_s=0.04, step_s=0.01,
                 demand_at=13.0)
    assert up.first_decision_s == 12.0 and (up.replicas_before, up.replicas_asked) == (1, 4)
    assert up.time_to_capacity_s == pytest.approx(55.0, abs=0.02)  # 4 ready at 65 s, 55 s after the surge began
    assert up.behind_demand_s == pytest.approx(52.0, abs=0.02)  # the load needed 4 from 13 s
    assert up.phases_s == pytest.approx({"decision": 2 + 15, "node": 10 + 10, "image": 8, "model": 5 + 5}, abs=0.05)
    assert sum(up.phases_s.values()) == pytest.approx(up.time_to_capacity_s, abs=0.05)
    assert up.pending_pod_seconds == pytest.approx(10.0 + 10.0)
    assert up.first_replica_wait_s == pytest.approx(10.0)  # the pod of the 1 -> 2 decision waited for its node
    assert (up.requests_failed, up.requests_queued, up.nodes_launched) == (2 * 55, 55, 2)
    doc = up.to_json(DemoClock(20.0))
    assert doc["time_to_capacity_s"] == pytest.approx(1100.0) and doc["phases_s"]["node"] == pytest.approx(400.0)


def test_a_surge_whose_capacity_never_arrives_has_no_time_to_capacity() -> None:
    pods = [PodSpan(-100.0, -100.0, -100.0, -50.0), PodSpan(12.0)]  # never bound
    up = measure(1, SURGE, SYNCS[:1], pods, [], [], needed=2, service_s=0.04, step_s=0.1)
    assert up.time_to_capacity_s is None and up.phases_s["node"] == pytest.approx(115.0 - 12.0, abs=0.2)
    assert up.behind_demand_s is None
    no_scale_up = measure(1, SURGE, [], pods[:1], [], [], needed=2, service_s=0.04)
    assert no_scale_up.first_decision_s is None and no_scale_up.time_to_capacity_s is None


def summary_with(ttc: list[float | None], cost: float, failed: int = 0, behind: list[float | None] | None = None
                 ) -> Any:
    phases = {"decision": 20.0, "node": 180.0, "image": 334.0, "model": 48.0}
    surge_docs = [ScaleUp(i + 1, 0.0, 1.0, t, 1, 4, phases, 180.0, 12.0, failed, 3, 1,
                          t if behind is None else behind[i]).to_json()
                  for i, t in enumerate(ttc)]
    capacity = {"time_scale": 1.0, "surges": surge_docs, "gpu_node_seconds": cost, "pending_pod_seconds": 12.0,
                "nodes_launched": 1, "nodes": [], "placeholders_preempted": 0, "headroom_decisions": []}
    rows = [TimelineRow(t=0.0, phase="hold", target_rps=1.0, sent=10, ok=10 - failed, errors=failed)]
    return summarize(rows, [], None, None, extra={"capacity": capacity})


def test_the_comparison_table_and_the_figures_the_headroom_is_judged_by() -> None:
    rows = [capacity_row("none", summary_with([1200.0, 1100.0], 20_000.0, failed=5)),
            capacity_row("static 4", summary_with([150.0, 140.0], 40_000.0)),
            capacity_row("auto", summary_with([500.0, 300.0], 27_000.0))]
    table = format_capacity_table(rows).splitlines()
    assert [cell.strip() for cell in table[0].split("|")[1:-1]] == [
        "headroom", "time to capacity per surge", "behind demand", "surge 1: decision / node / image / model",
        "requests failed", "GPU-node-seconds", "pending pod-seconds"]
    assert "| none     | 1200 s, 1100 s" in table[2] and "5 of 10" in table[2]
    assert capacity_figures(rows) == [
        "static headroom cut the first surge's time to capacity by 88 % (1200 s -> 150 s; goal: >= 80 %)",
        "auto headroom kept 67 % of that gain (500 s; goal: >= 70 %)",
        "auto headroom's extra GPU-node-seconds were 35 % of static headroom's (7000 vs 20000; goal: <= 50 %)"]
    assert capacity_figures(rows[:1]) == []  # nothing to compare with


def test_a_ramp_adds_the_figures_behind_demand() -> None:
    # On a ramp the time to capacity counts the ramp too; behind demand counts from when the load needed it.
    rows = [capacity_row("none", summary_with([1400.0], 20_000.0, behind=[900.0])),
            capacity_row("static 4", summary_with([650.0], 40_000.0, behind=[150.0])),
            capacity_row("auto", summary_with([750.0], 29_000.0, behind=[250.0]))]
    assert capacity_figures(rows)[2:4] == [
        "static headroom cut the first surge's time behind demand by 83 % (900 s -> 150 s; goal: >= 80 %)",
        "auto headroom kept 87 % of that gain (250 s; goal: >= 70 %)"]


def test_the_comparison_runs_none_static_then_auto_and_writes_one_summary(tmp_path: Path) -> None:
    config = NodeLayerConfig(NodesKind.KARPENTER, DemoClock(20.0), pool=load_nodepool())
    settings = capacity_settings(config, quick=True)
    seen: list[NodeLayerConfig] = []

    async def runner(s: DemoSettings, outputs: Outputs, progress: Progress) -> RunResult:
        assert s.capacity is not None
        seen.append(s.capacity)
        cost = {0: 10_000.0}.get(s.capacity.headroom, 30_000.0 if not s.capacity.headroom_auto else 15_000.0)
        return RunResult(summary_with([600.0], cost), [], [])

    comparison = asyncio.run(run_capacity_comparison(
        settings, 4, plot=None, summary=tmp_path / "s.json", csv=None,
        progress=lambda name: Progress(Console(file=io.StringIO())), runner=runner))
    assert [n for n, _ in comparison.runs] == ["none", "static", "auto"]
    assert [r.headroom for r in comparison.rows] == ["none", "static 4", "auto"]
    assert comparison.figures == capacity_figures(comparison.rows) and comparison.figures
    assert [(c.headroom, c.headroom_auto) for c in seen] == [(0, False), (4, False), (4, True)]
    assert seen[2].headroom_min == 0  # the chart's headroom.auto.minReplicas on Kubernetes 1.37+
    assert '"figures"' in (tmp_path / "s.json").read_text()



def test_the_cli_prints_each_run_the_table_and_the_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--compare-capacity``'s console output comes from the comparison's own rows and figures."""
    import loadtest.scenarios.capacity_compare
    from loadtest.cli.demo import _compare_capacity

    costs = {"none": 10_000.0, "static": 30_000.0, "auto": 15_000.0}
    times = {"none": 1200.0, "static": 150.0, "auto": 400.0}

    async def runner(s: DemoSettings, outputs: Outputs, progress: Progress) -> RunResult:
        assert s.capacity is not None
        name = "none" if not s.capacity.headroom else "auto" if s.capacity.headroom_auto else "static"
        return RunResult(summary_with([times[name]], costs[name]), [], [])

    real = loadtest.scenarios.capacity_compare.run_capacity_comparison
    monkeypatch.setattr(loadtest.scenarios.capacity_compare, "run_capacity_comparison",
                        lambda *args, **kwargs: real(*args, **kwargs, runner=runner))
    console = Console(record=True, width=200, file=io.StringIO())
    config = NodeLayerConfig(NodesKind.KARPENTER, DemoClock(20.0), pool=load_nodepool(), headroom=4)
    settings = capacity_settings(config, quick=True)
    _compare_capacity(console, settings, tmp_path / "c.png", None, None)
    text = console.export_text()
    assert [line.split(" ")[0] for line in text.splitlines() if line.startswith("--headroom")] == ["--headroom"] * 3
    assert "| static 4 | 150 s" in text
    assert "static headroom cut the first surge's time to capacity by 88 % (1200 s -> 150 s; goal: >= 80 %)" in text
    assert "auto headroom's extra GPU-node-seconds were 25 % of static headroom's" in text

def test_the_summary_prints_each_surge_and_the_node_totals() -> None:
    console = Console(record=True, width=200, file=io.StringIO())
    print_summary(console, summary_with([1200.0, None], 20_000.0), "summary")
    text = console.export_text()
    assert "surge 1: time to capacity" in text and "1200 s (1 -> 4 replicas; decision 20 s, node 180 s, image 334 s, " \
                                                  "model 48 s)" in text
    print_summary(console, summary_with([1200.0], 20_000.0, behind=[700.0]), "summary")
    assert "model 48 s; 700 s after the load needed them)" in console.export_text()
    assert "surge 2: time to capacity" in text and "not reached before the load fell" in text
    assert "GPU nodes" in text and "20000 GPU-node-seconds" in text
    assert "clock" not in text  # one clock at time scale 1
    compressed = summary_with([1200.0], 20_000.0)
    compressed.extra["capacity"]["time_scale"] = 20.0
    print_summary(console, compressed, "compressed")
    assert "the lines up to GPU-seconds in the demo's seconds; surges and GPU nodes in real-time seconds (the run " \
           "went 20x faster)" in console.export_text()


def test_the_plot_draws_nodes_and_pending_pods_beside_replicas(tmp_path: Path) -> None:
    from loadtest.measure.plot import plot_capacity_comparison, plot_timeline

    rows = [TimelineRow(t=float(t), phase="hold", target_rps=50.0, sent=50, ok=50, current_replicas=1 + (t > 5),
                        desired_replicas=2, nodes=1 + (t > 2), node_gpus=1 + 4 * (t > 2),
                        gpus_allocatable=1 + 4 * (t > 8), pending_pods=int(2 < t <= 8), placeholders=0)
            for t in range(12)]
    plot_timeline(rows, [SyncRecord(2.0, 1, 2)], tmp_path / "one.png", title="t", clock=DemoClock(20.0))
    plot_capacity_comparison([("none", rows, []), ("auto", rows, [])], tmp_path / "cmp.png", title="t",
                             clock=DemoClock(20.0))
    pods_only = [replace(r, nodes=None, node_gpus=None, gpus_allocatable=None, pending_pods=None, placeholders=None)
                 for r in rows]
    plot_timeline(pods_only, [SyncRecord(2.0, 1, 2)], tmp_path / "pods.png", title="t", clock=DemoClock(20.0))
    for name in ("one.png", "cmp.png", "pods.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")

    def height(name: str) -> int:
        return struct.unpack(">II", (tmp_path / name).read_bytes()[16:24])[1]  # the PNG header's IHDR

    assert height("one.png") > height("pods.png")  # the GPU nodes panel below the others


def test_the_kube_state_stand_in_writes_owner_series() -> None:
    registry = CollectorRegistry()
    registry.register(OwnerSeries("demo", lambda: {"infer": ["infer-0", "infer-1"]}))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    pods = families["kube_pod_owner"].samples
    assert [(s.labels["pod"], s.labels["owner_kind"], s.labels["owner_name"]) for s in pods] == [
        ("infer-0", "ReplicaSet", replicaset_name("infer")), ("infer-1", "ReplicaSet", replicaset_name("infer"))]
    [owner] = families["kube_replicaset_owner"].samples
    assert (owner.labels["replicaset"], owner.labels["owner_kind"], owner.labels["owner_name"]) == (
        replicaset_name("infer"), "Deployment", "infer")


def test_capacity_settings_put_real_time_on_the_compressed_clock() -> None:
    config = NodeLayerConfig(NodesKind.KARPENTER, DemoClock(20.0), pool=load_nodepool(), headroom=4, headroom_auto=True)
    settings = capacity_settings(config)
    assert settings.sync_period_s == 0.75 and settings.scale_down_window_s == 15
    assert settings.cold_start_s == pytest.approx(NodeTimings().model_load_s / 20)
    assert settings.profile.duration == pytest.approx(capacity_profile().duration / 20)
    assert settings.real_profile.text() == capacity_profile().text()
    assert describe_hpa(settings).endswith("sync every 0.75s (15s in real time)")
    # --sync-period 30s --scale-down-window 10m, given in real time like the profile
    slower = capacity_settings(config, sync_period_s=30.0, scale_down_window_s=600.0)
    assert (slower.sync_period_s, slower.scale_down_window_s) == (1.5, 30)
    spec = settings.hpa_spec()
    assert spec.behavior is not None and spec.behavior.scale_up is not None
    assert {p.period_seconds for p in spec.behavior.scale_up.policies or ()} == {1}  # 15 s / 20, at least 1
    headroom = settings.placeholder_hpa_spec()
    assert (headroom.min_replicas, headroom.max_replicas) == (0, 4)
    # 15 requests/s per replica (25 at 40 ms, at the 60 % target) over the 562 s a node, the image and the model
    # take (28.1 s on this clock)
    [metric] = headroom.metrics
    assert (metric.name, metric.target_milli, metric.described_object) == (
        "inference_request_rate_growth", 534, "Deployment/infer")
    queue = replace(settings, capacity=replace(config, headroom_signal="queue", headroom_min=1,
                                               headroom_scale_up_s=60.0))
    spec = queue.placeholder_hpa_spec()
    assert (spec.metrics[0].name, spec.metrics[0].target_milli) == ("inference_queue_growth_rate", 178)  # 5 / 28.1
    assert spec.min_replicas == 1 and spec.behavior.scale_up.stabilization_window_seconds == 3  # 60 s / 20
    # --provisioning-time 3m: the same 15 requests/s per replica over 180 s (9 s on this clock)
    faster = replace(settings, capacity=replace(config, provisioning_s=180.0)).placeholder_hpa_spec()
    assert faster.metrics[0].target_milli == 1667


def test_capacity_counts_once_the_hpa_asked_for_what_the_load_needs_and_got_it() -> None:
    # The HPA asks 1 -> 2, gets it, asks 2 -> 4; capacity is the 4 ready, not the 2 (the load needs 4); a later
    # overshoot (4 -> 5) after that does not move it.
    syncs = [SyncRecord(12.0, 1, 2), SyncRecord(30.0, 2, 4), SyncRecord(60.0, 4, 5)]
    pods = [PodSpan(-100.0, -100.0, -100.0, -50.0), PodSpan(12.0, 12.0, 12.0, 20.0), PodSpan(30.0, 40.0, 40.0, 45.0),
            PodSpan(30.0, 40.0, 40.0, 45.0), PodSpan(60.0)]
    up = measure(1, SURGE, syncs, pods, [], [], needed=4, service_s=0.04, step_s=0.01)
    assert up.time_to_capacity_s == pytest.approx(35.0, abs=0.02) and up.replicas_asked == 4
    assert up.phases_s == pytest.approx({"decision": 2 + 10, "node": 10, "image": 0, "model": 8 + 5}, abs=0.05)


def test_a_replica_recreated_under_its_name_keeps_its_earlier_life() -> None:
    from loadtest.nodes import Cluster, PodTemplate

    cluster = Cluster()
    cluster.create_pod("infer-1", "infer", PodTemplate(), 0.0)
    cluster.delete_pod("infer-1", 5.0)
    cluster.create_pod("infer-1", "infer", PodTemplate(), 9.0)
    assert [p.created_at for p in cluster.all_pods()] == [0.0, 9.0]
    assert cluster.pending_pod_seconds(10.0) == 5.0 + 1.0 and cluster.pending_pod_seconds(10.0, since=4.0) == 2.0
    with pytest.raises(ValueError, match="pod infer-1 exists"):
        cluster.create_pod("infer-1", "infer", PodTemplate(), 10.0)


def test_the_nodepools_own_timer_runs_on_the_compressed_clock_too() -> None:
    from loadtest.nodes import Karpenter

    config = NodeLayerConfig(NodesKind.KARPENTER, DemoClock(20.0), pool=load_nodepool())
    karpenter = config.provisioner()
    assert isinstance(karpenter, Karpenter)
    assert karpenter.pool.consolidate_after_s == 15.0 and karpenter.settings.batch_max_s == 0.5  # 5 min, 10 s
