"""The HorizontalPodAutoscaler controller's replica computation (autoscaling/v2), as a pure model.

It follows the controller's code (kubernetes/kubernetes pkg/controller/podautoscaler: replica_calculator.go,
horizontal.go; the behavior defaults of pkg/apis/autoscaling/v2/defaults.go) as the project's shared spec states it
(``../shared/spec/k8s-metrics-api.md`` §5, kept beside the repository, not in it): Pods, Object, External and
Resource (metrics.k8s.io: utilisation of the pods' requests, or an average value, with the cpu readiness rules)
metrics in integer milli-units, tolerance, missing/unready pods, several metrics and their failures, then
stabilisation and rate limits with or without ``spec.behavior``. Use it to drive a simulated deployment, or to
predict what a real cluster's controller will do::

    hpa = HPASpec(max_replicas=8, metrics=(MetricSpec.pods("DCGM_FI_DEV_GPU_UTIL", average_value="60"),))
    scaler = Autoscaler(hpa)
    pods = running_pods(2)
    seen = Observations(2, {"DCGM_FI_DEV_GPU_UTIL": PodValues.from_quantities({"pod-0": 85, "pod-1": 95})}, pods)
    decision = scaler.reconcile(now=0.0, observed=seen)   # decision.desired == 3

Not modelled: ContainerResource metrics, selector validation, and API request errors beyond their message (pass a
:class:`FetchError`).
"""

from loadtest.hpa.controller import ABOVE_MAX, BELOW_MIN, Autoscaler, Condition, ConditionType, Decision
from loadtest.hpa.normalize import (
    Limit,
    Recommendation,
    ScaleEvent,
    limit_with_behavior,
    limit_without_behavior,
    scale_down_floor,
    scale_up_ceiling,
    stabilize_with_behavior,
    stabilize_without_behavior,
)
from loadtest.hpa.observe import (
    ExternalValues,
    FetchError,
    ObjectValue,
    Observations,
    Pod,
    PodPhase,
    PodValues,
    Reading,
    ResourceSample,
    ResourceUsage,
    running_pods,
)
from loadtest.hpa.replicas import MAX_INT32, MAX_INT64, NO_POD_METRICS, NO_PODS, MetricProposal, combine, propose
from loadtest.hpa.spec import (
    DEFAULT_DOWNSCALE_STABILIZATION_SECONDS,
    DEFAULT_SCALE_DOWN_POLICIES,
    DEFAULT_SCALE_UP_POLICIES,
    DEFAULT_SYNC_PERIOD_SECONDS,
    DEFAULT_TOLERANCE,
    Behavior,
    ControllerConfig,
    EffectiveRules,
    HPASpec,
    MetricSpec,
    MetricType,
    PolicyType,
    QuantityLike,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
    TargetType,
    Tolerances,
    milli,
)

__all__ = [
    "ABOVE_MAX",
    "BELOW_MIN",
    "DEFAULT_DOWNSCALE_STABILIZATION_SECONDS",
    "DEFAULT_SCALE_DOWN_POLICIES",
    "DEFAULT_SCALE_UP_POLICIES",
    "DEFAULT_SYNC_PERIOD_SECONDS",
    "DEFAULT_TOLERANCE",
    "MAX_INT32",
    "MAX_INT64",
    "NO_PODS",
    "NO_POD_METRICS",
    "Autoscaler",
    "Behavior",
    "Condition",
    "ConditionType",
    "ControllerConfig",
    "Decision",
    "EffectiveRules",
    "ExternalValues",
    "FetchError",
    "HPASpec",
    "Limit",
    "MetricProposal",
    "MetricSpec",
    "MetricType",
    "ObjectValue",
    "Observations",
    "Pod",
    "PodPhase",
    "PodValues",
    "PolicyType",
    "QuantityLike",
    "Reading",
    "Recommendation",
    "ResourceSample",
    "ResourceUsage",
    "ScaleEvent",
    "ScalingPolicy",
    "ScalingRules",
    "SelectPolicy",
    "TargetType",
    "Tolerances",
    "combine",
    "limit_with_behavior",
    "limit_without_behavior",
    "milli",
    "propose",
    "running_pods",
    "scale_down_floor",
    "scale_up_ceiling",
    "stabilize_with_behavior",
    "stabilize_without_behavior",
]
