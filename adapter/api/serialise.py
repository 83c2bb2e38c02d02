"""Kubernetes JSON for custom and external metrics, per API version (pure)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from clikit.quantity import format_quantity

CUSTOM_GROUP = "custom.metrics.k8s.io"
EXTERNAL_GROUP = "external.metrics.k8s.io"


class ObjectValue(NamedTuple):
    """One object's value; immutable."""

    kind: str
    api_version: str  # describedObject.apiVersion, e.g. "/v1", "apps/v1"
    namespace: str | None
    name: str
    metric: str
    timestamp: float
    value: float
    selector: Mapping[str, Any] | None = None


def rfc3339(timestamp: float) -> str:
    """metav1.Time: UTC, whole seconds, ``Z`` suffix."""
    return _rfc3339_seconds(int(timestamp))


# A response's items share a few timestamps and often repeat values (a 1,500-pod answer formats 1,500 of each), and
# both conversions cost microseconds each: remember recent ones.
@lru_cache(maxsize=256)
def _rfc3339_seconds(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_quantity = lru_cache(maxsize=4096, typed=True)(format_quantity)  # typed: 1 and 1.0 stay apart


def _described(obj: ObjectValue) -> dict[str, str]:
    ref = {"kind": obj.kind, "name": obj.name, "apiVersion": obj.api_version}
    if obj.namespace is not None:
        ref["namespace"] = obj.namespace
    return ref


def metric_value_list(version: str, items: Sequence[ObjectValue]) -> dict[str, Any]:
    """A ``MetricValueList``; item fields differ between v1beta1 and v1beta2."""
    if version == "v1beta1":
        rendered = [{"describedObject": _described(o), "metricName": o.metric, "timestamp": rfc3339(o.timestamp),
                     "value": _quantity(o.value), "selector": o.selector} for o in items]
    else:
        rendered = [{"describedObject": _described(o), "metric": {"name": o.metric, "selector": o.selector},
                     "timestamp": rfc3339(o.timestamp), "value": _quantity(o.value)} for o in items]
    return {"kind": "MetricValueList", "apiVersion": f"{CUSTOM_GROUP}/{version}", "metadata": {}, "items": rendered}


@dataclass(frozen=True)
class ExternalValue:
    metric: str
    labels: dict[str, str]
    timestamp: float
    value: float


def external_metric_value_list(items: Sequence[ExternalValue]) -> dict[str, Any]:
    return {"kind": "ExternalMetricValueList", "apiVersion": f"{EXTERNAL_GROUP}/v1beta1", "metadata": {},
            "items": [{"metricName": i.metric, "metricLabels": i.labels, "timestamp": rfc3339(i.timestamp),
                       "value": _quantity(i.value)} for i in items]}


def api_resource_list(group: str, version: str, resources: Sequence[tuple[str, bool]]) -> dict[str, Any]:
    """Discovery: one entry per ``<group-resource>/<metric>`` with its namespaced flag."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
            "resources": [{"name": name, "singularName": "", "namespaced": namespaced,
                           "kind": "MetricValueList" if group == CUSTOM_GROUP else "ExternalMetricValueList",
                           "verbs": ["get"]} for name, namespaced in resources]}


def api_group(group: str, versions: Sequence[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries,
            "preferredVersion": entries[0]}
