"""Watching a real cluster while load runs: an HPA's status and a custom-metrics API path, through the official
``kubernetes`` client (kubeconfig, or in-cluster configuration when there is none)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError as Urllib3Error

from clikit.quantity import parse_quantity

__all__ = ["ClusterReading", "ClusterWatcher", "HpaStatus", "KubeError", "api_client", "hpa_status",
           "metric_average"]


class KubeError(RuntimeError):
    pass


def api_client(kubeconfig: str | None, context: str | None = None) -> k8s.ApiClient:
    """A client from ``kubeconfig`` (or the default kubeconfig), else the in-cluster service account."""
    try:
        return k8s_config.new_client_from_config(config_file=kubeconfig, context=context)
    except (ConfigException, OSError) as exc:
        if kubeconfig is not None:
            raise KubeError(f"kubeconfig {kubeconfig}: {exc}") from None
    try:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        raise KubeError(f"no kubeconfig and not in a cluster: {exc}") from None
    return k8s.ApiClient(configuration)


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(parse_quantity(str(value)))
    except ValueError:
        return None


def _first_value(block: Mapping[str, Any] | None) -> float | None:
    """The value of a metric target/current block: averageValue, value or averageUtilization."""
    if not block:
        return None
    for key in ("averageValue", "value", "averageUtilization"):
        if block.get(key) is not None:
            return _number(block[key])
    return None


@dataclass(frozen=True)
class HpaStatus:
    current_replicas: int | None
    desired_replicas: int | None
    metric: float | None  # the first metric's current value, as the HPA status reports it
    target: float | None  # the first metric's target


def hpa_status(hpa: Mapping[str, Any]) -> HpaStatus:
    """From an ``autoscaling/v2`` HorizontalPodAutoscaler document."""
    status = hpa.get("status") or {}
    spec_metrics = (hpa.get("spec") or {}).get("metrics") or []
    current_metrics = status.get("currentMetrics") or []
    target = current = None
    if spec_metrics:
        first = spec_metrics[0]
        target = _first_value((first.get(_type_key(first)) or {}).get("target"))
    if current_metrics:
        first = current_metrics[0]
        current = _first_value((first.get(_type_key(first)) or {}).get("current"))
    return HpaStatus(status.get("currentReplicas"), status.get("desiredReplicas"), current, target)


def _type_key(metric: Mapping[str, Any]) -> str:
    """``Pods`` -> ``pods``, ``ContainerResource`` -> ``containerResource``."""
    kind = str(metric.get("type", ""))
    return kind[:1].lower() + kind[1:]


def metric_average(document: Mapping[str, Any]) -> float | None:
    """Mean of the item values of a ``MetricValueList`` (custom) or ``ExternalMetricValueList``."""
    values = [_number(item.get("value")) for item in document.get("items") or []]
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


@dataclass(frozen=True)
class ClusterReading:
    hpa: HpaStatus | None = None
    metric: float | None = None
    errors: tuple[str, ...] = ()


class ClusterWatcher:
    """Polls (blocking calls; run them in a thread) the HPA ``name`` in ``namespace`` and/or ``metric_path``."""

    def __init__(self, api: k8s.ApiClient, namespace: str, hpa: str | None, metric_path: str | None) -> None:
        self.api = api
        self.namespace = namespace
        self.hpa = hpa
        self.metric_path = metric_path
        self._autoscaling = k8s.AutoscalingV2Api(api)

    def read_hpa(self) -> dict[str, Any]:
        assert self.hpa is not None
        response = self._autoscaling.read_namespaced_horizontal_pod_autoscaler(
            self.hpa, self.namespace, _preload_content=False, _request_timeout=5)
        return dict(json.loads(response.data))

    def read_metric(self) -> dict[str, Any]:
        """GET the path with the client's credentials; a non-2xx answer raises ``ApiException`` with its body."""
        assert self.metric_path is not None
        method, url, headers, body, _ = self.api.param_serialize(
            "GET", self.metric_path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=5)
        response.read()
        result = self.api.response_deserialize(response, {"2XX": "object", "default": "str"}).data
        if not isinstance(result, dict):
            raise ValueError(f"expected a JSON object, got {type(result).__name__}")
        return result

    def poll(self) -> ClusterReading:
        errors: list[str] = []
        status = metric = None
        if self.hpa is not None:
            try:
                status = hpa_status(self.read_hpa())
            except (ApiException, Urllib3Error, ValueError) as exc:
                errors.append(f"HPA {self.namespace}/{self.hpa}: {_reason(exc)}")
        if self.metric_path is not None:
            try:
                metric = metric_average(self.read_metric())
            except (ApiException, Urllib3Error, ValueError) as exc:
                errors.append(f"{self.metric_path}: {_reason(exc)}")
        return ClusterReading(status, metric, tuple(errors))

    def close(self) -> None:
        self.api.close()


def _reason(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        try:
            return f"{exc.status} {json.loads(exc.body or '{}').get('message', exc.reason)}"
        except ValueError:
            return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
