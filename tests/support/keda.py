"""KEDA's side of the external scaler contract, for tests: requests built and answers read as KEDA does.

Read from kedacore/keda at commit 8b4f083ca (main, 2026-08-20; v2.20.2 behaves the same for everything here):

* ``pkg/scalers/external_scaler.go``: ``parseExternalScalerMetadata`` (the trigger's metadata forwarded whole as
  ``scalerMetadata``; a key ending in ``FromEnv`` replaced by the named environment variable's value, under the
  same key, and dropped when that value is empty), ``NewExternalScaler`` (``ScaledObjectRef{Name, Namespace}`` of
  the ScaledObject), ``buildMetricSpecs`` (name ``s<index>-<metricName>``; ``targetSizeFloat`` when > 0, else
  ``targetSize``), ``GetMetricsAndActivity`` (``GetMetrics`` with the name less its prefix, each value
  ``metricValueFloat`` when > 0 else ``metricValue``, then ``IsActive``), ``handleIsActiveStream`` (each streamed
  ``result``), ``getClientForConnectionPool`` (TLS when ``enableTLS`` is true or ``caCert``/a client certificate
  is given, else plain text).
* ``pkg/scalers/scaler.go``: ``GenerateMetricNameWithIndex``, ``RemoveIndexFromMetricName``,
  ``GetMetricTargetType`` (``AverageValue`` when ``metricType`` is empty), ``quantityFromFloat64`` (NaN, Inf and
  negative values become 0; otherwise ``%.3f``).
* ``pkg/util/normalize_string.go``: ``NormalizeString``.

``unsafeSsl`` (skip verification) is not modelled: Python's gRPC cannot dial that way.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import grpc

from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc


def scaler_metadata(trigger_metadata: Mapping[str, str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``parseExternalScalerMetadata``'s ``originalMetadata``."""
    out = {}
    for key, value in trigger_metadata.items():
        if key.endswith("FromEnv"):
            resolved = (env or {}).get(value, "")
            if resolved:
                out[key] = resolved
        else:
            out[key] = value
    return out


def metric_name_with_index(index: int, name: str) -> str:
    return f"s{index}-{name}"


def remove_index(index: int, name: str) -> str:
    prefix, dash, rest = name.partition("-")
    if not dash:
        raise ValueError("metric name without index prefix")
    if prefix != f"s{index}":
        raise ValueError("metric name contains incorrect index prefix")
    return rest


def normalize_string(text: str) -> str:
    for char in "/.:%()":
        text = text.replace(char, "-")
    return text


def quantity_from_float(value: float) -> float:
    """The value KEDA's metrics server hands the HPA (milli precision)."""
    if math.isnan(value) or math.isinf(value) or value < 0:
        return 0.0
    return float(f"{value:.3f}")


def target_of(spec: pb.MetricSpec) -> float:
    return spec.targetSizeFloat if spec.targetSizeFloat > 0 else float(spec.targetSize)


def value_of(metric: pb.MetricValue) -> float:
    return metric.metricValueFloat if metric.metricValueFloat > 0 else float(metric.metricValue)


@dataclass
class HpaMetric:
    """One External metric of the HPA KEDA writes for a trigger."""

    name: str
    target_type: str  # AverageValue or Value
    target: float


@dataclass
class Trigger:
    """One ``external``/``external-push`` trigger of a ScaledObject, as KEDA's scaler object holds it."""

    client: KedaClient
    scaled_object: str
    namespace: str
    metadata: dict[str, str]
    index: int = 0
    metric_type: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> pb.ScaledObjectRef:
        return pb.ScaledObjectRef(name=self.scaled_object, namespace=self.namespace,
                                  scalerMetadata=scaler_metadata(self.metadata, self.env))

    def metric_spec(self) -> list[HpaMetric]:
        response = self.client.stub.GetMetricSpec(self.ref, timeout=self.client.timeout)
        target_type = self.metric_type or "AverageValue"
        return [HpaMetric(metric_name_with_index(self.index, s.metricName), target_type,
                          quantity_from_float(target_of(s))) for s in response.metricSpecs]

    def metrics_and_activity(self, hpa_metric_name: str) -> tuple[list[float], bool]:
        """``GetMetricsAndActivity``: the values the HPA would read, and the activity."""
        request = pb.GetMetricsRequest(metricName=remove_index(self.index, hpa_metric_name), scaledObjectRef=self.ref)
        response = self.client.stub.GetMetrics(request, timeout=self.client.timeout)
        values = [quantity_from_float(value_of(m)) for m in response.metricValues]
        active = self.client.stub.IsActive(self.ref, timeout=self.client.timeout).result
        return values, active

    def value(self) -> float:
        """The one value of the trigger's one metric, as the HPA would sum it."""
        [metric] = self.metric_spec()
        values, _ = self.metrics_and_activity(metric.name)
        return sum(values)

    def is_active(self) -> bool:
        return self.client.stub.IsActive(self.ref, timeout=self.client.timeout).result

    def stream(self) -> Iterator[bool]:
        """``StreamIsActive``'s results; cancel with ``.cancel()`` on the returned call."""
        return self.client.stub.StreamIsActive(self.ref)  # type: ignore[no-any-return]


class KedaClient:
    """A connection to the scaler as ``getClientForConnectionPool`` dials ``scalerAddress``."""

    def __init__(self, scaler_address: str, *, enable_tls: bool = False, ca_cert: bytes | None = None,
                 client_cert: bytes | None = None, client_key: bytes | None = None, timeout: float = 10.0,
                 server_name: str | None = None) -> None:
        """``server_name``: the name KEDA would verify (the host of its ``scalerAddress``) when the test reaches
        the server at another address (a Service name, here on loopback)."""
        self.timeout = timeout
        certificates = client_cert is not None and client_key is not None
        if enable_tls or certificates or ca_cert is not None:
            credentials = grpc.ssl_channel_credentials(ca_cert, client_key if certificates else None,
                                                       client_cert if certificates else None)
            options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
            self.channel = grpc.secure_channel(scaler_address, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(scaler_address)
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    def trigger(self, scaled_object: str, namespace: str, metadata: Mapping[str, str], **kw: object) -> Trigger:
        return Trigger(self, scaled_object, namespace, dict(metadata), **kw)  # type: ignore[arg-type]

    def close(self) -> None:
        self.channel.close()
