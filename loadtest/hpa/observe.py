"""What the controller observes at one sync: the target's scale, its pods, and one reading per metric.

Metric values are ``int`` milli-units, as the controller holds them after ``MilliValue()``; the ``from_quantity``
constructors take the metrics API's Quantity strings (or plain numbers in units) and convert them the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from loadtest.hpa.spec import QuantityLike, milli

__all__ = [
    "ExternalValues",
    "FetchError",
    "ObjectValue",
    "Observations",
    "Pod",
    "PodPhase",
    "PodValues",
    "Reading",
    "running_pods",
]


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Pod:
    """A pod matching the target's selector.

    ``ready`` is the Ready condition; for custom metrics it only matters to Object/External ``Value`` targets,
    which multiply by the count of Running and Ready pods. ``deleting`` means a deletionTimestamp is set.
    """

    name: str
    phase: PodPhase = PodPhase.RUNNING
    ready: bool = True
    deleting: bool = False


def running_pods(count: int, prefix: str = "pod") -> tuple[Pod, ...]:
    """``count`` Running, Ready pods named ``{prefix}-0`` .. ``{prefix}-{count-1}``."""
    return tuple(Pod(f"{prefix}-{i}") for i in range(count))


@dataclass(frozen=True)
class PodValues:
    """A Pods metric: the value the custom metrics API returned for each pod, by pod name."""

    milli_by_pod: Mapping[str, int]

    @classmethod
    def from_quantities(cls, values: Mapping[str, QuantityLike]) -> PodValues:
        return cls({name: milli(value) for name, value in values.items()})


@dataclass(frozen=True)
class ObjectValue:
    """An Object metric: the one value returned for the described object."""

    milli: int

    @classmethod
    def from_quantity(cls, value: QuantityLike) -> ObjectValue:
        return cls(milli(value))


@dataclass(frozen=True)
class ExternalValues:
    """An External metric: every item the external metrics API returned (the controller sums them)."""

    milli_items: tuple[int, ...]

    @classmethod
    def from_quantities(cls, values: Iterable[QuantityLike]) -> ExternalValues:
        return cls(tuple(milli(value) for value in values))


@dataclass(frozen=True)
class FetchError:
    """The metrics API call failed; ``message`` is what the client reported."""

    message: str


Reading = PodValues | ObjectValue | ExternalValues | FetchError


@dataclass(frozen=True)
class Observations:
    """Inputs of one sync.

    ``metrics`` maps ``MetricSpec.key`` to its reading; a metric with no entry counts as a failed fetch.
    ``status_replicas`` (``scale.status.replicas``) defaults to ``spec_replicas``.
    """

    spec_replicas: int
    metrics: Mapping[str, Reading] = field(default_factory=dict)
    pods: tuple[Pod, ...] = ()
    status_replicas: int | None = None

    def __post_init__(self) -> None:
        if self.spec_replicas < 0 or (self.status_replicas is not None and self.status_replicas < 0):
            raise ValueError("replica counts must not be negative")

    @property
    def status(self) -> int:
        return self.spec_replicas if self.status_replicas is None else self.status_replicas
