"""Resource metrics (metrics.k8s.io) in the HPA model: the controller's own replica-calculator table for cpu
utilisation, readiness rules included, and a decision made from our adapter's PodMetrics answer (real adapter,
real Prometheus) with requests read from pod specs."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from loadtest.hpa import (
    Autoscaler,
    ConditionType,
    ControllerConfig,
    HPASpec,
    MetricSpec,
    Observations,
    Pod,
    PodPhase,
    ResourceSample,
    ResourceUsage,
    Tolerances,
    propose,
)
from tests.support.fake_kube import pod
from tests.test_resource_metrics_e2e import adapter, prometheus  # noqa: F401  (module fixtures: adapter, Prometheus)

pytestmark = pytest.mark.unit

UPSTREAM = "kubernetes pkg/controller/podautoscaler/replica_calculator_test.go"
# The upstream tests' settings: 2m cpu initialisation period, 10s initial readiness delay (defaultTesting*), pods
# "hot" when started now and "cool" when started 3 minutes ago (horizontal_test.go); an unset start time, Ready
# transition or sample timestamp is Go's zero time.
TESTING = ControllerConfig(cpu_initialization_period_seconds=120, initial_readiness_delay_seconds=10)
NOW = 1_700_000_000.0
ZERO = -62_135_596_800.0  # 0001-01-01T00:00:00Z
HOT, COOL = NOW, NOW - 180
T, F = True, False
R, P, X = PodPhase.RUNNING, PodPhase.PENDING, PodPhase.FAILED


@dataclass(frozen=True)
class Case:
    """One upstream resource test: pods ``test-pod-i`` with two containers, each requesting ``requests[i]`` cores
    and using ``levels[i]`` milli-cores (the metric names ``pod_names[i]`` instead when given)."""

    name: str
    current: int
    requests: tuple[str, ...]
    levels: tuple[int, ...]
    target: int
    replicas: int | None = None
    utilization: int | None = None
    value: int | None = None
    error: str | None = None
    readiness: tuple[bool, ...] = ()
    start: tuple[float, ...] = ()
    phase: tuple[PodPhase, ...] = ()
    deleting: tuple[bool, ...] = ()
    pod_names: tuple[str, ...] = ()


ONES = ("1.0",) * 7
CASES = [
    Case("TestReplicaCalcDisjointResourcesMetrics", 1, ONES[:1], (100,), 100, pod_names=("an-older-pod-name",),
         error="no metrics returned matched known pods"),
    Case("TestReplicaCalcScaleUp", 3, ONES[:3], (300, 500, 700), 30, 5, 50, 1000),
    Case("TestReplicaCalcScaleUpUnreadyLessScale", 3, ONES[:3], (300, 500, 700), 30, 4, 60, 1200, readiness=(F, T, T)),
    Case("TestReplicaCalcScaleUpHotCpuLessScale", 3, ONES[:3], (300, 500, 700), 30, 4, 60, 1200,
         start=(HOT, COOL, COOL)),
    Case("TestReplicaCalcScaleUpUnreadyNoScale", 3, ONES[:3], (400, 500, 700), 30, 3, 40, 800, readiness=(T, F, F)),
    Case("TestReplicaCalcScaleHotCpuNoScale", 3, ONES[:3], (400, 500, 700), 30, 3, 40, 800, readiness=(T, F, F),
         start=(COOL, HOT, HOT)),
    Case("TestReplicaCalcScaleUpIgnoresFailedPods", 2, ONES[:4], (500, 700), 30, 4, 60, 1200,
         readiness=(T, T, F, F), phase=(R, R, X, X)),
    Case("TestReplicaCalcScaleUpIgnoresDeletionPods", 2, ONES[:4], (500, 700), 30, 4, 60, 1200,
         readiness=(T, T, F, F), phase=(R, R, R, R), deleting=(F, F, T, T)),
    Case("TestReplicaCalcScaleDown", 5, ONES[:5], (100, 300, 500, 250, 250), 50, 3, 28, 560),
    Case("TestReplicaCalcScaleDownIncludeUnreadyPods", 5, ONES[:5], (100, 300, 500, 250, 250), 50, 2, 30, 600,
         readiness=(T, T, T, F, F)),
    Case("TestReplicaCalcScaleDownExcludeUnscheduledPods", 5, ONES[:5], (100,), 50, 1, 10, 200,
         readiness=(T, F, F, F, F), phase=(R, P, P, P, P)),
    Case("TestReplicaCalcScaleDownIgnoreHotCpuPods", 5, ONES[:5], (100, 300, 500, 250, 250), 50, 2, 30, 600,
         start=(COOL, COOL, COOL, HOT, HOT)),
    Case("TestReplicaCalcScaleDownIgnoresFailedPods", 5, ONES, (100, 300, 500, 250, 250), 50, 3, 28, 560,
         readiness=(T, T, T, T, T, F, F), phase=(R, R, R, R, R, X, X)),
    Case("TestReplicaCalcScaleDownIgnoresDeletionPods", 5, ONES, (100, 300, 500, 250, 250), 50, 3, 28, 560,
         readiness=(T, T, T, T, T, F, F), phase=(R,) * 7, deleting=(F, F, F, F, F, T, T)),
    Case("TestReplicaCalcTolerance", 3, ("0.9", "1.0", "1.1"), (1010, 1030, 1020), 100, 3, 102, 2040),
    Case("TestReplicaCalcSuperfluousMetrics", 4, ONES[:4], (4000, 9500, 3000, 7000, 3200, 2000), 100, 24, 587, 11750),
    Case("TestReplicaCalcMissingMetrics", 4, ONES[:4], (400, 95), 100, 3, 24, 495),
    Case("TestReplicaCalcEmptyMetrics", 4, ONES[:3], (), 100,
         error="unable to get metrics for resource cpu: no metrics returned from resource metrics API"),
    Case("TestReplicaCalcEmptyCPURequest", 1, (), (200,), 100, error="missing request for"),
    Case("TestReplicaCalcMissingMetricsNoChangeEq", 2, ONES[:2], (1000,), 100, 2, 100, 2000),
    Case("TestReplicaCalcMissingMetricsNoChangeGt", 2, ONES[:2], (1900,), 100, 2, 190, 3800),
    Case("TestReplicaCalcMissingMetricsNoChangeLt", 2, ONES[:2], (600,), 100, 2, 60, 1200),
    Case("TestReplicaCalcMissingMetricsUnreadyChange", 3, ONES[:3], (100, 450), 50, 3, 45, 900, readiness=(F, T, T)),
    Case("TestReplicaCalcMissingMetricsHotCpuNoChange", 3, ONES[:3], (100, 450), 50, 3, 45, 900,
         start=(HOT, COOL, COOL)),
    Case("TestReplicaCalcMissingMetricsUnreadyScaleUp", 3, ONES[:3], (100, 2000), 50, 4, 200, 4000,
         readiness=(F, T, T)),
    Case("TestReplicaCalcMissingMetricsHotCpuScaleUp", 3, ONES[:3], (100, 2000), 50, 4, 200, 4000,
         readiness=(F, T, T), start=(HOT, COOL, COOL)),
    Case("TestReplicaCalcMissingMetricsUnreadyScaleDown", 4, ONES[:4], (100, 100, 100), 50, 3, 10, 200,
         readiness=(F, T, T, T)),
    Case("TestReplicaCalcDuringRollingUpdateWithMaxSurge", 2, ONES[:3], (100, 100), 50, 2, 10, 200,
         phase=(R, R, R)),
]


def _observed(case: Case) -> tuple[Observations, ResourceUsage]:
    count = max(case.current, len(case.phase))  # failed pods are not in currentReplicas
    pods = tuple(
        Pod(f"test-pod-{i}", case.phase[i] if case.phase else R, case.readiness[i] if i < len(case.readiness) else T,
            case.deleting[i] if case.deleting else False, case.start[i] if case.start else ZERO, ZERO,
            tuple((f"container{c}", {"cpu": int(float(case.requests[i]) * 1000)} if i < len(case.requests) else {})
                  for c in range(2)))
        for i in range(count))
    names = [case.pod_names[i] if i < len(case.pod_names) else f"test-pod-{i}" for i in range(len(case.levels))]
    usage = ResourceUsage({n: ResourceSample(2 * level, ZERO, 60.0) for n, level in zip(names, case.levels,
                                                                                         strict=True)})
    return Observations(case.current, {"cpu": usage}, pods), usage


@pytest.mark.parametrize("case", CASES, ids=[f"{UPSTREAM}::{c.name}" for c in CASES])
def test_replica_calculator_table(case: Case) -> None:
    observed, usage = _observed(case)
    metric = MetricSpec.resource("cpu", average_utilization=case.target)
    proposal = propose(metric, usage, observed, Tolerances(), NOW, TESTING)
    if case.error is not None:
        assert proposal.replicas is None and case.error in (proposal.error or ""), proposal.error
        assert (proposal.error or "").startswith("failed to get cpu utilization: ")
        return
    assert (proposal.replicas, proposal.utilization, proposal.current_milli) == (
        case.replicas, case.utilization, case.value), proposal


def test_cpu_readiness_needs_a_fresh_sample_inside_the_initialisation_period() -> None:
    """groupPods (TestGroupPods' cpu cases): within the period after its start a Ready pod counts only once a
    whole sample window has passed since it became Ready; after the period, a pod that is not Ready counts if it
    had been Ready (its Ready condition changed later than the initial readiness delay after start)."""
    def one(pod: Pod, sample: ResourceSample) -> int | None:
        usage = ResourceUsage({pod.name: sample, "steady": ResourceSample(1000, NOW, 60)})
        pods = (pod, Pod("steady", start_time=NOW - 600, containers=(("c", {"cpu": 1000}),)))
        observed = Observations(2, {"cpu": usage}, pods)
        return propose(MetricSpec.resource("cpu", average_utilization=50), usage, observed, Tolerances(), NOW,
                       TESTING).replicas

    c = (("c", {"cpu": 1000}),)
    # Started 1 minute ago, Ready 30 s ago: a 30 s window ending now is fresh, so the pod counts (3000m of 2000m
    # requested: 150 % of a 50 % target -> 6); a 60 s window began before it was Ready, so it is unready and, on
    # the way up, idle (1000m of 2000m: exactly the target -> 2 stays).
    fresh = one(Pod("bentham", start_time=NOW - 60, ready_since=NOW - 30, containers=c), ResourceSample(2000, NOW, 30))
    stale = one(Pod("bentham", start_time=NOW - 60, ready_since=NOW - 30, containers=c), ResourceSample(2000, NOW, 60))
    assert (fresh, stale) == (6, 2)
    # After the period: unready 9 minutes (became unready 1 minute after a start 10 minutes ago) counts; unready
    # since 10 s after start (never Ready) does not.
    was_ready = one(Pod("lucretius", ready=False, start_time=NOW - 600, ready_since=NOW - 540, containers=c),
                    ResourceSample(2000, NOW, 60))
    never = one(Pod("lucretius", ready=False, start_time=NOW - 600, ready_since=NOW - 594, containers=c),
                ResourceSample(2000, NOW, 60))
    assert (was_ready, never) == (6, 2)


def test_memory_has_no_readiness_rules_and_average_value_targets_work() -> None:
    pods = (Pod("a", ready=False, start_time=NOW, containers=(("c", {"memory": 1000_000}),)),)
    usage = ResourceUsage({"a": ResourceSample(3000_000, ZERO)})
    observed = Observations(1, {"memory": usage}, pods)
    by_utilization = propose(MetricSpec.resource("memory", average_utilization=100), usage, observed, Tolerances(),
                             NOW, TESTING)
    assert (by_utilization.replicas, by_utilization.utilization) == (3, 300)
    by_value = propose(MetricSpec.resource("memory", average_value="1000"), usage, observed, Tolerances(), NOW,
                       TESTING)
    assert (by_value.replicas, by_value.current_milli) == (3, 3000_000)


def test_a_resource_hpa_reconciles_through_the_autoscaler() -> None:
    spec = HPASpec(max_replicas=10, metrics=(MetricSpec.resource("cpu", average_utilization=60),))
    pods = tuple(Pod(f"p{i}", start_time=NOW - 3600, containers=(("c", {"cpu": 500}),)) for i in range(2))
    usage = ResourceUsage({p.name: ResourceSample(600, NOW, 60) for p in pods})
    decision = Autoscaler(spec).reconcile(NOW, Observations(2, {"cpu": usage}, pods))
    assert decision.desired == 4 and decision.reason == "cpu resource utilization (percentage of request) above target"
    failing = Autoscaler(spec).reconcile(NOW, Observations(2, {}, pods))
    active = failing.condition(ConditionType.SCALING_ACTIVE)
    assert failing.desired == 2 and active is not None and active.reason == "FailedGetResourceMetric"


@pytest.mark.e2e
def test_decision_from_the_adapters_pod_metrics(adapter) -> None:  # noqa: F811
    body = adapter.get("/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods").json()
    usage = ResourceUsage.from_pod_metrics(body, "cpu")
    # 250m + 123456n rounds up to 1m, as MilliValue does; the window is the rule's 5m
    assert {n: (s.milli, s.window_s) for n, s in usage.by_pod.items()} == {"infer-0": (251, 300.0),
                                                                           "infer-1": (1500, 300.0)}
    pods = []
    for name, containers in (("infer-0", ("main", "sidecar")), ("infer-1", ("main",))):
        spec = pod("ml", name)
        spec["spec"]["containers"] = [{"name": c, "resources": {"requests": {"cpu": "500m"}}} for c in containers]
        spec["status"] = {"phase": "Running", "startTime": "2020-01-01T00:00:00Z",
                          "conditions": [{"type": "Ready", "status": "True",
                                          "lastTransitionTime": "2020-01-01T00:00:30Z"}]}
        pods.append(Pod.from_manifest(spec))
    assert [(p.phase, p.ready, dict(p.containers)) for p in pods] == [
        (R, True, {"main": {"cpu": 500}, "sidecar": {"cpu": 500}}), (R, True, {"main": {"cpu": 500}})]
    observed = Observations(2, {"cpu": usage}, tuple(pods))
    newest = max(s.timestamp for s in usage.by_pod.values())
    decision = propose(MetricSpec.resource("cpu", average_utilization=60), usage, observed, Tolerances(), newest)
    # 100 * 1751 / 1500 = 116 %; 116 / 60 = 1.93 -> ceil(1.93 * 2) = 4
    assert (decision.utilization, decision.replicas) == (116, 4)
    unrequested = replace(pods[0], containers=(("main", {"cpu": 500}), ("sidecar", {})))
    observed = Observations(2, {"cpu": usage}, (unrequested, pods[1]))
    broken = propose(MetricSpec.resource("cpu", average_utilization=60), usage, observed, Tolerances(), newest)
    assert broken.error == "failed to get cpu utilization: missing request for cpu in container sidecar of Pod infer-0"
