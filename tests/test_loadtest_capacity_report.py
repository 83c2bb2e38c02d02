"""The capacity report's reconstruction, pure (``loadtest.measure.cluster``): the controllers' event messages, the API
objects of both event APIs, Karpenter's NodeClaims and Cluster Autoscaler's events, each in the shape its upstream
writes it (``tests/support/cluster_records.py`` names the files), read back into the demo's time-to-capacity
figures; a recorded scale-up whose phases are known gives exactly those phases back."""

from __future__ import annotations

import copy
import csv
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from loadtest.cli.summary import surge_lines
from loadtest.measure.cluster import messages
from loadtest.measure.cluster.collect import Collector
from loadtest.measure.cluster.journal import Journal, JournalError, replay
from loadtest.measure.cluster.objects import event_of, nodeclaim_of, pod_of
from loadtest.measure.cluster.replicas import SUB_PHASES
from loadtest.measure.cluster.report import CapacityReport, Workload, build_report
from loadtest.measure.cluster.rows import LOAD_COLUMNS
from loadtest.measure.time_to_capacity import PHASES
from loadtest.measure.timeline import write_csv
from loadtest.scenarios.capacity_compare import capacity_row_from, format_capacity_table
from loadtest.scenarios.capacity_report import replicas_csv_path, write_report
from tests.support import cluster_records as cr
from tests.support.cluster_records import GPU_REASON, RS, T0, Records, karpenter_scale_up

pytestmark = pytest.mark.unit

WINDOW = (T0, T0 + 3600)


def report_of(records: Records, *, karpenter: bool = True, api: str = "events.k8s.io/v1",
              window: tuple[float, float] = WINDOW, **kwargs: Any) -> CapacityReport:
    collector = Collector(karpenter=karpenter)
    for resource, items in records.objects().items():
        for item in items:
            collector.add(resource, cr.as_core_v1(item) if api == "core/v1" and resource == "events" else item)
    return build_report(collector.records(), Workload("ml", "vllm"), *window, **kwargs)


# -- the controllers' messages, as their sources write them --------------------------------------------------------

PULLS = [  # pkg/kubelet/images/image_manager.go: EnsureImageExists
    ('Successfully pulled image "vllm/vllm-openai:v0.10.1" in 5m33.512s (5m33.601s including waiting). Image size: '
     '9512345678 bytes.', messages.Pull("vllm/vllm-openai:v0.10.1", 333.601, False)),  # 1.30+
    ('Successfully pulled image "nginx" in 717ms (718ms including waiting)', messages.Pull("nginx", 0.718, False)),
    ('Successfully pulled image "registry.k8s.io/echoserver:1.4" in 7.46s', messages.Pull(
        "registry.k8s.io/echoserver:1.4", 7.46, False)),  # before 1.27: the pull alone
    ('Successfully pulled image "busybox" in 1h2m3.5s (1h2m4s including waiting). Image size: 10 bytes.',
     messages.Pull("busybox", 3724.0, False)),
    ('Container image "vllm/vllm-openai:v0.10.1" already present on machine', messages.Pull(
        "vllm/vllm-openai:v0.10.1", 0.0, True)),
    ('Pulling image "vllm/vllm-openai:v0.10.1"', None),
    ('Back-off pulling image "vllm/vllm-openai:v0.10.1"', None),
]


@pytest.mark.parametrize(("message", "expected"), PULLS)
def test_the_kubelet_pull_messages(message: str, expected: messages.Pull | None) -> None:
    assert messages.pull(message) == expected


def test_the_scheduler_and_preemption_messages() -> None:
    # pkg/scheduler/schedule_one.go: finishBinding
    assert messages.assigned("Successfully assigned ml/vllm-7d9c5b8f4-ccccc to gpu-x7k2p") == \
        ("ml", "vllm-7d9c5b8f4-ccccc", "gpu-x7k2p")
    # pkg/scheduler/framework/preemption/preemption.go: 1.28+ by UID, before by namespace/name
    assert messages.preempted_by("Preempted by pod 5d0e3f9a-7b1c-4c7e-9f31-2a7f0b6c1d2e on node gpu-a") == \
        ("5d0e3f9a-7b1c-4c7e-9f31-2a7f0b6c1d2e", None, "gpu-a")
    assert messages.preempted_by("Preempted by ml/vllm-7d9c5b8f4-bbbbb on node gpu-a") == \
        (None, "vllm-7d9c5b8f4-bbbbb", "gpu-a")
    assert messages.assigned("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.") is None


RESCALES = [  # pkg/controller/podautoscaler/horizontal.go: reconcileAutoscaler's rescaleReason
    ("New size: 3; reason: pods metric DCGM_FI_DEV_GPU_UTIL above target", 3, 1),
    ("New size: 4; reason: external metric inference_queue_ahead(&LabelSelector{MatchLabels:map[string]string{"
     "inference_pool: vllm,},MatchExpressions:[]LabelSelectorRequirement{},}) above target", 4, 1),
    ("New size: 5; reason: cpu resource utilization (percentage of request) above target", 5, 1),
    ("New size: 1; reason: All metrics below target", 1, -1),
    ("New size: 2; reason: Current number of replicas below Spec.MinReplicas", 2, 1),
    ("New size: 8; reason: Current number of replicas above Spec.MaxReplicas", 8, -1),
    ("New size: 1; reason: Current number of replicas must be greater than 0", 1, 1),
]


@pytest.mark.parametrize(("message", "size", "direction"), RESCALES)
def test_the_hpa_rescale_messages(message: str, size: int, direction: int) -> None:
    said = messages.rescale(message)
    assert said is not None and said.size == size
    assert messages.rescale_direction(said.reason) == direction


def test_the_deployment_replicaset_autoscaler_and_karpenter_messages() -> None:
    # pkg/controller/deployment/sync.go: scaleReplicaSet (the old size since 1.27)
    assert messages.replica_set_scaled("Scaled up replica set vllm-7d9c5b8f4 to 3 from 1") == ("vllm-7d9c5b8f4", 3, 1)
    assert messages.replica_set_scaled("Scaled up replica set vllm-7d9c5b8f4 to 3") == ("vllm-7d9c5b8f4", 3, None)
    # pkg/controller/replicaset/replica_set.go: slowStartBatch's SuccessfulCreate
    assert messages.created_pod("Created pod: vllm-7d9c5b8f4-ccccc") == "vllm-7d9c5b8f4-ccccc"
    # cluster-autoscaler processors/status/eventing_scale_up_processor.go, ScaleUpInfo.String
    assert messages.triggered_scale_up("pod triggered scale-up: [{eks-gpu-ng-1 1->2 (max: 10)} "
                                       "{eks-gpu-ng-2 0->1 (max: 4)}]") == [
        messages.ScaleUpInfo("eks-gpu-ng-1", 1, 2, 10), messages.ScaleUpInfo("eks-gpu-ng-2", 0, 1, 4)]
    # karpenter pkg/controllers/provisioning/scheduling/events.go: NominatePodEvent
    assert messages.nominated_nodeclaim("Pod should schedule on: nodeclaim/gpu-x7k2p, node/gpu-x7k2p") == "gpu-x7k2p"
    assert messages.nominated_nodeclaim("Pod should schedule on: node/gpu-a") is None


# -- the objects ---------------------------------------------------------------------------------------------------

def test_nodeclaim_conditions_are_read_as_karpenter_writes_them() -> None:
    claim = nodeclaim_of(cr.nodeclaim("gpu-x7k2p", T0, node_name="gpu-x7k2p", launched=T0 + 8, registered=T0 + 45,
                                      initialized=T0 + 160))
    assert (claim.created, claim.launched, claim.registered, claim.initialized) == (T0, T0 + 8, T0 + 45, T0 + 160)
    waiting = nodeclaim_of(cr.nodeclaim("gpu-m4n8z", T0, node_name=None, launched=T0 + 8, registered=None,
                                        initialized=None))
    assert (waiting.node, waiting.launched, waiting.registered, waiting.initialized) == (None, T0 + 8, None, None)


def test_one_event_reads_the_same_through_either_api() -> None:
    p = cr.pod(f"{RS}-ccccc", T0, owner=RS)
    for original in (cr.core_event("Pulled", 'Container image "x" already present on machine', cr.pod_ref(p, "vllm"),
                                   T0 + 5, component="kubelet", host="gpu-a", last=T0 + 65, count=3),
                     cr.new_event("Scheduled", "Successfully assigned ml/x to gpu-a", cr.pod_ref(p), T0 + 1.25,
                                  controller="default-scheduler", action="Binding")):
        core, new = event_of(cr.as_core_v1(original)), event_of(cr.as_events_v1(original))
        assert core is not None and core == new
    folded = event_of(cr.core_event("SuccessfulRescale", "New size: 3; reason: x above target", cr.pod_ref(p), T0,
                                    component="horizontal-pod-autoscaler", last=T0 + 600, count=3))
    assert folded is not None and folded.times == (T0, T0 + 600) and folded.count == 3
    scheduled = event_of(cr.as_core_v1(cr.new_event("Scheduled", "x", cr.pod_ref(p), T0 + 1.25,
                                                    controller="default-scheduler", action="Binding")))
    assert scheduled is not None and scheduled.first == pytest.approx(T0 + 1.25)  # eventTime only, to the µs


def test_a_pod_keeps_its_first_readiness_over_a_restart_and_a_graceful_deletion() -> None:
    collector = Collector()
    ready = cr.pod(f"{RS}-ccccc", T0, owner=RS, node="gpu-a", scheduled=T0 + 2, started=T0 + 5, ready=T0 + 50)
    restarted = cr.pod(f"{RS}-ccccc", T0, owner=RS, node="gpu-a", scheduled=T0 + 2, started=T0 + 400,
                       ready=T0 + 450, restarts=1, uid=ready["metadata"]["uid"])
    assert pod_of(restarted).ready is None and pod_of(restarted).started is None  # the status kept the latest only
    for version in (ready, restarted):
        collector.add("pods", version)
    collector.add("pods", restarted, deleted=T0 + 900)
    (merged,) = collector.records().pods
    assert (merged.scheduled, merged.started, merged.ready, merged.deleted) == (T0 + 2, T0 + 5, T0 + 50, T0 + 900)


# -- a recorded scale-up: exactly its phases back ------------------------------------------------------------------

@pytest.mark.parametrize("api", ["events.k8s.io/v1", "core/v1"])
def test_a_recorded_karpenter_scale_up_gives_exactly_its_phases_back(api: str) -> None:
    records, truth = karpenter_scale_up()
    report = report_of(records, api=api)
    (up,) = report.scale_ups
    f = up.figures
    assert (f.first_decision_s, f.replicas_before, f.replicas_asked, up.state) == (100.0, 1, 3, "reached")
    assert f.time_to_capacity_s == truth.time_to_capacity_s == f.behind_demand_s
    assert f.phases_s == truth.phases_s
    assert (f.first_replica_wait_s, f.pending_pod_seconds, f.nodes_launched) == (
        truth.first_replica_wait_s, truth.pending_pod_seconds, truth.nodes_launched)
    assert set(f.unknown) == {"load_step_s", "requests_failed", "requests_queued"}
    by_pod = {r.pod: r for r in up.replicas}
    assert set(by_pod) == set(truth.replicas)
    for name, expected in truth.replicas.items():
        replica = by_pod[name]
        got = {**replica.phases(), **replica.sub_phases()}
        assert {k: got[k] for k in expected} == pytest.approx(expected, abs=1e-6), name
    b, c = by_pod[f"{RS}-bbbbb"], by_pod[f"{RS}-ccccc"]
    assert b.preemption is not None and b.preemption.placeholder and b.preemption.victim.startswith("vllm-headroom")
    assert b.new_node is False and b.image_cached and b.stuck is None
    assert (c.new_node, c.autoscaler, c.nodeclaim, c.image_cached) == (True, "karpenter", "gpu-x7k2p", False)
    assert c.unschedulable == ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are "
                               "available: 2 No preemption victims found for incoming pod.")  # FitError.Error
    assert report.autoscaler == "karpenter" and report.capacity()["placeholders_preempted"] == 1


def test_the_report_json_is_the_demos_capacity_figures_and_more() -> None:
    records, truth = karpenter_scale_up()
    doc = report_of(records).to_json()
    capacity = doc["capacity"]
    demo_keys = {"time_scale", "surges", "gpu_node_seconds", "nodes_launched", "pending_pod_seconds",
                 "placeholders_preempted", "headroom_decisions"}
    assert demo_keys <= set(capacity)
    (surge,) = capacity["surges"]
    assert {"surge", "load_step_s", "first_decision_s", "time_to_capacity_s", "replicas_before", "replicas_asked",
            "phases_s", "first_replica_wait_s", "pending_pod_seconds", "requests_failed", "requests_queued",
            "nodes_launched", "behind_demand_s", "unknown"} <= set(surge)
    assert surge["time_to_capacity_s"] == round(truth.time_to_capacity_s, 1) and surge["decided_at"] == \
        "2026-03-02T10:01:40Z"
    assert [r["pod"] for r in surge["replicas"]] == [f"{RS}-bbbbb", f"{RS}-ccccc"]
    quantiles = doc["quantiles"]["replicas"]
    assert quantiles["model"] == {"p50": 48.0, "p90": 48.0, "max": 48.0, "count": 2, "unknown": 0}
    assert quantiles["gpus"]["count"] == 1 and doc["provisioning"] == {"p90_s": 568.0, "replicas": 1}
    json.dumps(doc)  # every figure is JSON


def test_cluster_autoscaler_records_no_launch_of_its_own_and_no_gpus() -> None:
    """TriggeredScaleUp on the pod, then the Node object: launch covers registration; the device plugin leaves no
    trace in a list, so gpus and scheduling are unknown (their sum, Ready to bound, is in node), unless a watch saw
    the Node's allocatable GPUs go from 0 to 4."""
    r = Records()
    r.deployments.append(cr.deployment("vllm"))
    r.hpas.append(cr.hpa("vllm", "vllm"))
    c = cr.pod(f"{RS}-ccccc", T0 + 101, owner=RS, node="ip-10-0-1-7", scheduled=T0 + 330, started=T0 + 340,
               ready=T0 + 390)
    r.pods.append(c)
    r.nodes.append(cr.node("ip-10-0-1-7", T0 + 200, ready=T0 + 230))
    r.rescaled("vllm", 2, GPU_REASON, T0 + 100)
    r.scaled_replica_set("vllm", RS, 2, 1, T0 + 100)
    r.created_pod(RS, c, T0 + 101)
    r.triggered_scale_up(c, T0 + 134, "eks-gpu-ng-1", 1, 2)
    r.scheduled(c, "ip-10-0-1-7", T0 + 330)
    r.image_present(c, T0 + 331, node_name="ip-10-0-1-7")
    report = report_of(r, karpenter=False)
    (up,) = report.scale_ups
    (replica,) = up.replicas
    assert replica.autoscaler == "cluster-autoscaler" and report.autoscaler == "cluster-autoscaler"
    assert replica.not_applicable() == {"registration"}
    assert replica.sub_phases() == {"autoscaler": 33.0, "launch": 66.0, "node_ready": 30.0, "gpus": None,
                                    "scheduling": None, "image_pull": 0.0, "container_start": 10.0,
                                    "readiness": 50.0}
    assert replica.phases() == {"node": 229.0, "image": 10.0, "model": 50.0}
    assert up.figures.nodes_launched == 1 and up.figures.time_to_capacity_s == 290.0

    # A watch that saw the Node without GPUs, then with them (the device plugin registered), dates their arrival.
    collector = Collector()
    for resource, items in r.objects().items():
        for item in items:
            collector.add(resource, item)
    bare = copy.deepcopy(r.nodes[0])
    bare["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    bare["status"]["capacity"]["nvidia.com/gpu"] = "0"
    collector.add("nodes", bare, seen=T0 + 240)
    collector.add("nodes", r.nodes[0], seen=T0 + 318)
    (watched,) = build_report(collector.records(), Workload("ml", "vllm"), *WINDOW).scale_ups[0].replicas
    assert (watched.sub_phases()["gpus"], watched.sub_phases()["scheduling"]) == (88.0, 12.0)


def test_a_replica_whose_room_another_pod_took_is_stuck_not_slow() -> None:
    """docs/capacity.md, "Placeholder settings": b preempts a grace-0 placeholder, the scheduler binds another pod
    (not a preemptor) to that GPU first, and b stays Pending with its nomination."""
    r = Records()
    r.deployments.append(cr.deployment("vllm"))
    r.hpas.append(cr.hpa("vllm", "vllm"))
    b = cr.pod(f"{RS}-bbbbb", T0 + 101, owner=RS, nominated="gpu-a")
    other = cr.pod("batch-job-x5v2q", T0 + 90, namespace="ml", priority=100)
    victim = cr.pod(f"{cr.PLACEHOLDERS_RS}-ppppp", T0 - 50, owner=cr.PLACEHOLDERS_RS, labels=dict(cr.HEADROOM),
                    priority=-10, node="gpu-a", scheduled=T0 - 49)
    r.pods += [b, other]
    r.rescaled("vllm", 2, GPU_REASON, T0 + 100)
    r.scaled_replica_set("vllm", RS, 2, 1, T0 + 100)
    r.created_pod(RS, b, T0 + 101)
    r.preempted(victim, b, "gpu-a", T0 + 101.4)
    r.scheduled(other, "gpu-a", T0 + 101.9)
    report = report_of(r, window=(T0, T0 + 900))
    (up,) = report.scale_ups
    (replica,) = up.replicas
    assert replica.stuck is not None
    assert (replica.stuck.node, replica.stuck.until, replica.stuck.taken_by) == ("gpu-a", None, "batch-job-x5v2q")
    assert replica.preemption is not None and replica.preemption.placeholder is None  # the victim is gone
    assert up.state == "not reached" and up.figures.time_to_capacity_s is None
    assert "time_to_capacity_s" not in up.figures.unknown  # not reached is known, not unknown
    assert report.capacity()["stuck"] == 1
    r.pods.append(cr.pod(f"{cr.PLACEHOLDERS_RS}-qqqqq", T0 + 102, owner=cr.PLACEHOLDERS_RS, priority=-10))
    (replica,) = report_of(r, window=(T0, T0 + 900)).scale_ups[0].replicas
    assert replica.preemption is not None and replica.preemption.placeholder is True  # its ReplicaSet's refill is


def test_a_scale_up_whose_pods_are_gone_is_unknown_never_guessed() -> None:
    """Scaled up, then down before the report: the new pods are only in their ReplicaSet's and kubelet's events."""
    records, _ = karpenter_scale_up()
    gone = {f"{RS}-bbbbb", f"{RS}-ccccc"}
    records.pods = [p for p in records.pods if p["metadata"]["name"] not in gone]
    report = report_of(records)
    (up,) = report.scale_ups
    f = up.figures
    assert up.state == "unknown" and f.time_to_capacity_s is None
    assert {"time_to_capacity_s", "behind_demand_s", "phases_s.node", "phases_s.model"} <= set(f.unknown)
    assert all(r.events_only for r in up.replicas) and len(up.replicas) == 2
    c = next(r for r in up.replicas if r.pod.endswith("ccccc"))
    assert c.phases() == {"node": 183.0, "image": 337.0, "model": None}  # its events still say what they saw
    lines = dict(surge_lines([f.to_json()], label="scale-up"))
    assert lines["scale-up 1: time to capacity"].startswith("unknown (1 -> 3 replicas; decision unknown, node unknown")
    table = format_capacity_table([capacity_row_from("cluster ml/vllm", report.capacity(), None, None)])
    assert "| cluster ml/vllm | unknown " in table and "unknown / unknown / unknown / unknown" in table


def test_hpa_rounds_are_one_scale_up_unless_far_apart() -> None:
    """1 -> 2, then 2 -> 3 once the second replica serves: one scale-up with a decision phase between the rounds,
    as the demo charges it; with --rounds-within shorter than the gap, two."""
    r = Records()
    r.deployments.append(cr.deployment("vllm"))
    r.hpas.append(cr.hpa("vllm", "vllm"))
    first = cr.pod(f"{RS}-bbbbb", T0 + 101, owner=RS, node="gpu-a", scheduled=T0 + 102, started=T0 + 104,
                   ready=T0 + 150)
    second = cr.pod(f"{RS}-ccccc", T0 + 181, owner=RS, node="gpu-a", scheduled=T0 + 182, started=T0 + 184,
                    ready=T0 + 230)
    r.pods += [first, second]
    for size, at in ((2, 100), (3, 180)):
        r.rescaled("vllm", size, GPU_REASON, T0 + at)
        r.scaled_replica_set("vllm", RS, size, size - 1, T0 + at)
    (up,) = report_of(r).scale_ups
    assert (up.figures.replicas_before, up.figures.replicas_asked, up.figures.time_to_capacity_s) == (1, 3, 130.0)
    assert up.figures.phases_s == {"decision": 1.0 + 30.0 + 1.0, "node": 2.0, "image": 4.0, "model": 92.0}
    assert up.figures.behind_demand_s == 50.0
    apart = report_of(r, rounds_within=10.0).scale_ups
    assert [u.figures.time_to_capacity_s for u in apart] == [50.0, 50.0]


def test_what_the_records_lack_is_one_line_each() -> None:
    records, _ = karpenter_scale_up()
    quiet = report_of(records, window=(T0 + 1000, T0 + 4600))
    assert quiet.scale_ups == [] and any(n.startswith("no scale-up of ml/vllm between 2026-03-02T10:16:40Z")
                                         for n in quiet.notes)
    no_hpa = copy.deepcopy(records)
    no_hpa.hpas = []
    assert any("no HorizontalPodAutoscaler in ml targets deployment vllm" in n for n in report_of(no_hpa).notes)
    bare = copy.deepcopy(records)  # no Karpenter in the cluster, and no Cluster Autoscaler's events
    bare.nodeclaims, bare.events = [], [e for e in bare.events if e["reason"] != "Nominated"]
    ca_less = report_of(bare, karpenter=False)
    assert any(n.startswith("no Karpenter NodeClaims (karpenter.sh/v1 not served) and no Cluster Autoscaler")
               for n in ca_less.notes)
    (up,) = ca_less.scale_ups
    c = next(r for r in up.replicas if r.pod.endswith("ccccc"))
    assert c.autoscaler is None and c.sub_phases()["autoscaler"] is None and c.sub_phases()["node_ready"] == 20.0
    assert "nodes_launched" in up.figures.unknown
    assert all("\n" not in n for r in (quiet, ca_less) for n in r.notes)


# -- the journal ---------------------------------------------------------------------------------------------------

def test_a_journal_keeps_what_expired_and_every_occurrence_it_saw(tmp_path: Path) -> None:
    records, truth = karpenter_scale_up()
    path = tmp_path / "watch.jsonl"
    seen = iter(range(10_000))
    with Journal(path, clock=lambda: T0 + next(seen)) as journal:
        journal.header(namespace="ml", deployment="vllm", karpenter=True, events_api="events.k8s.io/v1")
        for resource, items in records.objects().items():
            for item in items:
                journal.record("LISTED", resource, item)
        rescale = next(e for e in records.events if e["reason"] == "SuccessfulRescale")
        again = copy.deepcopy(rescale)
        again.update(lastTimestamp=cr.seconds(T0 + 2000), count=2)  # the recorder folds a second rescale to 3
        journal.record("MODIFIED", "events", cr.as_events_v1(again))
    with path.open("a") as fh:
        fh.write('{"seen": 1, "type": "ADDED", "resou')  # a session cut mid-line
    replayed = replay(path)
    assert replayed.skipped == 1 and replayed.headers[0]["deployment"] == "vllm"
    (event,) = [e for e in replayed.collector.records().events if e.reason == "SuccessfulRescale"]
    assert event.times == (T0 + 100, T0 + 2000)
    report = build_report(replayed.collector.records(), Workload("ml", "vllm"), *WINDOW)
    assert report.scale_ups[0].figures.time_to_capacity_s == truth.time_to_capacity_s
    (path.parent / "not.jsonl").write_text("hello\n")
    with pytest.raises(JournalError, match="not a journal written by gpu-loadtest capacity --watch"):
        replay(path.parent / "not.jsonl")


# -- the outputs carry unknown values ------------------------------------------------------------------------------

def test_csv_json_and_plot_carry_unknown_values(tmp_path: Path) -> None:
    records, _ = karpenter_scale_up()
    report = report_of(records)
    paths = {"json_path": tmp_path / "r.json", "csv_path": tmp_path / "r.csv", "plot_path": tmp_path / "r.png"}
    write_report(report, **paths)
    with paths["csv_path"].open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3600 and all(rows[5][c] == "unknown" for c in LOAD_COLUMNS)
    at = {int(float(r["t"])): r for r in rows}
    assert (at[98]["desired_replicas"], at[150]["desired_replicas"], at[150]["pending_pods"]) == ("1", "3", "1")
    assert (at[150]["current_replicas"], at[700]["current_replicas"], at[700]["node_gpus"]) == ("1", "3", "8")
    with replicas_csv_path(paths["csv_path"]).open() as fh:
        replicas = {r["pod"]: r for r in csv.DictReader(fh)}
    b = replicas[f"{RS}-bbbbb"]
    assert (b["launch_s"], b["scheduling_s"], b["preempted"], b["placeholder"]) == (
        "", "7", "vllm-headroom-6b7c9d5f8-ppppp", "true")
    doc = json.loads(paths["json_path"].read_text())
    assert doc["capacity"]["surges"][0]["unknown"] == ["load_step_s", "requests_failed", "requests_queued"]
    assert paths["plot_path"].read_bytes().startswith(b"\x89PNG")
    out = io.StringIO()
    write_csv(report.rows[:2], tmp_path / "plain.csv")  # without unknown columns: empty cells, as the demo's
    assert (tmp_path / "plain.csv").read_text().splitlines()[1].split(",")[3] == ""
    del out


def test_a_replica_that_restarted_still_counts_as_ready_in_the_timeline() -> None:
    records, _ = karpenter_scale_up()
    old = records.pods[0]
    records.pods[0] = cr.pod(old["metadata"]["name"], T0 - 3600, owner=RS, node="gpu-a", scheduled=T0 - 3599,
                             started=T0 - 1200, ready=T0 - 1150, restarts=1)
    rows = report_of(records).rows
    assert (rows[50].current_replicas, rows[50].desired_replicas) == (1, 1)


def test_the_printed_report_names_every_phase_and_unknown(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from loadtest.cli.capacity import print_report

    records, _ = karpenter_scale_up()
    records.nodeclaims, records.events = [], [e for e in records.events if e["reason"] != "Nominated"]
    console = Console(file=io.StringIO(), width=300)
    print_report(console, report_of(records, karpenter=False), SimpleNamespace(json=None, csv=None, plot=None))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "| cluster ml/vllm | 569 s" in text and "scale-up 1: time to capacity" in text
    assert "autoscaler unknown, launch unknown, registration unknown, node ready 20 s, gpus unknown" in text
    assert "preempted placeholder vllm-headroom-6b7c9d5f8-ppppp on gpu-a" in text
    assert "unknown nodes launched" in text and "autoscaler none recorded" in text
    table = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in text.splitlines() if line.startswith("| ")}
    assert table["model"] == ["48 / 48 / 48 s (1)", "48 / 48 / 48 s (2)", "48 / 48 / 48 s (1)"]
    assert table["launch"] == ["-", "unknown (1)", "unknown (1)"]
    assert table["time to capacity"][0] == "569 / 569 / 569 s (1)"
    assert "headroom.auto.provisioningTime: 568s" in text


# -- the report's error per phase on a recorded scale-up with known phases (printed, for the lead's note) ----------

def test_the_reports_error_per_phase_against_sub_second_truth() -> None:
    """The records keep whole seconds (object times, conditions, core events), the scheduler's events
    microseconds and the kubelet's pull times milliseconds: with the true moments anywhere within their second, the
    report is off by at most the truncation. Prints each phase's error; checks only that it stays within 1 s."""
    errors: dict[str, list[float]] = {}
    for jitter in (0.2, 0.5, 0.9, 0.99):
        records, truth = karpenter_scale_up(jitter=jitter)
        (up,) = report_of(records).scale_ups
        f = up.figures
        errors.setdefault("time_to_capacity", []).append(f.time_to_capacity_s - truth.time_to_capacity_s)
        for phase in PHASES:
            errors.setdefault(f"scale-up {phase}", []).append(f.phases_s[phase] - truth.phases_s[phase])
        for replica in up.replicas:
            got = {**replica.phases(), **replica.sub_phases()}
            for name, value in truth.replicas[replica.pod].items():
                errors.setdefault(f"replica {name}", []).append(got[name] - value)
    print("\nthe capacity report's error per phase (report - truth, seconds; jitter 0.2, 0.5, 0.9, 0.99 s):")
    for name in ["time_to_capacity", *(f"scale-up {p}" for p in PHASES),
                 *(f"replica {p}" for p in ("node", "image", "model", *SUB_PHASES))]:
        if name in errors:
            values = errors[name]
            each = ", ".join(f"{v:+.3f}" for v in values)
            print(f"  {name:<26} max |error| {max(abs(v) for v in values):.3f}  ({each})")
    assert all(abs(v) < 1.0 for values in errors.values() for v in values)


def test_replace_keeps_the_unknown_names() -> None:
    records, _ = karpenter_scale_up()
    figures = report_of(records).scale_ups[0].figures
    assert replace(figures, surge=2).unknown == figures.unknown


def test_a_watch_that_never_ends_still_gives_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the stop, a watch stuck in a request that no event ends is left behind: the report comes from what the
    journal has, with a note, and the journal takes nothing the watch sends after it closed."""
    import threading
    import time

    from loadtest.measure.cluster.reader import Snapshot
    from loadtest.scenarios import capacity_report

    monkeypatch.setattr(capacity_report, "WATCH_SECONDS", 0.2)
    late: list[Any] = []
    release, done = threading.Event(), threading.Event()

    class StuckReader:
        def snapshot(self) -> Snapshot:
            return Snapshot(read=["pods"], versions={"pods": "1"})

        def follow(self, keys: list[str], emit: Any, stop: threading.Event, versions: dict[str, str]) -> list[str]:
            stop.wait()
            release.wait(20.0)  # a request that outlives the stop (20 s if nothing releases it), then one more event
            late.append(emit("ADDED", "pods", {"metadata": {"name": "late"}}))
            done.set()
            return []

    options = capacity_report.ReportOptions(Workload("ml", "vllm"), since_s=3600.0, until=T0 + 3600)
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    report = capacity_report.report_from_cluster(StuckReader(), options, watch=tmp_path / "w.jsonl",  # type: ignore[arg-type]
                                                 stop=stop)
    assert time.monotonic() - started < 10.0  # 2 x WATCH_SECONDS after the stop, not the stuck request's 20 s
    assert "a watch had not ended 0.4 s after the stop; the report is made from what was recorded until then" in \
        report.notes
    written = (tmp_path / "w.jsonl").read_text()
    release.set()
    assert done.wait(5.0)
    assert late == [None] and (tmp_path / "w.jsonl").read_text() == written  # nothing after the close
