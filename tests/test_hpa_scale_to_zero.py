"""Scale to zero in the HPA model (``HPAScaleToZero``, beta and on by default from Kubernetes v1.37).

The first tables are upstream's own cases, each named by its test: the condition-based controller of KEP-2021
(``pkg/controller/podautoscaler/horizontal.go``, the implementation merged for v1.36 and made beta in v1.37) and the
API server's validation of ``minReplicas: 0``. The rest drive the model through 0 -> N -> 0 with and without
``spec.behavior``, where the rules read from that source decide what happens at and from 0.

Metric values are milli-units (a target of "15" is 15000).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.hpa import (
    MIN_REPLICAS_BELOW_ONE,
    SCALING_DISABLED,
    ZERO_NEEDS_OBJECT_OR_EXTERNAL,
    Autoscaler,
    Behavior,
    ConditionType,
    ControllerConfig,
    Decision,
    ExternalValues,
    FetchError,
    HPASpec,
    Limit,
    MetricSpec,
    ObjectValue,
    Observations,
    Pod,
    PodValues,
    PolicyType,
    Reading,
    Recommendation,
    ResourceSample,
    ResourceUsage,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
    limit_with_behavior,
    limit_without_behavior,
    running_pods,
)

pytestmark = pytest.mark.unit

HORIZONTAL_TEST = "kubernetes pkg/controller/podautoscaler/horizontal_test.go"
VALIDATION = "kubernetes pkg/apis/autoscaling/validation/validation.go (validateMetrics)"
STRATEGY_TEST = "kubernetes pkg/registry/autoscaling/horizontalpodautoscaler/strategy_test.go"

NOW = 1_700_000_000.0
ZERO_TIME = -62_135_596_800.0  # Go's zero time: the upstream fixtures' pods started (and became Ready) long ago

# The upstream fixtures' metrics: "qps" on Deployment/some-deployment, or external "qps".
QPS_OBJECT_15 = MetricSpec.object("qps", "Deployment/some-deployment", value="15")
QPS_OBJECT_1 = MetricSpec.object("qps", "Deployment/some-deployment", value="1")
QPS_OBJECT_20 = MetricSpec.object("qps", "Deployment/some-deployment", value="20")
QPS_EXTERNAL_14_4 = MetricSpec.external("qps", value="14400m")
CPU_50 = MetricSpec.resource("cpu", average_utilization=50)
CPU_30 = MetricSpec.resource("cpu", average_utilization=30)

# Conditions as upstream's tests list them: (type, status, reason).
GOT_SCALE = ("AbleToScale", True, "SucceededGetScale")
DISABLED = ("ScalingActive", False, "ScalingDisabled")
RESCALED = ("AbleToScale", True, "SucceededRescale")
VALID = ("ScalingActive", True, "ValidMetricFound")
WITHIN = ("ScalingLimited", False, "DesiredWithinRange")
TOO_FEW = ("ScalingLimited", True, "TooFewReplicas")
AT_ZERO = ("ScaledToZero", True, "ScaledToZero")
NOT_AT_ZERO = ("ScaledToZero", False, "NotScaledToZero")
STATUS_OK = {RESCALED, VALID, WITHIN}
PAUSED = frozenset({GOT_SCALE, DISABLED})  # a target at 0 the controller leaves alone


def cpu_pods(levels: Sequence[int]) -> tuple[tuple[Pod, ...], ResourceUsage]:
    """The fixture's pods for a cpu metric: each requests 1 core, started and Ready long ago, using ``levels[i]``."""
    pods = tuple(Pod(f"test-pod-{i}", start_time=ZERO_TIME, ready_since=ZERO_TIME,
                     containers=(("container1", {"cpu": 500}), ("container2", {"cpu": 500})))
                 for i in range(len(levels)))
    return pods, ResourceUsage({p.name: ResourceSample(level, NOW, 60) for p, level in zip(pods, levels, strict=True)})


@dataclass(frozen=True)
class SyncCase:
    """One reconcile of an upstream test: the HPA's status conditions before and after, as a set."""

    id: str
    hpa: HPASpec
    spec_replicas: int
    reading: Reading | None
    gate: bool
    desired: int
    status: frozenset[tuple[str, bool, str]]
    scaled_to_zero: bool | None = None  # the ScaledToZero condition in the HPA's status before the sync
    pods: tuple[Pod, ...] = ()
    fresh_history: bool = False  # upstream's ``recommendations: []timestampedRecommendation{}``: no first-sight seed


def status_after(case: SyncCase, decision: Decision) -> frozenset[tuple[str, bool, str]]:
    """The HPA's conditions after the sync: those it had, overwritten by those this sync set, ScaledToZero as the
    sync left it (removed when ``None``)."""
    status: dict[str, tuple[str, bool, str]] = {}
    if case.scaled_to_zero is not None:
        status["ScaledToZero"] = ("ScaledToZero", case.scaled_to_zero, "ScaledToZero" if case.scaled_to_zero
                                  else "NotScaledToZero")
    status.update({c.type.value: (c.type.value, c.status, c.reason) for c in decision.conditions})
    if decision.scaled_to_zero is None:
        status.pop("ScaledToZero", None)
    return frozenset(status.values())


Outcome = tuple[int, frozenset[tuple[str, bool, str]]]  # (desired, status)


def per_gate(id: str, on: Outcome, off: Outcome, words: tuple[str, str] = ("enabled", "disabled"),
             **fields: object) -> list[SyncCase]:
    """One upstream test run with the HPAScaleToZero gate on, then off: the same inputs, ``id`` with ``{}`` for the
    gate's word, and the outcome each way."""
    return [SyncCase(id.format(word), gate=gate, desired=desired, status=status, **fields)  # type: ignore[arg-type]
            for gate, word, (desired, status) in zip((True, False), words, (on, off), strict=True)]


def both_gates(id: str, desired: int, status: frozenset[tuple[str, bool, str]], **fields: object) -> list[SyncCase]:
    """Upstream's ``for _, fgEnabled := range []bool{true, false}`` tests whose outcome does not depend on it."""
    return per_gate(f"{id}/HPAScaleToZero={{}}", (desired, status), (desired, status), ("True", "False"), **fields)


CPU_3, CPU_3_USAGE = cpu_pods((300, 500, 700))
SYNC_CASES = [
    # TestScaleUpCMObject: a target the HPA took to 0 wakes on an Object Value metric: ceil(20/15) = 2.
    *per_gate("TestScaleUpCMObject/scale up from zero with feature gate {}",
              hpa=HPASpec(6, (QPS_OBJECT_15,), min_replicas=0), spec_replicas=0, reading=ObjectValue(20_000),
              on=(2, frozenset({NOT_AT_ZERO, RESCALED, VALID, WITHIN})), off=(0, PAUSED), scaled_to_zero=True),
    # At 0 replicas the tolerance does not apply: a ratio of exactly 1 still asks for ceil(1) = 1.
    *per_gate("TestScaleUpCMObject/scale up from zero ignores tolerance with feature gate {}",
              hpa=HPASpec(6, (QPS_OBJECT_1,), min_replicas=0), spec_replicas=0, reading=ObjectValue(1_000),
              on=(1, frozenset({NOT_AT_ZERO, RESCALED, VALID, WITHIN})), off=(0, PAUSED), scaled_to_zero=True),
    # TestScaleDownCM: a metric at 0 takes 5 pods to 0; with the gate on, the HPA records that it did.
    *per_gate("TestScaleDownCM/scale down to zero object metric with feature gate {}",
              hpa=HPASpec(6, (QPS_OBJECT_20,), min_replicas=0), spec_replicas=5, reading=ObjectValue(0),
              on=(0, frozenset(STATUS_OK | {AT_ZERO})), off=(0, frozenset(STATUS_OK)), pods=running_pods(5),
              fresh_history=True),
    *per_gate("TestScaleDownCM/scale down to zero external metric with feature gate {}",
              hpa=HPASpec(6, (QPS_EXTERNAL_14_4,), min_replicas=0), spec_replicas=5, reading=ExternalValues((0,)),
              on=(0, frozenset(STATUS_OK | {AT_ZERO})), off=(0, frozenset(STATUS_OK)), pods=running_pods(5),
              fresh_history=True),
    # Without the ScaledToZero condition, 0 replicas means paused by hand: no wake-up, whatever the metric says.
    *both_gates("TestScaleUpFromZeroWithoutCondition", hpa=HPASpec(6, (QPS_OBJECT_15,), min_replicas=0),
                spec_replicas=0, reading=ObjectValue(20_000), desired=0, status=PAUSED),
    # minReplicas raised to 2 while the HPA held the target at 0: it wakes to at least 2 (ceil(10/15) = 1 -> 2).
    *per_gate("TestScaleUpFromZeroWhenMinReplicasIncreased/HPAScaleToZero={}", words=("true", "false"),
              hpa=HPASpec(6, (MetricSpec.object("qps", "Deployment/some-deployment", value="15000m"),),
                          min_replicas=2),
              spec_replicas=0, reading=ObjectValue(10_000), on=(2, frozenset({NOT_AT_ZERO, RESCALED, VALID, TOO_FEW})),
              off=(0, PAUSED), scaled_to_zero=True),
    *both_gates("TestManualScaleToZeroDisablesHPA", hpa=HPASpec(6, (CPU_50,)), spec_replicas=0,
                reading=ResourceUsage({}), desired=0, status=PAUSED),
    # Any rescale rewrites the condition: False with the gate on, removed with it off. cpu 50 % of request against 30.
    *per_gate("TestScaledToZeroConditionHandledOnNormalRescale/HPAScaleToZero={}", words=("true", "false"),
              hpa=HPASpec(6, (CPU_30,)), spec_replicas=3, reading=CPU_3_USAGE,
              on=(5, frozenset(STATUS_OK | {NOT_AT_ZERO})), off=(5, frozenset(STATUS_OK)), scaled_to_zero=True,
              pods=CPU_3),
]  # fmt: skip
# Not in the table: TestScaleUpFromZeroOneMetricInvalid and TestReplicaLimits' "scale down to zero when min replicas
# is zero" give the controller minReplicas 0 with only a cpu metric, a spec the API server rejects before any
# controller sees it (HPASpec refuses it too; see test_min_replicas_zero_needs_an_object_or_external_metric).


@pytest.mark.parametrize("case", SYNC_CASES, ids=lambda case: case.id)
def test_upstream_controller_cases(case: SyncCase) -> None:
    scaler = Autoscaler(case.hpa, ControllerConfig(scale_to_zero=case.gate), scaled_to_zero=case.scaled_to_zero,
                        recommendations=() if case.fresh_history else None)
    decision = scaler.reconcile(NOW, Observations(case.spec_replicas, {case.hpa.metrics[0].key: case.reading}
                                                  if case.reading is not None else {}, case.pods))
    assert decision.desired == case.desired, f"{HORIZONTAL_TEST} {case.id}"
    assert status_after(case, decision) == case.status, f"{HORIZONTAL_TEST} {case.id}"
    assert scaler.scaled_to_zero == decision.scaled_to_zero


def test_scaling_disabled_reads_like_the_controller() -> None:
    decision = Autoscaler(HPASpec(6, (QPS_OBJECT_15,), min_replicas=0)).reconcile(
        NOW, Observations(0, {"qps": ObjectValue(20_000)}))
    disabled = decision.condition(ConditionType.SCALING_ACTIVE)
    assert disabled is not None and disabled.message == SCALING_DISABLED
    assert decision.proposals == ()  # no metric is read for a paused target


@pytest.mark.parametrize(
    ("upstream", "limit", "expected"),
    [
        pytest.param("TestConvertDesiredReplicasWithRules/prenormalized desired zeroed replicas within range",
                     lambda: limit_without_behavior(1, 0, 0, 10), (0, Limit.DESIRED_WITHIN_RANGE),
                     id="no-behavior-1-to-0"),
        pytest.param("TestScalingWithRules/prenormalized desired replicas within range when minReplicas is 0",
                     lambda: limit_with_behavior(1, 0, 0, 10, *Behavior().effective(300), (), NOW),
                     (0, Limit.DESIRED_WITHIN_RANGE), id="default-behavior-1-to-0"),
    ],
)  # fmt: skip
def test_upstream_normalisation_to_zero(upstream: str, limit: Callable[[], tuple[int, Limit]],
                                        expected: tuple[int, Limit]) -> None:
    assert limit() == expected, f"{HORIZONTAL_TEST} {upstream}"


# --- Validation: kube-apiserver ---------------------------------------------------------------------------------------

GPU = MetricSpec.pods("gpu", average_value="60")
QUEUE = MetricSpec.external("queue", average_value="10", selector="inference_pool=vllm")


@pytest.mark.parametrize(
    "metrics",
    [pytest.param((GPU,), id="pods-only"), pytest.param((CPU_50,), id="cpu-only"),
     pytest.param((GPU, CPU_50), id="pods-and-cpu")],
)
def test_min_replicas_zero_needs_an_object_or_external_metric(metrics: tuple[MetricSpec, ...]) -> None:
    """validateMetrics: ``spec.metrics`` is Forbidden, whatever the gate says (a spec error, not a gate error)."""
    with pytest.raises(ValueError) as raised:
        HPASpec(4, metrics, min_replicas=0)
    assert str(raised.value).startswith(ZERO_NEEDS_OBJECT_OR_EXTERNAL), VALIDATION


@pytest.mark.parametrize(
    "metrics",
    [pytest.param((QPS_OBJECT_15,), id="object"), pytest.param((QUEUE,), id="external"),
     pytest.param((GPU, QUEUE), id="pods-and-external"), pytest.param((CPU_50, QPS_OBJECT_15), id="cpu-and-object")],
)
def test_one_object_or_external_metric_allows_zero(metrics: tuple[MetricSpec, ...]) -> None:
    assert HPASpec(4, metrics, min_replicas=0).has_object_or_external


@pytest.mark.parametrize(
    ("upstream", "gate", "old_min", "new_min", "error"),
    [
        ("TestValidateOptionsScaleToZeroEnabled", True, None, 0, None),
        ("TestValidateOptionsScaleToZeroEnabled", True, 1, 0, None),
        ("TestValidateOptionsScaleToZeroDisabled: an HPA that had 0 may keep it", False, 0, 0, None),
        ("TestValidateOptionsScaleToZeroDisabled: one that had 1 may not lower it to 0", False, 1, 0,
         MIN_REPLICAS_BELOW_ONE),
        ("create with the gate off", False, None, 0, MIN_REPLICAS_BELOW_ONE),
        ("minReplicas 1 is always allowed", False, None, 1, None),
    ],
)  # fmt: skip
def test_the_api_servers_gate_on_min_replicas(upstream: str, gate: bool, old_min: int | None, new_min: int,
                                              error: str | None) -> None:
    """``validationOptionsForHorizontalPodAutoscaler``: the lower bound of minReplicas is 0 with the gate on or when
    the stored HPA already has 0, else 1 (``must be greater than or equal to 1``)."""
    old = None if old_min is None else HPASpec(4, (QUEUE,), min_replicas=old_min)
    spec = HPASpec(4, (QUEUE,), min_replicas=new_min)
    if error is None:
        spec.validate(scale_to_zero_gate=gate, old=old)
        return
    with pytest.raises(ValueError) as raised:
        spec.validate(scale_to_zero_gate=gate, old=old)
    assert str(raised.value).startswith(error), f"{STRATEGY_TEST} {upstream}"


# --- 0 -> N -> 0 ------------------------------------------------------------------------------------------------------

QUEUE_PER_POD = MetricSpec.external("queue", average_value="10")  # one replica per 10 requests waiting at the gateway


@dataclass(frozen=True)
class Step:
    """What a sync saw and decided: (time, replicas before, queue, replicas after, ScaledToZero after)."""

    now: float
    current: int
    queue: int
    desired: int
    scaled_to_zero: bool | None


def drive(scaler: Autoscaler, start: int, queue: Sequence[tuple[float, int]]) -> tuple[list[Step], list[Decision]]:
    """Apply each decision like a Deployment would (pods Running and Ready at once); ``queue[i] = (now, waiting)``."""
    current, steps, decisions = start, [], []
    for now, waiting in queue:
        seen = Observations(current, {"queue": ExternalValues((waiting * 1000,))}, running_pods(current))
        decision = scaler.reconcile(now, seen)
        steps.append(Step(now, current, waiting, decision.desired, decision.scaled_to_zero))
        decisions.append(decision)
        current = decision.desired
    return steps, decisions


def every_15s(*queue: int, start: float = 0.0) -> list[tuple[float, int]]:
    return [(start + 15.0 * i, q) for i, q in enumerate(queue)]


def test_zero_to_n_to_zero_without_behavior() -> None:
    """Idle 2 replicas go to 0 once the downscale window forgets them; 55 waiting wake the target, at most
    ``max(2 x 0, 4)`` = 4 at once, then 6; idle again, back to 0 a window later."""
    scaler = Autoscaler(HPASpec(8, (QUEUE_PER_POD,), min_replicas=0),
                        ControllerConfig(downscale_stabilization_seconds=30))
    steps, decisions = drive(scaler, 2, every_15s(0, 0, 0, 0, 55, 55, 55, 0, 0, 0, 0))
    assert [(s.current, s.desired, s.scaled_to_zero) for s in steps] == [
        (2, 2, None), (2, 2, None), (2, 2, None),  # the first-sight recommendation of 2 is held for 30 s
        (2, 0, True),                               # scaled to zero: the condition records it
        (0, 4, False),                              # woken: ceil(55 / 10) = 6, limited to 4 from 0
        (4, 6, False), (6, 6, False),
        (6, 6, False), (6, 6, False),               # idle, held by the recommendations of 6
        (6, 0, True), (0, 0, True),                 # back to 0; idle at 0 stays 0 (still ScaledToZero)
    ]  # fmt: skip
    wake = decisions[4]
    assert (wake.metric_desired, wake.limited_by, wake.reason) == (6, Limit.SCALE_UP_LIMIT,
                                                                   "external metric queue above target")
    assert decisions[3].reason == "All metrics below target"
    at_zero = decisions[3].condition(ConditionType.SCALED_TO_ZERO)
    assert at_zero is not None and (at_zero.status, at_zero.reason, at_zero.message) == (
        True, "ScaledToZero", "the HPA controller scaled the workload to zero")


def test_default_behavior_wakes_by_the_pods_policy() -> None:
    """Default scale-up policies from 0: Pods 4 -> 4, Percent 100 of 0 -> 0; Max picks 4."""
    scaler = Autoscaler(HPASpec(20, (QUEUE_PER_POD,), min_replicas=0, behavior=Behavior()), scaled_to_zero=True)
    steps, decisions = drive(scaler, 0, every_15s(200, 200, 200, 200))
    assert [s.desired for s in steps] == [4, 8, 16, 20]
    assert decisions[0].limited_by is Limit.SCALE_UP_LIMIT


PERCENT_ONLY_UP = ScalingRules(policies=(ScalingPolicy(PolicyType.PERCENT, 100, 60),))
DOWN_AT_ONCE = ScalingRules(stabilization_window_seconds=0)


def test_a_percent_only_scale_up_policy_cannot_wake_a_target_from_zero() -> None:
    """Percent policies start from the replicas at the period's start: 100 % of 0 is 0, so the target stays at 0
    (ScalingLimited ScaleUpLimit) unless it was scaled down within the period, when that period starts higher."""
    hpa = HPASpec(8, (QUEUE_PER_POD,), min_replicas=0, behavior=Behavior(PERCENT_ONLY_UP, DOWN_AT_ONCE))
    scaler = Autoscaler(hpa)
    steps, decisions = drive(scaler, 2, [(0.0, 0), (15.0, 30), (30.0, 0), (120.0, 30), (135.0, 30)])
    assert [(s.current, s.desired) for s in steps] == [
        (2, 0),  # down at once (window 0, Percent 100 down)
        (0, 3),  # 15 s later the period started at 2: ceil(2 x 2) = 4 allows 3
        (3, 0),
        (0, 0), (0, 0),  # 90 s later nothing happened within the last 60 s: 100 % of 0
    ]
    stuck = decisions[3]
    assert (stuck.metric_desired, stuck.limited_by, stuck.rescale) == (3, Limit.SCALE_UP_LIMIT, False)
    assert scaler.scaled_to_zero is True  # still the HPA's zero: a Pods policy would wake it


def test_select_policy_min_from_zero_takes_the_percent_policy() -> None:
    """Default policies with selectPolicy Min: min(0 + 4, 100 % of 0) = 0."""
    hpa = HPASpec(8, (QUEUE_PER_POD,), min_replicas=0, behavior=Behavior(ScalingRules(select_policy=SelectPolicy.MIN)))
    steps, _ = drive(Autoscaler(hpa, scaled_to_zero=True), 0, every_15s(50, 50))
    assert [s.desired for s in steps] == [0, 0]


def test_a_scale_up_window_holds_zero_until_the_demand_lasts() -> None:
    """scaleUp.stabilizationWindowSeconds 30: a 0 recommended less than 30 s ago keeps the target at 0 (at 45 s the
    0 of 15 s is exactly 30 s old and no longer counts)."""
    hpa = HPASpec(8, (QUEUE_PER_POD,), min_replicas=0,
                  behavior=Behavior(ScalingRules(stabilization_window_seconds=30), DOWN_AT_ONCE))
    scaler = Autoscaler(hpa, scaled_to_zero=True, recommendations=(Recommendation(0, 0.0),))
    steps, decisions = drive(scaler, 0, every_15s(0, 30, 30, 30, start=15.0))
    assert [(s.now, s.desired) for s in steps] == [(15.0, 0), (30.0, 0), (45.0, 3), (60.0, 3)]
    held = decisions[1]
    able = held.condition(ConditionType.ABLE_TO_SCALE)
    assert (held.metric_desired, held.stabilized) == (3, 0)
    assert able is not None and able.reason == "ScaleUpStabilized"


@pytest.mark.parametrize(
    ("behavior", "queue", "limit"),
    [
        pytest.param(Behavior(), 0, Limit.DESIRED_WITHIN_RANGE, id="metric-asks-for-0"),
        pytest.param(Behavior(PERCENT_ONLY_UP), 50, Limit.SCALE_UP_LIMIT, id="percent-policy-allows-0"),
    ],
)
def test_min_replicas_raised_at_zero_wakes_to_min_whatever_the_behavior_allows(
    behavior: Behavior, queue: int, limit: Limit
) -> None:
    """minReplicas raised to 2 while the HPA held the target at 0: after normalisation (which, with behavior, may
    leave 0) the controller takes at least minReplicas; ScalingLimited still tells what normalisation did."""
    scaler = Autoscaler(HPASpec(8, (QUEUE_PER_POD,), min_replicas=2, behavior=behavior), scaled_to_zero=True)
    steps, decisions = drive(scaler, 0, [(NOW, queue)])
    assert [(s.desired, s.scaled_to_zero) for s in steps] == [(2, False)]
    assert decisions[0].limited_by is limit
    if queue == 0:
        assert decisions[0].reason == "Current number of replicas below Spec.MinReplicas"


def test_a_pods_scale_down_policy_steps_down_to_zero() -> None:
    """One pod per 15 s: 3 -> 2 -> 1 -> 0, and only the last step records ScaledToZero True."""
    one_pod = ScalingRules(stabilization_window_seconds=0, policies=(ScalingPolicy(PolicyType.PODS, 1, 15),))
    scaler = Autoscaler(HPASpec(8, (QUEUE_PER_POD,), min_replicas=0, behavior=Behavior(scale_down=one_pod)))
    steps, decisions = drive(scaler, 3, every_15s(0, 0, 0, 0))
    assert [(s.desired, s.scaled_to_zero) for s in steps] == [(2, False), (1, False), (0, True), (0, True)]
    assert [d.limited_by for d in decisions[:2]] == [Limit.SCALE_DOWN_LIMIT] * 2


def test_a_pods_metric_fails_at_zero_and_the_external_metric_still_wakes_the_target() -> None:
    """At 0 replicas a Pods metric has no pods (an invalid metric); an invalid metric blocks a scale-down, never a
    scale-up, so the External metric decides. When that fails too, the target stays at 0 and stays the HPA's."""
    hpa = HPASpec(8, (MetricSpec.pods("gpu", average_value="60"), QUEUE_PER_POD), min_replicas=0)
    scaler = Autoscaler(hpa, scaled_to_zero=True)
    woken = scaler.reconcile(NOW, Observations(0, {"gpu": PodValues({}), "queue": ExternalValues((25_000,))}))
    assert (woken.desired, woken.reason) == (3, "external metric queue above target")
    assert woken.error == ("invalid metrics (1 invalid out of 2), first error is: unable to get metric gpu: "
                           "no metrics returned from custom metrics API")

    failing = Autoscaler(hpa, scaled_to_zero=True).reconcile(
        NOW, Observations(0, {"gpu": FetchError("boom"), "queue": FetchError("the adapter is down")}))
    active = failing.condition(ConditionType.SCALING_ACTIVE)
    assert (failing.desired, failing.scaled_to_zero) == (0, True)
    assert active is not None and (active.status, active.reason) == (False, "FailedGetPodsMetric")


def test_all_metrics_at_zero_name_the_last_one() -> None:
    """computeReplicasForMetrics keeps replacing the named metric while the maximum is 0."""
    hpa = HPASpec(8, (QPS_OBJECT_15, QUEUE_PER_POD), min_replicas=0)
    decision = Autoscaler(hpa, recommendations=()).reconcile(
        NOW, Observations(2, {"qps": ObjectValue(0), "queue": ExternalValues((0,))}, running_pods(2)))
    active = decision.condition(ConditionType.SCALING_ACTIVE)
    assert decision.desired == 0
    assert active is not None and active.message.endswith("from external metric queue")


def test_a_target_set_to_zero_by_hand_stays_paused_until_it_is_scaled_up_by_hand() -> None:
    """The HPA never took it to 0, so no ScaledToZero: paused. Once someone scales it to 1 the HPA resumes; when it
    takes the target to 0 itself, demand wakes it again."""
    scaler = Autoscaler(HPASpec(8, (QUEUE_PER_POD,), min_replicas=0, behavior=Behavior(scale_down=DOWN_AT_ONCE)))
    paused, _ = drive(scaler, 0, every_15s(90, 90))
    assert [(s.desired, s.scaled_to_zero) for s in paused] == [(0, None), (0, None)]
    resumed, _ = drive(scaler, 1, every_15s(0, 90, start=30.0))  # someone ran kubectl scale --replicas=1
    assert [(s.current, s.desired, s.scaled_to_zero) for s in resumed] == [(1, 0, True), (0, 4, False)]


def test_with_the_gate_off_the_controller_goes_to_zero_but_never_back() -> None:
    """An HPA stored with minReplicas 0 on a controller whose HPAScaleToZero gate is off: it still scales to 0 (the
    controller does not check the gate there) but records nothing, so 0 is a pause it cannot leave."""
    scaler = Autoscaler(HPASpec(8, (QUEUE_PER_POD,), min_replicas=0, behavior=Behavior(scale_down=DOWN_AT_ONCE)),
                        ControllerConfig(scale_to_zero=False), scaled_to_zero=True)
    steps, _ = drive(scaler, 2, every_15s(0, 90, 90))
    assert [(s.desired, s.scaled_to_zero) for s in steps] == [(0, None), (0, None), (0, None)]


def test_a_restarted_controller_wakes_a_target_from_the_hpa_status() -> None:
    """The condition lives in the HPA object: a controller started now (empty memory) reads it and wakes the target;
    the first-sight recommendation of 0 does not hold a scale-up back."""
    scaler = Autoscaler(HPASpec(8, (QUEUE_PER_POD,), min_replicas=0), scaled_to_zero=True)
    steps, _ = drive(scaler, 0, [(NOW, 20)])
    assert [(s.desired, s.scaled_to_zero) for s in steps] == [(2, False)]


def test_an_average_value_target_judges_against_status_replicas_while_pods_terminate() -> None:
    """GetExternalPerPodMetricReplicas uses status.replicas: right after a scale to 0 two pods may still be counted;
    20 waiting against 10 per pod on 2 is within tolerance, so the metric asks for the 2 of status."""
    hpa = HPASpec(8, (QUEUE_PER_POD,), min_replicas=0)
    seen = Observations(0, {"queue": ExternalValues((20_000,))}, running_pods(2), status_replicas=2)
    decision = Autoscaler(hpa, scaled_to_zero=True).reconcile(NOW, seen)
    assert (decision.metric_desired, decision.desired) == (2, 2)


# --- Properties ---------------------------------------------------------------------------------------------------

windows = st.none() | st.integers(0, 120)
policies = st.lists(st.builds(ScalingPolicy, st.sampled_from(PolicyType), st.integers(1, 200), st.integers(1, 120)),
                    min_size=1, max_size=2).map(tuple)
rules = st.none() | st.builds(ScalingRules, windows, st.none() | st.sampled_from(SelectPolicy), st.none() | policies)
behaviors = st.none() | st.builds(Behavior, rules, rules)
script = st.lists(st.tuples(st.floats(1, 90), st.integers(0, 300), st.booleans()), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(max_replicas=st.integers(1, 30), behavior=behaviors, gate=st.booleans(), start=st.integers(0, 30),
       condition=st.none() | st.booleans(), syncs=script)
def test_zero_invariants(max_replicas: int, behavior: Behavior | None, gate: bool, start: int,
                         condition: bool | None, syncs: list[tuple[float, int, bool]]) -> None:
    """Whatever the behavior and the load: the count stays in [0, max]; a target at 0 moves only while the HPA holds
    ScaledToZero True with the gate on; a move to 0 records True (gate on) and nothing (gate off); the
    condition never exists with the gate off after a rescale."""
    scaler = Autoscaler(HPASpec(max_replicas, (QUEUE_PER_POD,), min_replicas=0, behavior=behavior),
                        ControllerConfig(scale_to_zero=gate), scaled_to_zero=condition)
    now, current = 0.0, min(start, max_replicas)
    for delay, waiting, fails in syncs:
        now += delay
        before = scaler.scaled_to_zero
        reading: Reading = FetchError("down") if fails else ExternalValues((waiting * 1000,))
        decision = scaler.reconcile(now, Observations(current, {"queue": reading}, running_pods(current)))
        assert 0 <= decision.desired <= max_replicas
        if current == 0 and not (gate and before is True):
            assert not decision.rescale
        if decision.rescale and decision.desired == 0:
            assert decision.scaled_to_zero is (True if gate else None)
        if decision.rescale and not gate:
            assert decision.scaled_to_zero is None
        current = decision.desired


def test_the_package_docstring_example() -> None:
    hpa = HPASpec(max_replicas=8, min_replicas=0, metrics=(MetricSpec.external("queue", average_value="10"),))
    scaler = Autoscaler(hpa, ControllerConfig(downscale_stabilization_seconds=0))
    idle = Observations(2, {"queue": ExternalValues((0,))}, running_pods(2))
    assert scaler.reconcile(0.0, idle).desired == 2
    assert (scaler.reconcile(15.0, idle).desired, scaler.scaled_to_zero) == (0, True)
    assert scaler.reconcile(30.0, Observations(0, {"queue": ExternalValues((35_000,))})).desired == 4
