"""One HPA's controller loop body: read metrics, propose, stabilise, rate-limit, and say why.

The :class:`Autoscaler` keeps what the real controller keeps in memory between syncs (the raw recommendations
and the scale events, each with a timestamp). It never reads a clock: every call is given ``now`` in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from loadtest.hpa.normalize import (
    Limit,
    Recommendation,
    ScaleEvent,
    limit_with_behavior,
    limit_without_behavior,
    stabilize_with_behavior,
    stabilize_without_behavior,
)
from loadtest.hpa.observe import Observations
from loadtest.hpa.replicas import MetricProposal, combine, propose
from loadtest.hpa.spec import (
    MAX_POLICY_PERIOD_SECONDS,
    MAX_STABILIZATION_WINDOW_SECONDS,
    ControllerConfig,
    HPASpec,
    MetricType,
)

__all__ = ["ABOVE_MAX", "BELOW_MIN", "Autoscaler", "Condition", "ConditionType", "Decision"]

ABOVE_MAX = "Current number of replicas above Spec.MaxReplicas"
BELOW_MIN = "Current number of replicas below Spec.MinReplicas"
BELOW_TARGET = "All metrics below target"
GOT_SCALE = "the HPA controller was able to get the target's current scale"
SCALING_DISABLED = "scaling is disabled since the replica count of the target is zero"

_FAILED_REASON = {
    MetricType.PODS: "FailedGetPodsMetric",
    MetricType.OBJECT: "FailedGetObjectMetric",
    MetricType.EXTERNAL: "FailedGetExternalMetric",
    MetricType.RESOURCE: "FailedGetResourceMetric",
}
_LIMIT_MESSAGE = {
    Limit.DESIRED_WITHIN_RANGE: "the desired count is within the allowed range",
    Limit.TOO_MANY_REPLICAS: "the desired count is above maxReplicas",
    Limit.TOO_FEW_REPLICAS: "the desired count is below minReplicas",
    Limit.SCALE_UP_LIMIT: "the desired count grows faster than the scale-up rate allows",
    Limit.SCALE_DOWN_LIMIT: "the desired count shrinks faster than the scale-down rate allows",
}
_SCALED_TO_ZERO = {
    True: ("ScaledToZero", "the HPA controller scaled the workload to zero"),
    False: ("NotScaledToZero", "the HPA controller did not scale the workload to zero"),
}


class ConditionType(StrEnum):
    ABLE_TO_SCALE = "AbleToScale"
    SCALING_ACTIVE = "ScalingActive"
    SCALING_LIMITED = "ScalingLimited"
    SCALED_TO_ZERO = "ScaledToZero"


@dataclass(frozen=True)
class Condition:
    """An HPA status condition as this sync would set it."""

    type: ConditionType
    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    """The outcome of one sync.

    ``current`` is ``scale.spec.replicas`` as observed, ``desired`` what the controller sets (equal when it does not
    rescale). Along the metrics path: ``metric_desired`` is the metrics' joint proposal, ``stabilized`` the count
    after the stabilisation window(s), ``limited_by`` what bounded the final count. ``reason`` is the rescale
    event's reason (empty without a rescale). ``error`` lists invalid metrics, also when scaling went ahead.
    ``scaled_to_zero`` is the HPA's ``ScaledToZero`` condition after this sync (``None``: absent).
    """

    now: float
    current: int
    desired: int
    reason: str = ""
    proposals: tuple[MetricProposal, ...] = ()
    metric_desired: int | None = None
    stabilized: int | None = None
    limited_by: Limit | None = None
    conditions: tuple[Condition, ...] = ()
    error: str | None = None
    scaled_to_zero: bool | None = None

    @property
    def rescale(self) -> bool:
        return self.desired != self.current

    def condition(self, kind: ConditionType) -> Condition | None:
        """The condition of that type this sync set, if any (the others keep their previous state)."""
        return next((c for c in self.conditions if c.type is kind), None)


class Autoscaler:
    """The HPA controller for one HPA. Call :meth:`reconcile` once per sync period with fresh observations.

    A rescale is assumed to happen as decided (the caller applies ``desired``, or the real controller does while
    this one predicts it): its scale event feeds the rate limits of later syncs. ``spec`` may be replaced between
    calls, like an edited HPA.

    ``scaled_to_zero`` is the HPA's ``ScaledToZero`` status condition (``None``: absent), which the controller keeps
    in the HPA object, not in memory: pass what the HPA shows when modelling one that already exists. A target at 0
    replicas wakes only when that condition is True, that is when this controller scaled it there; a target scaled
    to 0 by hand stays paused. ``recommendations`` replaces the in-memory history the controller starts with
    (default: the replica count it first sees, recorded at the first sync).
    """

    def __init__(self, spec: HPASpec, config: ControllerConfig | None = None, *, scaled_to_zero: bool | None = None,
                 recommendations: Sequence[Recommendation] | None = None) -> None:
        self.spec = spec
        self.config = config or ControllerConfig()
        self._scaled_to_zero = scaled_to_zero
        self._seed = recommendations is None
        self._recommendations: list[Recommendation] = list(recommendations or ())
        self._events: list[ScaleEvent] = []
        self._last_now: float | None = None

    @property
    def recommendations(self) -> tuple[Recommendation, ...]:
        return tuple(self._recommendations)

    @property
    def scale_events(self) -> tuple[ScaleEvent, ...]:
        return tuple(self._events)

    @property
    def scaled_to_zero(self) -> bool | None:
        """The HPA's ``ScaledToZero`` condition as the last sync left it (``None``: no such condition)."""
        return self._scaled_to_zero

    def reconcile(self, now: float, observed: Observations) -> Decision:
        """Decide the replica count at time ``now`` (seconds; must not go backwards between calls)."""
        if self._last_now is not None and now < self._last_now:
            raise ValueError(f"now went backwards: {now} after {self._last_now}")
        if self._last_now is None and self._seed:
            # The controller seeds the history with the count it first sees, so a restart does not scale down at once.
            self._recommendations.append(Recommendation(observed.spec_replicas, now))
        self._last_now = now
        decision = self._decide(now, observed)
        if decision.rescale and self.spec.behavior is not None:
            self._events.append(ScaleEvent(decision.desired - decision.current, now))
        self._scaled_to_zero = decision.scaled_to_zero
        self._forget(now)
        return decision

    def _decide(self, now: float, observed: Observations) -> Decision:
        spec, current, gate = self.spec, observed.spec_replicas, self.config.scale_to_zero
        got_scale = Condition(ConditionType.ABLE_TO_SCALE, True, "SucceededGetScale", GOT_SCALE)
        # A ScaledToZero condition counts only while the gate is on, and wakes the target only with a metric that
        # has a value at 0 pods, unless minReplicas was raised above 0 meanwhile.
        scaled_to_zero = gate and self._scaled_to_zero is True
        if current == 0 and not ((spec.min_replicas != 0 and scaled_to_zero)
                                 or (scaled_to_zero and spec.has_object_or_external)):
            disabled = Condition(ConditionType.SCALING_ACTIVE, False, "ScalingDisabled", SCALING_DISABLED)
            kept = self._scaled_to_zero if gate else None
            return Decision(now, current, current, conditions=(got_scale, disabled), scaled_to_zero=kept)
        if current > spec.max_replicas:
            return self._rescaled(Decision(now, current, spec.max_replicas, reason=ABOVE_MAX))
        if current != 0 and current < spec.min_replicas:
            return self._rescaled(Decision(now, current, spec.min_replicas, reason=BELOW_MIN))

        tolerances = spec.tolerances(self.config.tolerance)
        proposals = tuple(propose(m, observed.metrics.get(m.key), observed, tolerances, now, self.config)
                          for m in spec.metrics)
        combined = combine(proposals, current)
        if combined.replicas is None or combined.metric is None:
            failure = combined.first_failure
            assert failure is not None
            inactive = Condition(
                ConditionType.SCALING_ACTIVE,
                False,
                _FAILED_REASON[failure.metric.type],
                f"the HPA was unable to compute the replica count: {failure.error}",
            )
            return Decision(now, current, current, proposals=proposals, conditions=(got_scale, inactive),
                            error=combined.error, scaled_to_zero=self._scaled_to_zero)

        wanted = max(combined.replicas, 0)
        reason = ""
        if wanted > current:
            reason = f"{combined.metric.description} above target"
        elif wanted < current:
            reason = BELOW_TARGET
        stabilized, limited_to, limit, stabilization = self._normalize(now, current, wanted)
        desired = limited_to
        if current == 0 and spec.min_replicas != 0 and scaled_to_zero and desired < spec.min_replicas:
            # Woken with minReplicas raised since it went to 0: at least minReplicas, whatever the rate limits said.
            desired = spec.min_replicas
            reason = reason or BELOW_MIN
        if desired != current:
            able = Condition(ConditionType.ABLE_TO_SCALE, True, "SucceededRescale", f"scaling the target to {desired}")
        elif stabilized != wanted:
            able = Condition(ConditionType.ABLE_TO_SCALE, True, stabilization, "held by recent recommendations")
        else:
            able = Condition(ConditionType.ABLE_TO_SCALE, True, "ReadyForNewScale", "recommended size matches current")
        active = Condition(
            ConditionType.SCALING_ACTIVE,
            True,
            "ValidMetricFound",
            f"the HPA was able to successfully calculate a replica count from {combined.metric.description}",
        )
        limited = Condition(ConditionType.SCALING_LIMITED, limited_to != stabilized, limit.value,
                            _LIMIT_MESSAGE[limit])
        decision = Decision(
            now,
            current,
            desired,
            reason=reason if desired != current else "",
            proposals=proposals,
            metric_desired=combined.replicas,
            stabilized=stabilized,
            limited_by=limit,
            conditions=(able, active, limited),
            error=combined.error,
            scaled_to_zero=self._scaled_to_zero,
        )
        return self._rescaled(decision) if decision.rescale else decision

    def _rescaled(self, decision: Decision) -> Decision:
        """After a rescale: AbleToScale says so, and ScaledToZero is recorded (gate on: True when this rescale took a
        target with an Object or External metric and minReplicas 0 down to 0, else False) or removed (gate off)."""
        able = Condition(ConditionType.ABLE_TO_SCALE, True, "SucceededRescale",
                         f"scaling the target to {decision.desired}")
        conditions = [able, *(c for c in decision.conditions if c.type is not ConditionType.ABLE_TO_SCALE)]
        state: bool | None = None
        if self.config.scale_to_zero:
            state = (decision.current > 0 and decision.desired == 0 and self.spec.min_replicas == 0
                     and self.spec.has_object_or_external)
            conditions.append(Condition(ConditionType.SCALED_TO_ZERO, state, *_SCALED_TO_ZERO[state]))
        return replace(decision, conditions=tuple(conditions), scaled_to_zero=state)

    def _normalize(self, now: float, current: int, wanted: int) -> tuple[int, int, Limit, str]:
        """(stabilised, final, limit, stabilisation reason); records ``wanted`` as a recommendation."""
        spec, window = self.spec, self.config.downscale_stabilization_seconds
        if spec.behavior is None:
            stabilized = stabilize_without_behavior(self._recommendations, now, wanted, window)
            desired, limit = limit_without_behavior(current, stabilized, spec.min_replicas, spec.max_replicas)
            stabilization = "ScaleDownStabilized"
        else:
            up, down = spec.behavior.effective(window)
            stabilized = stabilize_with_behavior(
                self._recommendations,
                now,
                wanted,
                current,
                up.stabilization_window_seconds,
                down.stabilization_window_seconds,
            )
            desired, limit = limit_with_behavior(
                current, stabilized, spec.min_replicas, spec.max_replicas, up, down, self._events, now
            )
            stabilization = "ScaleUpStabilized" if wanted >= current else "ScaleDownStabilized"
        self._recommendations.append(Recommendation(wanted, now))
        return stabilized, desired, limit, stabilization

    def _forget(self, now: float) -> None:
        """Drop history no window can reach: windows are at most 3600 s (or the flag), policy periods 1800 s."""
        keep = max(MAX_STABILIZATION_WINDOW_SECONDS, self.config.downscale_stabilization_seconds)
        self._recommendations = [r for r in self._recommendations if r.at >= now - keep]
        self._events = [e for e in self._events if e.at > now - MAX_POLICY_PERIOD_SECONDS]
