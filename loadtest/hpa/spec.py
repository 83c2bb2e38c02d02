"""The HorizontalPodAutoscaler (autoscaling/v2) spec as the controller reads it, and the controller's own settings.

Every quantity is an ``int`` of milli-units: the controller converts each Quantity with ``MilliValue()`` (x1000,
rounded up) and computes on those integers. The ``pods``/``object``/``external`` constructors take what a manifest
holds instead (``"60"``, ``"850m"``, ``0.5``; a plain ``int`` there means units, not milli-units).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from clikit.quantity import milli_value

__all__ = [
    "DEFAULT_DOWNSCALE_STABILIZATION_SECONDS",
    "DEFAULT_SCALE_DOWN_POLICIES",
    "DEFAULT_SCALE_UP_POLICIES",
    "DEFAULT_SYNC_PERIOD_SECONDS",
    "DEFAULT_TOLERANCE",
    "MAX_POLICY_PERIOD_SECONDS",
    "MAX_STABILIZATION_WINDOW_SECONDS",
    "MIN_REPLICAS_BELOW_ONE",
    "ZERO_NEEDS_OBJECT_OR_EXTERNAL",
    "Behavior",
    "ControllerConfig",
    "EffectiveRules",
    "HPASpec",
    "MetricSpec",
    "MetricType",
    "PolicyType",
    "QuantityLike",
    "ScalingPolicy",
    "ScalingRules",
    "SelectPolicy",
    "TargetType",
    "Tolerances",
    "milli",
]

QuantityLike = str | int | float | Decimal

DEFAULT_SYNC_PERIOD_SECONDS = 15.0  # --horizontal-pod-autoscaler-sync-period
DEFAULT_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
DEFAULT_DOWNSCALE_STABILIZATION_SECONDS = 300.0  # --horizontal-pod-autoscaler-downscale-stabilization
DEFAULT_CPU_INITIALIZATION_PERIOD_SECONDS = 300.0  # --horizontal-pod-autoscaler-cpu-initialization-period
DEFAULT_INITIAL_READINESS_DELAY_SECONDS = 30.0  # --horizontal-pod-autoscaler-initial-readiness-delay
MAX_POLICY_PERIOD_SECONDS = 1800
MAX_STABILIZATION_WINDOW_SECONDS = 3600

# kube-apiserver's messages for minReplicas 0 (pkg/apis/autoscaling/validation/validation.go), as kubectl prints them.
ZERO_NEEDS_OBJECT_OR_EXTERNAL = (
    "spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling to zero replicas"
)
MIN_REPLICAS_BELOW_ONE = "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1"


def milli(quantity: QuantityLike) -> int:
    """``Quantity.MilliValue()``: ``"850m" -> 850``, ``60 -> 60000``, ``"0.0001" -> 1`` (rounded up, like the HPA)."""
    return milli_value(quantity)


class MetricType(StrEnum):
    OBJECT = "Object"
    PODS = "Pods"
    EXTERNAL = "External"
    RESOURCE = "Resource"


class TargetType(StrEnum):
    VALUE = "Value"
    AVERAGE_VALUE = "AverageValue"
    UTILIZATION = "Utilization"


class PolicyType(StrEnum):
    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(StrEnum):
    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


@dataclass(frozen=True)
class MetricSpec:
    """One entry of ``spec.metrics``.

    ``key`` names this metric's reading in ``Observations.metrics`` (default: the metric name; set it when two
    metrics share a name). ``described_object`` is ``"Kind/name"`` for Object metrics and empty otherwise. For a
    Resource metric ``name`` is the resource (``cpu``, ``memory``) and a Utilization target's ``target_milli`` holds
    the percentage of the pods' requests (``averageUtilization``), not milli-units. ``selector`` is
    ``metric.selector`` as a label selector string (``inference_pool=vllm``): the replica computation does not read
    it, the request for the metric carries it.
    """

    type: MetricType
    name: str
    target_type: TargetType
    target_milli: int
    described_object: str = ""
    key: str = ""
    selector: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name)
        if self.target_milli <= 0:
            raise ValueError(f"metric {self.name!r}: the target must be positive, got {self.target_milli} milli")
        if self.type is MetricType.PODS and self.target_type is not TargetType.AVERAGE_VALUE:
            raise ValueError(f"metric {self.name!r}: a Pods metric takes an AverageValue target")
        if self.type is MetricType.RESOURCE and self.target_type is TargetType.VALUE:
            raise ValueError(f"metric {self.name!r}: a Resource metric takes an AverageValue or Utilization target")
        if self.target_type is TargetType.UTILIZATION and self.type is not MetricType.RESOURCE:
            raise ValueError(f"metric {self.name!r}: only a Resource metric takes a Utilization target")
        kind, slash, obj = self.described_object.partition("/")
        if self.type is MetricType.OBJECT and not (kind and slash and obj):
            raise ValueError(f"metric {self.name!r}: an Object metric needs described_object 'Kind/name'")
        if self.type is not MetricType.OBJECT and self.described_object:
            raise ValueError(f"metric {self.name!r}: only Object metrics have a described object")
        if self.type is MetricType.RESOURCE and self.selector:
            raise ValueError(f"metric {self.name!r}: a Resource metric has no metric selector")

    @classmethod
    def pods(cls, name: str, average_value: QuantityLike, *, key: str = "", selector: str = "") -> MetricSpec:
        return cls(MetricType.PODS, name, TargetType.AVERAGE_VALUE, milli(average_value), key=key, selector=selector)

    @classmethod
    def resource(cls, name: str, *, average_utilization: int | None = None,
                 average_value: QuantityLike | None = None, key: str = "") -> MetricSpec:
        """``{type: Resource, resource: {name, target: {averageUtilization | averageValue}}}``."""
        if average_utilization is not None and average_value is None:
            return cls(MetricType.RESOURCE, name, TargetType.UTILIZATION, average_utilization, key=key)
        if average_value is not None and average_utilization is None:
            return cls(MetricType.RESOURCE, name, TargetType.AVERAGE_VALUE, milli(average_value), key=key)
        raise ValueError(f"metric {name!r}: give exactly one of average_utilization and average_value")

    @classmethod
    def object(
        cls,
        name: str,
        described_object: str,
        *,
        value: QuantityLike | None = None,
        average_value: QuantityLike | None = None,
        key: str = "",
        selector: str = "",
    ) -> MetricSpec:
        target_type, target = _one_target(name, value, average_value)
        return cls(MetricType.OBJECT, name, target_type, target, described_object, key, selector)

    @classmethod
    def external(
        cls, name: str, *, value: QuantityLike | None = None, average_value: QuantityLike | None = None,
        key: str = "", selector: str = "",
    ) -> MetricSpec:
        target_type, target = _one_target(name, value, average_value)
        return cls(MetricType.EXTERNAL, name, target_type, target, key=key, selector=selector)

    @property
    def description(self) -> str:
        """How the controller names the metric in its rescale reason, e.g. ``"pods metric X above target"``."""
        if self.type is MetricType.PODS:
            return f"pods metric {self.name}"
        if self.type is MetricType.RESOURCE:
            if self.target_type is TargetType.UTILIZATION:
                return f"{self.name} resource utilization (percentage of request)"
            return f"{self.name} resource"
        if self.type is MetricType.OBJECT:
            return f"{self.described_object.partition('/')[0]} metric {self.name}"
        return f"external metric {self.name}"


def _one_target(name: str, value: QuantityLike | None, average_value: QuantityLike | None) -> tuple[TargetType, int]:
    if (value is None) == (average_value is None):
        raise ValueError(f"metric {name!r}: give exactly one of value and average_value")
    if value is not None:
        return TargetType.VALUE, milli(value)
    assert average_value is not None
    return TargetType.AVERAGE_VALUE, milli(average_value)


@dataclass(frozen=True)
class ScalingPolicy:
    """At most ``value`` pods (or percent of the replicas at the period's start) per ``period_seconds``."""

    type: PolicyType
    value: int
    period_seconds: int

    def __post_init__(self) -> None:
        if self.value <= 0:
            raise ValueError(f"policy value must be positive, got {self.value}")
        if not 0 < self.period_seconds <= MAX_POLICY_PERIOD_SECONDS:
            raise ValueError(f"periodSeconds must be in 1..{MAX_POLICY_PERIOD_SECONDS}, got {self.period_seconds}")


DEFAULT_SCALE_UP_POLICIES = (ScalingPolicy(PolicyType.PODS, 4, 15), ScalingPolicy(PolicyType.PERCENT, 100, 15))
DEFAULT_SCALE_DOWN_POLICIES = (ScalingPolicy(PolicyType.PERCENT, 100, 15),)


@dataclass(frozen=True)
class ScalingRules:
    """``behavior.scaleUp`` / ``behavior.scaleDown`` as written; ``None`` fields take the API defaults."""

    stabilization_window_seconds: int | None = None
    select_policy: SelectPolicy | None = None
    policies: tuple[ScalingPolicy, ...] | None = None
    tolerance: float | None = None

    def __post_init__(self) -> None:
        window = self.stabilization_window_seconds
        if window is not None and not 0 <= window <= MAX_STABILIZATION_WINDOW_SECONDS:
            raise ValueError(f"stabilizationWindowSeconds must be in 0..{MAX_STABILIZATION_WINDOW_SECONDS}")
        if self.policies is not None and not self.policies:
            raise ValueError("policies, when given, must hold at least one policy")
        if self.tolerance is not None and self.tolerance < 0:
            raise ValueError(f"tolerance must not be negative, got {self.tolerance}")


@dataclass(frozen=True)
class EffectiveRules:
    """One direction's rules after defaulting: what the controller actually applies."""

    stabilization_window_seconds: float
    select_policy: SelectPolicy
    policies: tuple[ScalingPolicy, ...]


@dataclass(frozen=True)
class Behavior:
    """``spec.behavior``. Its presence switches the controller to the behavior-aware normalisation."""

    scale_up: ScalingRules | None = None
    scale_down: ScalingRules | None = None

    def effective(self, downscale_stabilization_seconds: float) -> tuple[EffectiveRules, EffectiveRules]:
        """(scale-up, scale-down) rules with each unset field defaulted on its own.

        An unset scale-down window takes the controller's ``--horizontal-pod-autoscaler-downscale-stabilization``.
        """
        up = self.scale_up or ScalingRules()
        down = self.scale_down or ScalingRules()
        return (
            EffectiveRules(
                _or(up.stabilization_window_seconds, 0.0),
                up.select_policy or SelectPolicy.MAX,
                up.policies or DEFAULT_SCALE_UP_POLICIES,
            ),
            EffectiveRules(
                _or(down.stabilization_window_seconds, downscale_stabilization_seconds),
                down.select_policy or SelectPolicy.MAX,
                down.policies or DEFAULT_SCALE_DOWN_POLICIES,
            ),
        )


def _or(value: int | None, default: float) -> float:
    return default if value is None else float(value)


@dataclass(frozen=True)
class Tolerances:
    """A ratio within ``[1 - scale_down, 1 + scale_up]`` keeps the current replica count for that metric."""

    scale_down: float = DEFAULT_TOLERANCE
    scale_up: float = DEFAULT_TOLERANCE

    def within(self, ratio: float) -> bool:
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


@dataclass(frozen=True)
class HPASpec:
    """The parts of ``HorizontalPodAutoscaler.spec`` the replica computation reads.

    ``min_replicas`` 0 (scale to zero) needs at least one Object or External metric, the rule the API server
    applies whatever its ``HPAScaleToZero`` gate says; :meth:`validate` adds the gate's own check.
    """

    max_replicas: int
    metrics: tuple[MetricSpec, ...]
    min_replicas: int = 1
    behavior: Behavior | None = None

    def __post_init__(self) -> None:
        if not self.metrics:
            raise ValueError("an HPA needs at least one metric")
        keys = [m.key for m in self.metrics]
        if len(set(keys)) != len(keys):
            raise ValueError(f"metric keys must be unique, got {keys}; set MetricSpec.key to tell them apart")
        if self.max_replicas < 1:
            raise ValueError(f"maxReplicas must be at least 1, got {self.max_replicas}")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"minReplicas must be in 0..maxReplicas, got {self.min_replicas}")
        if self.min_replicas == 0 and not self.has_object_or_external:
            types = ", ".join(sorted({m.type.value for m in self.metrics}))
            raise ValueError(f"{ZERO_NEEDS_OBJECT_OR_EXTERNAL} (minReplicas is 0 and the metrics are {types}: "
                             "with no pods there is no per-pod value to wake the target)")

    @property
    def has_object_or_external(self) -> bool:
        """At least one Object or External metric: the only kinds that have a value while the target has no pods."""
        return any(m.type in (MetricType.OBJECT, MetricType.EXTERNAL) for m in self.metrics)

    def validate(self, *, scale_to_zero_gate: bool = True, old: HPASpec | None = None) -> None:
        """kube-apiserver's check of ``minReplicas`` on create (``old`` None) or update: 0 is accepted when its
        ``HPAScaleToZero`` gate is on (beta, on by default from v1.37), or on an update of an HPA that already had
        0. Raises ``ValueError`` with the API server's message otherwise."""
        lower_bound = 0 if scale_to_zero_gate or (old is not None and old.min_replicas == 0) else 1
        if self.min_replicas < lower_bound:
            raise ValueError(f"{MIN_REPLICAS_BELOW_ONE} (the HPAScaleToZero feature gate is off on the API server)")

    def tolerances(self, default: float) -> Tolerances:
        """The cluster tolerance, overridden per direction by ``behavior.scaleUp/scaleDown.tolerance``."""
        up = self.behavior.scale_up if self.behavior else None
        down = self.behavior.scale_down if self.behavior else None
        return Tolerances(
            scale_down=default if down is None or down.tolerance is None else down.tolerance,
            scale_up=default if up is None or up.tolerance is None else up.tolerance,
        )


@dataclass(frozen=True)
class ControllerConfig:
    """kube-controller-manager's HPA flags (defaults as shipped).

    ``sync_period_seconds`` is not used by ``reconcile``; it is the cadence a loop should call it at.
    ``scale_to_zero`` is the controller-manager's ``HPAScaleToZero`` feature gate (beta and on by default from
    v1.37): off, the controller never wakes a target from 0 replicas and records no ``ScaledToZero`` condition.
    """

    tolerance: float = DEFAULT_TOLERANCE
    downscale_stabilization_seconds: float = DEFAULT_DOWNSCALE_STABILIZATION_SECONDS
    sync_period_seconds: float = DEFAULT_SYNC_PERIOD_SECONDS
    cpu_initialization_period_seconds: float = DEFAULT_CPU_INITIALIZATION_PERIOD_SECONDS
    initial_readiness_delay_seconds: float = DEFAULT_INITIAL_READINESS_DELAY_SECONDS
    scale_to_zero: bool = True

    def __post_init__(self) -> None:
        if self.tolerance < 0 or self.downscale_stabilization_seconds < 0:
            raise ValueError("tolerance and downscale stabilisation must not be negative")
        if self.sync_period_seconds <= 0:
            raise ValueError(f"the sync period must be positive, got {self.sync_period_seconds}")
