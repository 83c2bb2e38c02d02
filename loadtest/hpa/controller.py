"""One HPA's controller loop body: read metrics, propose, stabilise, rate-limit, and say why.

The :class:`Autoscaler` keeps what the real controller keeps in memory between syncs (the raw recommendations
and the scale events, each with a timestamp). It never reads a clock: every call is given ``now`` in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
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


class ConditionType(StrEnum):
    ABLE_TO_SCALE = "AbleToScale"
    SCALING_ACTIVE = "ScalingActive"
    SCALING_LIMITED = "ScalingLimited"


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
    """

    def __init__(self, spec: HPASpec, config: ControllerConfig | None = None) -> None:
        self.spec = spec
        self.config = config or ControllerConfig()
        self._recommendations: list[Recommendation] = []
        self._events: list[ScaleEvent] = []
        self._last_now: float | None = None

    @property
    def recommendations(self) -> tuple[Recommendation, ...]:
        return tuple(self._recommendations)

    @property
    def scale_events(self) -> tuple[ScaleEvent, ...]:
        return tuple(self._events)

    def reconcile(self, now: float, observed: Observations) -> Decision:
        """Decide the replica count at time ``now`` (seconds; must not go backwards between calls)."""
        if self._last_now is not None and now < self._last_now:
            raise ValueError(f"now went backwards: {now} after {self._last_now}")
        if self._last_now is None:
            # The controller seeds the history with the count it first sees, so a restart does not scale down at once.
            self._recommendations.append(Recommendation(observed.spec_replicas, now))
        self._last_now = now
        decision = self._decide(now, observed)
        if decision.rescale and self.spec.behavior is not None:
            self._events.append(ScaleEvent(decision.desired - decision.current, now))
        self._forget(now)
        return decision

    def _decide(self, now: float, observed: Observations) -> Decision:
        spec, current = self.spec, observed.spec_replicas
        if current == 0 and spec.min_replicas != 0:
            disabled = Condition(
                ConditionType.SCALING_ACTIVE, False, "ScalingDisabled", "the target has 0 replicas and minReplicas > 0"
            )
            return Decision(now, current, current, conditions=(disabled,))
        if current > spec.max_replicas:
            return Decision(now, current, spec.max_replicas, reason=ABOVE_MAX)
        if current < spec.min_replicas:
            return Decision(now, current, spec.min_replicas, reason=BELOW_MIN)

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
            return Decision(now, current, current, proposals=proposals, conditions=(inactive,), error=combined.error)

        wanted = max(combined.replicas, 0)
        stabilized, desired, limit, stabilization = self._normalize(now, current, wanted)
        reason = ""
        if desired != current and wanted > current:
            reason = f"{combined.metric.description} above target"
        elif desired != current and wanted < current:
            reason = BELOW_TARGET
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
        limited = Condition(ConditionType.SCALING_LIMITED, desired != stabilized, limit.value, _LIMIT_MESSAGE[limit])
        return Decision(
            now,
            current,
            desired,
            reason=reason,
            proposals=proposals,
            metric_desired=combined.replicas,
            stabilized=stabilized,
            limited_by=limit,
            conditions=(able, active, limited),
            error=combined.error,
        )

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
