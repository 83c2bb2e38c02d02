"""What the controller observes at one sync: the target's scale, its pods, and one reading per metric.

Metric values are ``int`` milli-units, as the controller holds them after ``MilliValue()``; the ``from_quantity``
constructors take the metrics API's Quantity strings (or plain numbers in units) and convert them the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from clikit.durations import parse_go_duration
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
    "ResourceSample",
    "ResourceUsage",
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

    ``ready`` is the Ready condition (``None``: the pod has none); for custom metrics it only matters to
    Object/External ``Value`` targets, which multiply by the count of Running and Ready pods. ``deleting`` means a
    deletionTimestamp is set. The rest is read by Resource metrics only: ``start_time`` (``status.startTime``,
    ``None`` when unset), ``ready_since`` (the Ready condition's lastTransitionTime) for cpu readiness, and each
    container's ``requests`` in milli-units, by resource.
    """

    name: str
    phase: PodPhase = PodPhase.RUNNING
    ready: bool | None = True
    deleting: bool = False
    start_time: float | None = 0.0
    ready_since: float = 0.0
    containers: tuple[tuple[str, Mapping[str, int]], ...] = ()

    @classmethod
    def from_manifest(cls, obj: Mapping[str, Any]) -> Pod:
        """From a Pod's JSON as the API returns it (the fields the controller reads)."""
        status = obj.get("status") or {}
        ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
        containers = tuple((c["name"], {r: milli(q) for r, q in ((c.get("resources") or {}).get("requests") or {})
                                        .items()}) for c in (obj.get("spec") or {}).get("containers") or ())
        return cls(obj["metadata"]["name"], PodPhase(status.get("phase", "Pending")),
                   None if ready is None else ready.get("status") == "True",
                   bool(obj["metadata"].get("deletionTimestamp")), _seconds(status.get("startTime")),
                   _seconds(ready.get("lastTransitionTime")) or 0.0 if ready else 0.0, containers)


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


@dataclass(frozen=True)
class ResourceSample:
    """One pod's usage of a resource from ``metrics.k8s.io``: summed over its containers, with the item's
    ``timestamp`` and ``window`` (seconds), which the cpu readiness rules compare with the pod's Ready time."""

    milli: int
    timestamp: float = 0.0
    window_s: float = 60.0


@dataclass(frozen=True)
class ResourceUsage:
    """A Resource metric: what ``PodMetricsList`` says each pod uses, by pod name."""

    by_pod: Mapping[str, ResourceSample]

    @classmethod
    def from_pod_metrics(cls, pod_metrics_list: Mapping[str, Any], resource: str) -> ResourceUsage:
        """The controller's reading of a ``PodMetricsList``: per pod, the sum of its containers' ``usage`` (a
        container without that resource makes the pod's value missing, as metrics-server's client skips it)."""
        found: dict[str, ResourceSample] = {}
        for item in pod_metrics_list["items"]:
            usage = [c["usage"].get(resource) for c in item["containers"]]
            if not usage or any(u is None for u in usage):
                continue
            found[item["metadata"]["name"]] = ResourceSample(
                sum(milli(u) for u in usage), _seconds(item.get("timestamp")) or 0.0,
                parse_go_duration(item.get("window") or "1m"))  # metav1.Duration
        return cls(found)


def _seconds(rfc3339: str | None) -> float | None:
    return None if not rfc3339 else datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


Reading = PodValues | ObjectValue | ExternalValues | ResourceUsage | FetchError


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
