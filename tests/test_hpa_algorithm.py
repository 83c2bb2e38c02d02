"""The HPA replica algorithm against ../shared/spec/k8s-metrics-api.md §5.4-5.8 (the project's shared spec,
beside the repository; the § marks below are its sections): the formulas, tolerance, pod handling, several metrics
and their failures, bounds, behavior defaults, stabilisation windows and rate limits.

Metric values are milli-units: a Pods target of "1" is 1000, a pod reporting 1500 runs at 1.5 x target.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.hpa import (
    ABOVE_MAX,
    BELOW_MIN,
    MAX_INT32,
    MAX_INT64,
    NO_POD_METRICS,
    NO_PODS,
    Autoscaler,
    Behavior,
    Condition,
    ConditionType,
    ControllerConfig,
    Decision,
    EffectiveRules,
    ExternalValues,
    FetchError,
    HPASpec,
    Limit,
    MetricProposal,
    MetricSpec,
    MetricType,
    ObjectValue,
    Observations,
    Pod,
    PodPhase,
    PodValues,
    PolicyType,
    Reading,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
    TargetType,
    Tolerances,
    limit_without_behavior,
    milli,
    propose,
    running_pods,
)

pytestmark = pytest.mark.unit

GPU = MetricSpec.pods("gpu", average_value="1")
LOAD = MetricSpec.object("load", "Service/gateway", average_value="1")  # asks for ceil(value) replicas
DEFAULT_TOLERANCES = Tolerances()


def run(name: str, *, ready: bool = True, deleting: bool = False) -> Pod:
    return Pod(name, PodPhase.RUNNING, ready, deleting)


def pending(name: str) -> Pod:
    return Pod(name, PodPhase.PENDING)


def failed(name: str) -> Pod:
    return Pod(name, PodPhase.FAILED)


def cond(decision: Decision, kind: ConditionType) -> Condition:
    condition = decision.condition(kind)
    assert condition is not None, f"{kind} was not set"
    return condition


def gpu_proposal(
    values: dict[str, int], pods: Sequence[Pod], spec_replicas: int, tolerances: Tolerances = DEFAULT_TOLERANCES
) -> MetricProposal:
    seen = Observations(spec_replicas, {"gpu": PodValues(values)}, tuple(pods))
    return propose(GPU, seen.metrics["gpu"], seen, tolerances)


def all_at(value: int, pods: Iterable[Pod] | str) -> dict[str, int]:
    """Each pod at ``value``; a string names one pod per letter ("ab": pods a and b)."""
    return {pod if isinstance(pod, str) else pod.name: value for pod in pods}


# --- Pods metrics (§5.4) ------------------------------------------------------------------------------------------

ABCD = (run("a"), run("b"), run("c"), run("d"))
AB_RUNNING_CD_PENDING = (run("a"), run("b"), pending("c"), pending("d"))
TEN = running_pods(10)


@dataclass(frozen=True)
class PodsCase:
    id: str
    values: dict[str, int]
    pods: tuple[Pod, ...]
    spec: int
    replicas: int
    current: int


PODS_CASES = [
    PodsCase("ceil-ratio-times-ready", all_at(1500, ABCD[:3]), ABCD[:3], spec=3, replicas=5, current=1500),
    PodsCase("scale-down", all_at(400, ABCD), ABCD, spec=4, replicas=2, current=400),
    PodsCase("ratio-exactly-1.1-keeps", all_at(1100, TEN), TEN, spec=10, replicas=10, current=1100),
    PodsCase("ratio-just-above-1.1-scales-up", all_at(1101, TEN), TEN, spec=10, replicas=12, current=1101),
    PodsCase("ratio-exactly-0.9-keeps", all_at(900, TEN), TEN, spec=10, replicas=10, current=900),
    PodsCase("ratio-just-below-0.9-scales-down", all_at(899, TEN), TEN, spec=10, replicas=9, current=899),
    PodsCase(
        "deleting-and-failed-pods-ignored",
        {"a": 1000, "b": 1000, "c": 5000, "d": 5000},
        (run("a"), run("b"), run("c", deleting=True), failed("d")),
        spec=2, replicas=2, current=1000,
    ),
    PodsCase(
        "running-not-ready-counts-as-ready",
        all_at(2000, "ab"),
        (run("a", ready=False), run("b", ready=False)),
        spec=2, replicas=4, current=2000,
    ),
    # Missing pods: c and d are listed but have no value.
    PodsCase("missing-on-scale-down-count-at-target", all_at(500, "ab"), ABCD, spec=4, replicas=3, current=500),
    PodsCase(
        "missing-on-scale-up-count-as-zero-into-tolerance", all_at(1400, "abc"), ABCD, spec=4, replicas=4, current=1400
    ),
    PodsCase("missing-on-scale-up-direction-flips-keeps", all_at(1150, "ab"), ABCD, spec=4, replicas=4, current=1150),
    PodsCase("scale-down-that-would-add-pods-keeps", all_at(500, "a"), ABCD, spec=2, replicas=2, current=500),
    # Unready pods: c and d are Pending; a value reported for one is dropped.
    PodsCase(
        "unready-on-scale-up-count-as-zero-direction-flips-keeps",
        all_at(1200, "ab"), AB_RUNNING_CD_PENDING, spec=2, replicas=2, current=1200,
    ),
    PodsCase(
        "unready-on-scale-up-still-scales",
        {"a": 3000, "b": 3000, "c": 9000}, AB_RUNNING_CD_PENDING, spec=4, replicas=6, current=3000,
    ),
    PodsCase(
        "unready-on-scale-down-left-out", all_at(400, "ab"), AB_RUNNING_CD_PENDING, spec=4, replicas=1, current=400
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", PODS_CASES, ids=lambda case: case.id)
def test_pods_metric_proposal(case: PodsCase) -> None:
    proposal = gpu_proposal(case.values, case.pods, case.spec)
    assert proposal.error is None
    assert (proposal.replicas, proposal.current_milli) == (case.replicas, case.current)


def test_pods_average_is_integer_division_of_milli_values() -> None:
    """(1m + 2m) / 2 is 1m for the controller, exactly the 1m target: no change (a float mean would scale up)."""
    one_milli = MetricSpec(MetricType.PODS, "gpu", TargetType.AVERAGE_VALUE, 1)
    seen = Observations(2, {"gpu": PodValues({"a": 1, "b": 2})}, (run("a"), run("b")))
    proposal = propose(one_milli, seen.metrics["gpu"], seen, DEFAULT_TOLERANCES)
    assert (proposal.replicas, proposal.current_milli, proposal.ratio) == (2, 1, 1.0)


@pytest.mark.parametrize(
    ("values", "pods", "error"),
    [
        pytest.param({"a": 1000}, [], NO_PODS, id="no-pods-listed"),
        pytest.param({"a": 1000, "b": 1000}, [pending("a"), pending("b")], NO_POD_METRICS, id="all-pending"),
        pytest.param({"a": 1000}, [run("a", deleting=True)], NO_POD_METRICS, id="all-deleting"),
        pytest.param({}, [run("a")], "unable to get metric gpu: no metrics returned from custom metrics API",
                     id="empty-list"),
    ],
)  # fmt: skip
def test_pods_metric_errors(values: dict[str, int], pods: Sequence[Pod], error: str) -> None:
    proposal = gpu_proposal(values, pods, 2)
    assert (proposal.replicas, proposal.error) == (None, error)


# --- Object and External metrics (§5.4) -------------------------------------------------------------------------

QUEUE_VALUE = MetricSpec.object("queue", "Service/gateway", value="10")
QUEUE_AVERAGE = MetricSpec.object("queue", "Service/gateway", average_value="20")
BACKLOG_VALUE = MetricSpec.external("backlog", value="10")
BACKLOG_AVERAGE = MetricSpec.external("backlog", average_value="30")
TWO_READY_OF_FOUR = (run("a"), run("b"), run("c", ready=False), pending("d"))


@dataclass(frozen=True)
class ValueCase:
    id: str
    metric: MetricSpec
    reading: Reading
    spec: int
    replicas: int
    current: int | None
    status: int | None = None
    pods: tuple[Pod, ...] = ()


VALUE_CASES = [
    ValueCase("object-value-ready-pods-only", QUEUE_VALUE, ObjectValue(30_000), spec=3, pods=TWO_READY_OF_FOUR,
              replicas=6, current=30_000),
    ValueCase("object-value-in-tolerance", QUEUE_VALUE, ObjectValue(10_500), spec=3, pods=TWO_READY_OF_FOUR,
              replicas=3, current=10_500),
    ValueCase("object-value-spec-zero-ceil-ratio", QUEUE_VALUE, ObjectValue(25_000), spec=0, replicas=3,
              current=25_000),
    ValueCase("object-value-capped-at-maxint32",
              MetricSpec(MetricType.OBJECT, "queue", TargetType.VALUE, 1, "Service/gateway"), ObjectValue(2**62),
              spec=1, pods=running_pods(1), replicas=MAX_INT32, current=2**62),
    ValueCase("object-average-ceil-usage-over-target", QUEUE_AVERAGE, ObjectValue(100_000), spec=4, status=3,
              replicas=5, current=33_334),
    ValueCase("object-average-in-tolerance-keeps-status", QUEUE_AVERAGE, ObjectValue(62_000), spec=4, status=3,
              replicas=3, current=20_667),
    ValueCase("object-average-status-zero", QUEUE_AVERAGE, ObjectValue(50_000), spec=2, status=0, replicas=3,
              current=None),
    ValueCase("external-value-sums-items", BACKLOG_VALUE, ExternalValues((10_000, 20_000)), spec=2,
              pods=running_pods(2), replicas=6, current=30_000),
    ValueCase("external-average-sums-items", BACKLOG_AVERAGE, ExternalValues((30_000, 45_000, 15_000)), spec=1,
              replicas=3, current=90_000),
    ValueCase("external-sum-saturates-at-maxint64", MetricSpec(MetricType.EXTERNAL, "backlog", TargetType.VALUE, 1),
              ExternalValues((MAX_INT64, 5)), spec=1, pods=running_pods(1), replicas=MAX_INT32, current=MAX_INT64),
]  # fmt: skip


@pytest.mark.parametrize("case", VALUE_CASES, ids=lambda case: case.id)
def test_object_and_external_proposal(case: ValueCase) -> None:
    seen = Observations(case.spec, {case.metric.key: case.reading}, case.pods, case.status)
    proposal = propose(case.metric, case.reading, seen, DEFAULT_TOLERANCES)
    assert proposal.error is None
    assert (proposal.replicas, proposal.current_milli) == (case.replicas, case.current)


@pytest.mark.parametrize(
    ("metric", "reading", "error"),
    [
        pytest.param(QUEUE_VALUE, ObjectValue(30_000), f"unable to calculate ready pods: {NO_PODS}",
                     id="object-value-no-pods"),
        pytest.param(BACKLOG_AVERAGE, ExternalValues(()),
                     "unable to get external metric backlog: no metrics returned from external metrics API",
                     id="external-empty"),
        pytest.param(QUEUE_AVERAGE, FetchError("the server could not find the metric queue for services"),
                     "unable to get metric queue: the server could not find the metric queue for services",
                     id="fetch-error"),
        pytest.param(QUEUE_AVERAGE, None, "unable to get metric queue: no reading was observed", id="no-reading"),
    ],
)  # fmt: skip
def test_object_and_external_errors(metric: MetricSpec, reading: Reading | None, error: str) -> None:
    proposal = propose(metric, reading, Observations(3), DEFAULT_TOLERANCES)
    assert (proposal.replicas, proposal.error) == (None, error)


def test_a_reading_of_the_wrong_kind_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="needs a PodValues reading"):
        propose(GPU, ObjectValue(1000), Observations(1, pods=running_pods(1)), DEFAULT_TOLERANCES)


# --- Tolerance (§5.5) -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("behavior", "cluster", "expected"),
    [
        pytest.param(None, 0.1, Tolerances(scale_down=0.1, scale_up=0.1), id="cluster-default"),
        pytest.param(None, 0.25, Tolerances(scale_down=0.25, scale_up=0.25), id="cluster-flag"),
        pytest.param(Behavior(scale_up=ScalingRules(tolerance=0.5)), 0.1, Tolerances(scale_down=0.1, scale_up=0.5),
                     id="up-override-only"),
        pytest.param(Behavior(ScalingRules(tolerance=0.05), ScalingRules(tolerance=0.0)), 0.1,
                     Tolerances(scale_down=0.0, scale_up=0.05), id="both-overridden"),
    ],
)  # fmt: skip
def test_tolerances_per_direction(behavior: Behavior | None, cluster: float, expected: Tolerances) -> None:
    assert HPASpec(10, (GPU,), behavior=behavior).tolerances(cluster) == expected


ASYMMETRIC = Tolerances(scale_down=0.0, scale_up=0.5)


@pytest.mark.parametrize(
    ("value", "tolerances", "replicas"),
    [
        pytest.param(1400, DEFAULT_TOLERANCES, 28, id="1.4-default-scales-up"),
        pytest.param(1400, ASYMMETRIC, 20, id="1.4-within-up-0.5"),
        pytest.param(1510, ASYMMETRIC, 31, id="1.51-beyond-up-0.5"),
        pytest.param(950, DEFAULT_TOLERANCES, 20, id="0.95-default-keeps"),
        pytest.param(950, ASYMMETRIC, 19, id="0.95-beyond-down-0"),
    ],
)
def test_tolerance_applies_per_direction(value: int, tolerances: Tolerances, replicas: int) -> None:
    pods = running_pods(20)
    assert gpu_proposal(all_at(value, pods), pods, 20, tolerances).replicas == replicas


@pytest.mark.parametrize(
    ("tolerance", "desired"), [pytest.param(0.3, 10, id="0.3-keeps"), pytest.param(0.1, 13, id="0.1")]
)
def test_controller_tolerance_flag_is_the_default(tolerance: float, desired: int) -> None:
    scaler = Autoscaler(HPASpec(20, (LOAD,)), ControllerConfig(tolerance=tolerance))
    decision = scaler.reconcile(0.0, Observations(10, {"load": ObjectValue(12_500)}, running_pods(10)))
    assert (decision.desired, decision.proposals[0].ratio) == (desired, 1.25)


# --- Several metrics, failures, bounds (§5.6) ------------------------------------------------------------------------

QUEUE = MetricSpec.object("queue", "Service/gateway", average_value="10")
BACKLOG = MetricSpec.external("backlog", average_value="10")
THREE = HPASpec(max_replicas=10, metrics=(GPU, QUEUE, BACKLOG))
BOOM = FetchError("boom")
QUEUE_FAILED = "invalid metrics (1 invalid out of 3), first error is: unable to get metric queue: boom"


def three_metrics(gpu: Reading | int, queue: Reading, backlog: Reading, spec_replicas: int = 3) -> Observations:
    """Readings for THREE on ``spec_replicas`` running pods; an int ``gpu`` is every pod's value."""
    pods = running_pods(spec_replicas)
    gpu_reading = PodValues(all_at(gpu, pods)) if isinstance(gpu, int) else gpu
    return Observations(spec_replicas, {"gpu": gpu_reading, "queue": queue, "backlog": backlog}, pods)


@dataclass(frozen=True)
class SeveralCase:
    id: str
    observed: Observations
    desired: int
    reason: str
    active: str
    error: str | None


# On 3 pods: gpu 1000 proposes 3, gpu 500 proposes 2; queue 50 proposes 5; backlog 20/50/10 propose 2/5/1.
SEVERAL_CASES = [
    SeveralCase("max-of-proposals", three_metrics(1000, ObjectValue(50_000), ExternalValues((20_000,))),
                desired=5, reason="Service metric queue above target", active="ValidMetricFound", error=None),
    SeveralCase("partial-failure-may-scale-up", three_metrics(1000, BOOM, ExternalValues((50_000,))),
                desired=5, reason="external metric backlog above target", active="ValidMetricFound",
                error=QUEUE_FAILED),
    SeveralCase("partial-failure-at-current-count-proceeds", three_metrics(1000, BOOM, ExternalValues((10_000,))),
                desired=3, reason="", active="ValidMetricFound", error=QUEUE_FAILED),
    SeveralCase("partial-failure-blocks-scale-down", three_metrics(500, BOOM, ExternalValues((10_000,))),
                desired=3, reason="", active="FailedGetObjectMetric", error=QUEUE_FAILED),
    SeveralCase("all-fail", three_metrics(BOOM, BOOM, BOOM),
                desired=3, reason="", active="FailedGetPodsMetric",
                error="invalid metrics (3 invalid out of 3), first error is: unable to get metric gpu: boom"),
    SeveralCase("all-fail-names-the-first", three_metrics(PodValues({}), BOOM, BOOM, spec_replicas=5),
                desired=5, reason="", active="FailedGetPodsMetric",
                error="invalid metrics (3 invalid out of 3), first error is: "
                "unable to get metric gpu: no metrics returned from custom metrics API"),
]  # fmt: skip


@pytest.mark.parametrize("case", SEVERAL_CASES, ids=lambda case: case.id)
def test_several_metrics(case: SeveralCase) -> None:
    decision = Autoscaler(THREE).reconcile(0.0, case.observed)
    active = cond(decision, ConditionType.SCALING_ACTIVE).reason
    assert (decision.desired, decision.reason, active, decision.error) == (
        case.desired, case.reason, case.active, case.error
    )  # fmt: skip


def test_a_failed_sync_reports_the_first_error_in_the_condition() -> None:
    decision = Autoscaler(THREE).reconcile(0.0, three_metrics(BOOM, BOOM, BOOM))
    active = cond(decision, ConditionType.SCALING_ACTIVE)
    assert (active.status, active.message) == (
        False, "the HPA was unable to compute the replica count: unable to get metric gpu: boom"
    )  # fmt: skip


def test_a_refused_sync_leaves_no_recommendation() -> None:
    scaler = Autoscaler(THREE)
    scaler.reconcile(0.0, three_metrics(500, BOOM, ExternalValues((10_000,))))
    assert [r.replicas for r in scaler.recommendations] == [3]  # only the seed of the first sync


@pytest.mark.parametrize(
    ("min_replicas", "spec_replicas", "desired", "reason"),
    [pytest.param(1, 12, 10, ABOVE_MAX, id="above-max"), pytest.param(2, 1, 2, BELOW_MIN, id="below-min")],
)
def test_replicas_outside_bounds_rescale_without_reading_metrics(
    min_replicas: int, spec_replicas: int, desired: int, reason: str
) -> None:
    hpa = HPASpec(10, (GPU, QUEUE, BACKLOG), min_replicas=min_replicas)
    decision = Autoscaler(hpa).reconcile(0.0, three_metrics(BOOM, BOOM, BOOM, spec_replicas))
    assert (decision.desired, decision.reason, decision.proposals, decision.error) == (desired, reason, (), None)


def test_zero_replicas_with_min_above_zero_disables_scaling() -> None:
    decision = Autoscaler(THREE).reconcile(0.0, Observations(0, {"queue": ObjectValue(90_000)}))
    active = cond(decision, ConditionType.SCALING_ACTIVE)
    assert (decision.desired, decision.rescale, decision.proposals) == (0, False, ())
    assert (active.status, active.reason) == (False, "ScalingDisabled")


def test_zero_replicas_with_min_zero_scales_from_zero_on_an_object_value() -> None:
    """Only a target the controller itself took to 0 (ScaledToZero True) wakes; tests/test_hpa_scale_to_zero.py
    has the rest."""
    hpa = HPASpec(10, (QUEUE_VALUE,), min_replicas=0)
    decision = Autoscaler(hpa, scaled_to_zero=True).reconcile(0.0, Observations(0, {"queue": ObjectValue(25_000)}))
    assert (decision.desired, decision.reason) == (3, "Service metric queue above target")
    paused = Autoscaler(hpa).reconcile(0.0, Observations(0, {"queue": ObjectValue(25_000)}))
    assert (paused.desired, cond(paused, ConditionType.SCALING_ACTIVE).reason) == (0, "ScalingDisabled")


# --- Normalisation without behavior (§5.7) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "desired", "min_replicas", "max_replicas", "expected"),
    [
        pytest.param(1, 10, 1, 20, (4, Limit.SCALE_UP_LIMIT), id="up-limit-minimum-4"),
        pytest.param(3, 10, 1, 20, (6, Limit.SCALE_UP_LIMIT), id="up-limit-twice-current"),
        pytest.param(3, 10, 1, 5, (5, Limit.TOO_MANY_REPLICAS), id="max-below-up-limit"),
        pytest.param(3, 6, 1, 6, (6, Limit.DESIRED_WITHIN_RANGE), id="exactly-max"),
        pytest.param(3, 7, 1, 6, (6, Limit.TOO_MANY_REPLICAS), id="max-equal-to-up-limit"),
        pytest.param(3, 0, 2, 10, (2, Limit.TOO_FEW_REPLICAS), id="below-min"),
        pytest.param(0, 2, 0, 10, (2, Limit.DESIRED_WITHIN_RANGE), id="from-zero"),
    ],
)
def test_limits_without_behavior(
    current: int, desired: int, min_replicas: int, max_replicas: int, expected: tuple[int, Limit]
) -> None:
    assert limit_without_behavior(current, desired, min_replicas, max_replicas) == expected


def drive(scaler: Autoscaler, start: int, wants: Sequence[tuple[float, int]]) -> list[Decision]:
    """Apply each decision like a Deployment would; ``wants[i] = (now, n)``: the LOAD metric asks for n replicas."""
    current, decisions = start, []
    for now, want in wants:
        seen = Observations(current, {"load": ObjectValue(want * 1000)}, running_pods(current))
        decision = scaler.reconcile(now, seen)
        decisions.append(decision)
        current = decision.desired
    return decisions


def every_15s(*wants: int) -> list[tuple[float, int]]:
    return [(15.0 * i, want) for i, want in enumerate(wants)]


def test_scale_up_without_behavior_at_most_doubles_per_sync() -> None:
    decisions = drive(Autoscaler(HPASpec(50, (LOAD,))), 1, every_15s(40, 40, 40, 40, 40))
    assert [d.desired for d in decisions] == [4, 8, 16, 32, 40]
    assert [d.limited_by for d in decisions] == [Limit.SCALE_UP_LIMIT] * 4 + [Limit.DESIRED_WITHIN_RANGE]
    assert decisions[0].reason == "Service metric load above target"


@pytest.mark.parametrize(
    ("behavior", "first_drop_at"),
    [
        pytest.param(None, 330.0, id="no-behavior-window-inclusive"),
        pytest.param(Behavior(), 315.0, id="default-behavior-window-exclusive"),
        pytest.param(Behavior(scale_down=ScalingRules(stabilization_window_seconds=600)), 615.0, id="behavior-600s"),
    ],
)
def test_spike_then_drop_holds_replicas_for_the_window(behavior: Behavior | None, first_drop_at: float) -> None:
    """High load at 0 and 15 s, low from 30 s: the 15 s recommendation holds 3 replicas for a whole window."""
    decisions = drive(Autoscaler(HPASpec(10, (LOAD,), behavior=behavior)), 1, every_15s(3, 3, *[1] * 50))
    assert [d.desired for d in decisions[:2]] == [3, 3]
    held = [d for d in decisions[2:] if d.now < first_drop_at]
    assert held and all(d.desired == 3 and d.metric_desired == 1 and d.stabilized == 3 for d in held)
    assert {cond(d, ConditionType.ABLE_TO_SCALE).reason for d in held} == {"ScaleDownStabilized"}
    drop = next(d for d in decisions if d.now == first_drop_at)
    assert (drop.desired, drop.reason) == (1, "All metrics below target")


def test_a_fresh_autoscaler_counts_the_current_size_as_a_recommendation() -> None:
    """Starting on 5 idle replicas, the controller waits out the window before its first scale-down."""
    decisions = drive(Autoscaler(HPASpec(10, (LOAD,))), 5, every_15s(*[1] * 22))
    assert {d.desired for d in decisions if d.now <= 300} == {5}
    assert (decisions[-1].now, decisions[-1].desired) == (315.0, 1)


def test_a_rescale_held_up_by_an_earlier_recommendation_names_no_metric() -> None:
    """At 15 s the metric asks for the current 4, but the 8 recommended at 0 s is still in the window."""
    first, second = drive(Autoscaler(HPASpec(20, (LOAD,))), 2, [(0.0, 8), (15.0, 4)])
    assert (first.desired, first.reason) == (4, "Service metric load above target")
    assert (second.metric_desired, second.desired, second.reason) == (4, 8, "")


def test_scale_down_without_behavior_is_limited_by_min_only() -> None:
    decisions = drive(Autoscaler(HPASpec(20, (LOAD,), min_replicas=2)), 20, every_15s(*[1] * 22))
    before, last = decisions[-2:]
    assert (before.now, before.desired) == (300.0, 20)
    assert (last.now, last.desired, last.limited_by) == (315.0, 2, Limit.TOO_FEW_REPLICAS)


# --- Behavior: defaults, stabilisation, policies (§5.7) --------------------------------------------------------------

PODS_4 = ScalingPolicy(PolicyType.PODS, 4, 15)
PERCENT_100 = ScalingPolicy(PolicyType.PERCENT, 100, 15)
ONE_POD_PER_MINUTE = (ScalingPolicy(PolicyType.PODS, 1, 60),)
HALF = (ScalingPolicy(PolicyType.PERCENT, 50, 15),)
POD_OR_HALF = (ScalingPolicy(PolicyType.PODS, 1, 15), *HALF)


def up_window(seconds: int) -> ScalingRules:
    return ScalingRules(stabilization_window_seconds=seconds)


@pytest.mark.parametrize(
    ("behavior", "flag_window", "up", "down"),
    [
        pytest.param(Behavior(), 300.0,
                     EffectiveRules(0, SelectPolicy.MAX, (PODS_4, PERCENT_100)),
                     EffectiveRules(300, SelectPolicy.MAX, (PERCENT_100,)), id="all-defaults"),
        pytest.param(Behavior(scale_down=ScalingRules(select_policy=SelectPolicy.MIN)), 300.0,
                     EffectiveRules(0, SelectPolicy.MAX, (PODS_4, PERCENT_100)),
                     EffectiveRules(300, SelectPolicy.MIN, (PERCENT_100,)), id="one-field-set-others-defaulted"),
        pytest.param(Behavior(scale_up=ScalingRules(policies=ONE_POD_PER_MINUTE)), 300.0,
                     EffectiveRules(0, SelectPolicy.MAX, ONE_POD_PER_MINUTE),
                     EffectiveRules(300, SelectPolicy.MAX, (PERCENT_100,)), id="policies-replace-not-merge"),
        pytest.param(Behavior(), 120.0,
                     EffectiveRules(0, SelectPolicy.MAX, (PODS_4, PERCENT_100)),
                     EffectiveRules(120, SelectPolicy.MAX, (PERCENT_100,)), id="down-window-from-controller-flag"),
        pytest.param(Behavior(up_window(60), ScalingRules(stabilization_window_seconds=0)), 300.0,
                     EffectiveRules(60, SelectPolicy.MAX, (PODS_4, PERCENT_100)),
                     EffectiveRules(0, SelectPolicy.MAX, (PERCENT_100,)), id="explicit-windows-kept"),
    ],
)  # fmt: skip
def test_behavior_defaulting(behavior: Behavior, flag_window: float, up: EffectiveRules, down: EffectiveRules) -> None:
    assert behavior.effective(flag_window) == (up, down)


def up_rules(*, window: int | None = None, select: SelectPolicy | None = None) -> Behavior:
    return Behavior(scale_up=ScalingRules(window, select))


def down_rules(*, select: SelectPolicy | None = None, policies: tuple[ScalingPolicy, ...] | None = None) -> Behavior:
    """Scale-down rules without a stabilisation window, so that the rate limits show on their own."""
    return Behavior(scale_down=ScalingRules(0, select, policies))


@dataclass(frozen=True)
class RateCase:
    id: str
    behavior: Behavior
    start: int
    wants: list[tuple[float, int]]
    expected: list[int]
    limits: list[Limit]
    min_replicas: int = 1
    max_replicas: int = 50


UP, DOWN, WITHIN = Limit.SCALE_UP_LIMIT, Limit.SCALE_DOWN_LIMIT, Limit.DESIRED_WITHIN_RANGE
RATE_CASES = [
    RateCase("default-up-4-pods-or-100-percent-per-15s", Behavior(), 1, every_15s(40, 40, 40, 40),
             expected=[5, 10, 20, 40], limits=[UP, UP, UP, WITHIN]),
    RateCase("default-up-counts-changes-within-the-period", Behavior(), 1, [(0.0, 40), (5.0, 40), (15.0, 40)],
             expected=[5, 5, 10], limits=[UP, UP, UP]),
    RateCase("up-select-min", up_rules(select=SelectPolicy.MIN), 1, every_15s(40, 40, 40, 40),
             expected=[2, 4, 8, 12], limits=[UP] * 4),
    RateCase("up-disabled", up_rules(select=SelectPolicy.DISABLED), 1, every_15s(40, 40, 40),
             expected=[1, 1, 1], limits=[UP] * 3),
    RateCase("up-too-many", Behavior(), 3, every_15s(40), max_replicas=5,
             expected=[5], limits=[Limit.TOO_MANY_REPLICAS]),
    RateCase("down-1-pod-per-60s", down_rules(policies=ONE_POD_PER_MINUTE), 10, every_15s(2, 2, 2, 2, 2),
             expected=[9, 9, 9, 9, 8], limits=[DOWN] * 5),
    RateCase("down-50-percent-rounds-down", down_rules(policies=HALF), 10, every_15s(1, 1, 1),
             expected=[5, 2, 1], limits=[DOWN, DOWN, WITHIN]),
    RateCase("down-select-min-smallest-drop", down_rules(select=SelectPolicy.MIN, policies=POD_OR_HALF), 10,
             every_15s(1), expected=[9], limits=[DOWN]),
    RateCase("down-select-max-largest-drop", down_rules(policies=POD_OR_HALF), 10, every_15s(1),
             expected=[5], limits=[DOWN]),
    RateCase("down-disabled", down_rules(select=SelectPolicy.DISABLED), 10, every_15s(1, 1),
             expected=[10, 10], limits=[DOWN, DOWN]),
    RateCase("down-too-few", down_rules(), 4, every_15s(1), min_replicas=2,
             expected=[2], limits=[Limit.TOO_FEW_REPLICAS]),
]  # fmt: skip


@pytest.mark.parametrize("case", RATE_CASES, ids=lambda case: case.id)
def test_rate_limits_with_behavior(case: RateCase) -> None:
    hpa = HPASpec(case.max_replicas, (LOAD,), min_replicas=case.min_replicas, behavior=case.behavior)
    decisions = drive(Autoscaler(hpa), case.start, case.wants)
    assert [d.desired for d in decisions] == case.expected
    assert [d.limited_by for d in decisions] == case.limits


def test_scaling_limited_is_true_only_when_a_limit_changed_the_count() -> None:
    [limited] = drive(Autoscaler(HPASpec(50, (LOAD,), behavior=Behavior())), 1, every_15s(40))
    [within] = drive(Autoscaler(HPASpec(50, (LOAD,), behavior=Behavior())), 1, every_15s(3))
    assert (limited.desired, limited.stabilized) == (5, 40)
    limit = cond(limited, ConditionType.SCALING_LIMITED)
    assert (limit.status, limit.reason, limit.message) == (
        True, "ScaleUpLimit", "the desired count grows faster than the scale-up rate allows"
    )  # fmt: skip
    assert (within.desired, within.stabilized, within.limited_by) == (3, 3, WITHIN)
    assert cond(within, ConditionType.SCALING_LIMITED).status is False


@pytest.mark.parametrize(
    ("window", "wants", "expected"),
    [
        pytest.param(60, (8, 8, 8, 8, 8, 8), [2, 2, 2, 2, 6, 8], id="60s-sustained"),
        pytest.param(30, (8, 8, 8, 8, 8, 8), [2, 2, 6, 8, 8, 8], id="30s-sustained"),
        pytest.param(30, (8, 8, 2, 8, 8, 8), [2, 2, 2, 2, 6, 8], id="30s-a-dip-restarts-the-wait"),
    ],
)
def test_scale_up_window_waits_for_a_sustained_rise(window: int, wants: tuple[int, ...], expected: list[int]) -> None:
    decisions = drive(Autoscaler(HPASpec(50, (LOAD,), behavior=up_rules(window=window))), 2, every_15s(*wants))
    assert [d.desired for d in decisions] == expected
    assert cond(decisions[0], ConditionType.ABLE_TO_SCALE).reason == "ScaleUpStabilized"


def test_rescale_to_bounds_counts_against_the_rate_limit() -> None:
    scaler = Autoscaler(HPASpec(50, (LOAD,), min_replicas=6, behavior=Behavior()))
    first = scaler.reconcile(0.0, Observations(1, {"load": ObjectValue(40_000)}, running_pods(1)))
    second = scaler.reconcile(5.0, Observations(6, {"load": ObjectValue(40_000)}, running_pods(6)))
    assert (first.desired, first.reason) == (6, BELOW_MIN)
    assert (second.desired, second.limited_by) == (6, UP)  # this period started at 1: at most 1 + 4


# --- Inputs, validation ---------------------------------------------------------------------------------------------


def test_quantities_convert_like_milli_value() -> None:
    assert PodValues.from_quantities({"a": "1500m", "b": 2, "c": 0.0001}).milli_by_pod == {"a": 1500, "b": 2000, "c": 1}
    assert ExternalValues.from_quantities(["1k", "45.5"]).milli_items == (1_000_000, 45_500)
    assert ObjectValue.from_quantity("20").milli == milli(20) == 20_000
    assert MetricSpec.pods("gpu", average_value="60").target_milli == 60_000


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: MetricSpec(MetricType.PODS, "gpu", TargetType.VALUE, 1000), id="pods-value-target"),
        pytest.param(lambda: MetricSpec.pods("gpu", average_value="0"), id="zero-target"),
        pytest.param(lambda: MetricSpec.object("q", "gateway", value="1"), id="object-without-kind"),
        pytest.param(lambda: MetricSpec.external("q", value="1", average_value="1"), id="two-targets"),
        pytest.param(lambda: ScalingPolicy(PolicyType.PODS, 4, 1801), id="period-over-1800"),
        pytest.param(lambda: ScalingPolicy(PolicyType.PODS, 0, 15), id="zero-policy-value"),
        pytest.param(lambda: ScalingRules(policies=()), id="empty-policies"),
        pytest.param(lambda: ScalingRules(stabilization_window_seconds=3601), id="window-over-3600"),
        pytest.param(lambda: HPASpec(3, (GPU,), min_replicas=4), id="min-above-max"),
        pytest.param(lambda: HPASpec(3, ()), id="no-metrics"),
        pytest.param(lambda: HPASpec(3, (GPU, MetricSpec.pods("gpu", average_value="2"))), id="duplicate-keys"),
    ],
)
def test_invalid_specs_are_rejected(build: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        build()


def test_periods_of_1800s_are_accepted() -> None:
    assert ScalingPolicy(PolicyType.PERCENT, 10, 1800).period_seconds == 1800


def test_time_must_not_go_backwards() -> None:
    scaler = Autoscaler(HPASpec(10, (LOAD,)))
    scaler.reconcile(30.0, Observations(1, {"load": ObjectValue(1000)}))
    with pytest.raises(ValueError, match="backwards"):
        scaler.reconcile(15.0, Observations(1, {"load": ObjectValue(1000)}))


# --- Properties -----------------------------------------------------------------------------------------------------

policies = st.lists(
    st.builds(ScalingPolicy, st.sampled_from(PolicyType), st.integers(1, 200), st.integers(1, 120)),
    min_size=1,
    max_size=3,
)
rules = st.builds(
    ScalingRules,
    stabilization_window_seconds=st.none() | st.integers(0, 600),
    select_policy=st.none() | st.sampled_from(SelectPolicy),
    policies=st.none() | policies.map(tuple),
    tolerance=st.none() | st.floats(0, 0.5),
)
behaviors = st.none() | st.builds(Behavior, st.none() | rules, st.none() | rules)
# (seconds since the previous sync, LOAD value in milli, Pending pods on top of the running ones)
syncs = st.lists(st.tuples(st.floats(0, 120), st.integers(0, 200_000), st.integers(0, 4)), min_size=1, max_size=30)


def follow(scaler: Autoscaler, start: int, script: list[tuple[float, int, int]]) -> list[tuple[int, Decision]]:
    """Feed LOAD and GPU (every running pod at load/100) and apply each decision; (replicas before, decision)."""
    now, current, out = 0.0, start, []
    for delay, load, extra_pending in script:
        now += delay
        pods = running_pods(current) + tuple(pending(f"new-{i}") for i in range(extra_pending))
        values = all_at(load // 100, pods[:current])
        decision = scaler.reconcile(
            now, Observations(current, {"load": ObjectValue(load), "gpu": PodValues(values)}, pods)
        )
        out.append((current, decision))
        current = decision.desired
    return out


@settings(max_examples=300, deadline=None)
@given(
    min_replicas=st.integers(1, 5), span=st.integers(0, 30), start=st.integers(1, 60), behavior=behaviors, script=syncs
)
def test_desired_always_within_min_and_max(
    min_replicas: int, span: int, start: int, behavior: Behavior | None, script: list[tuple[float, int, int]]
) -> None:
    hpa = HPASpec(min_replicas + span, (LOAD, GPU), min_replicas=min_replicas, behavior=behavior)
    for _, decision in follow(Autoscaler(hpa), start, script):
        assert hpa.min_replicas <= decision.desired <= hpa.max_replicas


@settings(max_examples=200, deadline=None)
@given(start=st.integers(1, 30), script=syncs, tolerance=st.none() | st.floats(0, 0.5))
def test_both_directions_disabled_never_changes_the_count(
    start: int, script: list[tuple[float, int, int]], tolerance: float | None
) -> None:
    off = ScalingRules(select_policy=SelectPolicy.DISABLED, tolerance=tolerance)
    hpa = HPASpec(30, (LOAD, GPU), behavior=Behavior(off, off))
    assert [d.desired for _, d in follow(Autoscaler(hpa), start, script)] == [start] * len(script)


@settings(max_examples=200, deadline=None)
@given(start=st.integers(1, 30), script=st.lists(st.tuples(st.just(15.0), st.integers(0, 500_000), st.integers(0, 4))))
def test_one_sync_never_adds_more_than_the_default_limits(start: int, script: list[tuple[float, int, int]]) -> None:
    without = follow(Autoscaler(HPASpec(1000, (LOAD, GPU))), start, script)
    assert all(d.desired <= max(2 * before, 4) for before, d in without)
    defaulted = follow(Autoscaler(HPASpec(1000, (LOAD, GPU), behavior=Behavior())), start, script)
    assert all(d.desired <= max(before + 4, 2 * before) for before, d in defaulted)
