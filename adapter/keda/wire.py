"""KEDA's external-scaler messages to and from the provider requests the HTTP APIs use (pure translation).

What KEDA does with each answer (``pkg/scalers/external_scaler.go``, read at kedacore/keda 8b4f083ca):

* ``GetMetricSpec``: each ``MetricSpec`` becomes an External metric of the HPA KEDA owns, named
  ``s<trigger index>-<metricName>``, its target ``targetSizeFloat`` when that is above 0 (else the integer
  ``targetSize``), as an ``AverageValue`` or ``Value`` target by the trigger's ``metricType`` (``AverageValue``
  when not set).
* ``GetMetrics``: asked with the metric name less its ``s<index>-`` prefix; each ``MetricValue`` is read as
  ``metricValueFloat`` when that is above 0, else the integer ``metricValue``, and a NaN, infinite or negative
  value is turned into 0 on KEDA's side (``quantityFromFloat64`` in ``pkg/scalers/scaler.go``). So a value
  must never be sent that is not a real one: no value is an error status, never 0 or NaN.
* ``IsActive`` follows every ``GetMetrics`` and decides activation (0 <-> 1 replicas) by itself; KEDA applies
  no ``activationThreshold`` of its own to an external scaler, so the comparison is made here.

One number per trigger: the values of the selected objects (custom) or series (external) are combined by the
trigger's ``aggregation`` (``sum`` by default: with KEDA's default ``AverageValue`` target the HPA then asks for
ceil(sum / target) replicas, what an HPA ``Pods`` metric does with the pods' average).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from adapter.api.paths import MetricPath
from adapter.api.status import ApiError
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.metadata import MetadataError, Trigger

# The API's Status codes as gRPC status codes (what each means to KEDA: an error keeps the current scale).
_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
          403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND,
          500: grpc.StatusCode.INTERNAL, 503: grpc.StatusCode.UNAVAILABLE}
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class CustomQuery:
    """A custom.metrics.k8s.io request: the path and its two selectors."""

    path: MetricPath
    label_selector: str
    metric_label_selector: str


@dataclass(frozen=True)
class ExternalQuery:
    """An external.metrics.k8s.io request."""

    namespace: str
    metric: str
    label_selector: str


def namespace_of(ref: pb.ScaledObjectRef) -> str:
    """The ScaledObject's namespace, which every query is bound to."""
    if not ref.namespace:
        raise MetadataError("namespace", "required (KEDA sends the ScaledObject's)", where="ScaledObjectRef")
    return ref.namespace


def provider_query(trigger: Trigger, namespace: str) -> CustomQuery | ExternalQuery:
    """The request the HTTP API would get for the same metric, from the ScaledObject's namespace."""
    if trigger.resource is None:
        return ExternalQuery(namespace, trigger.metric, trigger.metric_selector)
    if trigger.resource == "namespaces":  # namespaces/{ns}/metrics/{metric}: the Namespace object itself
        return CustomQuery(MetricPath(None, "namespaces", namespace, trigger.metric), "", trigger.metric_selector)
    path = MetricPath(namespace, trigger.resource, trigger.name or "*", trigger.metric)
    return CustomQuery(path, trigger.label_selector, trigger.metric_selector)


def combine(trigger: Trigger, values: Sequence[float]) -> float:
    """The trigger's one number from the objects' or series' values (the provider answers at least one)."""
    if not values:
        raise ValueError("no values to combine")
    if trigger.aggregation == "avg":
        return math.fsum(values) / len(values)
    if trigger.aggregation == "max":
        return max(values)
    if trigger.aggregation == "min":
        return min(values)
    return math.fsum(values)


def active(trigger: Trigger, value: float) -> bool:
    """KEDA's activation rule, as its own scalers apply it (``value > activationThreshold``)."""
    return value > trigger.activation


def metric_spec(trigger: Trigger) -> pb.GetMetricSpecResponse:
    return pb.GetMetricSpecResponse(metricSpecs=[pb.MetricSpec(
        metricName=trigger.metric_name, targetSize=_int64(trigger.target), targetSizeFloat=trigger.target)])


def metric_values(metric_name: str, value: float) -> pb.GetMetricsResponse:
    """``metricValueFloat`` carries the value; the deprecated integer is its rounding, for KEDA releases that read
    only that (and the field KEDA reads when the value is 0 or negative)."""
    return pb.GetMetricsResponse(metricValues=[pb.MetricValue(
        metricName=metric_name, metricValue=_int64(value), metricValueFloat=value)])


def requested_metric(trigger: Trigger, request: pb.GetMetricsRequest) -> str:
    """The name KEDA asks for, which must be this trigger's (KEDA strips its ``s<index>-`` prefix first)."""
    if request.metricName and request.metricName != trigger.metric_name:
        raise MetadataError("metricName", f"{request.metricName!r} is not this trigger's metric: its spec names "
                                          f"{trigger.metric_name!r} (metric {trigger.metric})",
                            where="GetMetricsRequest")
    return request.metricName or trigger.metric_name


def status_code(error: ApiError) -> grpc.StatusCode:
    return _CODES.get(error.code, grpc.StatusCode.UNKNOWN)


def _int64(value: float) -> int:
    return max(-_INT64_MAX, min(_INT64_MAX, round(value)))
