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

Scale to zero (``HPAScaleToZero``, beta and on by default from Kubernetes v1.37) is modelled as the controller
does it: ``minReplicas: 0`` needs an Object or External metric; the controller takes a target with such a metric
down to 0 and records the ``ScaledToZero`` condition, and wakes a target at 0 only while that condition is True
(a target set to 0 by hand stays paused)::

    hpa = HPASpec(max_replicas=8, min_replicas=0, metrics=(MetricSpec.external("queue", average_value="10"),))
    scaler = Autoscaler(hpa, ControllerConfig(downscale_stabilization_seconds=0))
    idle = Observations(2, {"queue": ExternalValues((0,))}, running_pods(2))
    scaler.reconcile(0.0, idle).desired    # 2: the count first seen is a recommendation too
    scaler.reconcile(15.0, idle).desired   # 0, and scaler.scaled_to_zero is True
    scaler.reconcile(30.0, Observations(0, {"queue": ExternalValues((35_000,))})).desired   # 4: ceil(35 / 10)

Not modelled: ContainerResource metrics, selector validation, and API request errors beyond their message (pass a
:class:`FetchError`).

This package is the load test's controller layer. Besides the pure model (``spec``, ``observe``, ``replicas``,
``normalize``, ``controller``, re-exported here), it holds the I/O that runs it, none of which this module imports:
``loop`` (an HPA controller loop over the metrics APIs, scaling a workload), ``metrics_api`` (the controller's
custom and external metrics clients), ``record`` (what a sync decided, as runs record it), ``scale_on`` (what the
demo's HPA scales on) and ``watch`` (a real cluster's HPA and a metrics API path, read while ``gpu-loadtest run``
loads it).
"""

from loadtest.hpa.controller import (
    ABOVE_MAX,
    BELOW_MIN,
    SCALING_DISABLED,
    Autoscaler,
    Condition,
    ConditionType,
    Decision,
)
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
    MIN_REPLICAS_BELOW_ONE,
    ZERO_NEEDS_OBJECT_OR_EXTERNAL,
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
    "MIN_REPLICAS_BELOW_ONE",
    "NO_PODS",
    "NO_POD_METRICS",
    "SCALING_DISABLED",
    "ZERO_NEEDS_OBJECT_OR_EXTERNAL",
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
