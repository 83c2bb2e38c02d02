"""Kubernetes JSON for custom and external metrics, per API version (pure)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import orjson

from adapter.quantity import format_quantity

CUSTOM_GROUP = "custom.metrics.k8s.io"
EXTERNAL_GROUP = "external.metrics.k8s.io"


class ObjectValue(NamedTuple):
    """One object's value; immutable. A NamedTuple rather than a frozen dataclass (built in a quarter of the time:
    a 1,500-pod response builds 1,500)."""

    kind: str
    api_version: str  # describedObject.apiVersion, e.g. "/v1", "apps/v1"
    namespace: str | None
    name: str
    metric: str
    timestamp: float
    value: float
    selector: dict[str, Any] | None = None


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


# -- the same documents as bytes, item by item ----------------------------------------------------------------------
# An HPA asks about the same objects every sync period, and in an item only the timestamp and the value change:
# the rest (describedObject, the metric, the selector) is encoded once per object and kept, and each answer joins
# those fragments with its timestamps and values. orjson.dumps(metric_value_list(...)) gives the same bytes
# (tests/test_serialise_bytes.py); building the per-item dicts it needs was most of a 1,500-item answer's time.
_FRAGMENTS_KEPT = 16_384  # objects whose fragments are kept; then the memory starts over
_fragments: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
_HEADS = {v: b'{"kind":"MetricValueList","apiVersion":"%s/%s","metadata":{},"items":[' % (CUSTOM_GROUP.encode(),
                                                                                          v.encode())
          for v in ("v1beta1", "v1beta2")}


@lru_cache(maxsize=256)
def _rfc3339_bytes(seconds: int) -> bytes:
    return _rfc3339_seconds(seconds).encode()


@lru_cache(maxsize=4096, typed=True)
def _quantity_bytes(value: float) -> bytes:
    return _quantity(value).encode()


def _item_fragments(version: str, obj: ObjectValue, selector: bytes) -> tuple[bytes, bytes]:
    """What an item's encoding holds before its timestamp, and after its value."""
    described = orjson.dumps(_described(obj))
    if version == "v1beta1":
        return (b'{"describedObject":%s,"metricName":%s,"timestamp":"' % (described, orjson.dumps(obj.metric)),
                b'","selector":%s}' % selector)
    return (b'{"describedObject":%s,"metric":{"name":%s,"selector":%s},"timestamp":"'
            % (described, orjson.dumps(obj.metric), selector), b'"}')


def encode_metric_value_list(version: str, items: Sequence[ObjectValue]) -> bytes:
    """``orjson.dumps(metric_value_list(version, items))``, from per-object fragments kept between answers."""
    head = _HEADS.get(version)
    if head is None or not items:
        return orjson.dumps(metric_value_list(version, items))
    encoded: list[bytes] = []
    selector_of: Any = None
    selector = b"null"
    fragments = _fragments
    for obj in items:
        if obj.selector is not selector_of:  # one selector per answer: encoded once
            selector_of = obj.selector
            selector = orjson.dumps(selector_of)
        key = (version, obj.kind, obj.api_version, obj.namespace, obj.name, obj.metric, selector)
        parts = fragments.get(key)
        if parts is None:
            if len(fragments) >= _FRAGMENTS_KEPT:
                fragments.clear()
            parts = fragments[key] = _item_fragments(version, obj, selector)
        encoded.append(b'%s%s","value":"%s%s' % (parts[0], _rfc3339_bytes(int(obj.timestamp)),
                                                  _quantity_bytes(obj.value), parts[1]))
    return b"%s%s]}" % (head, b",".join(encoded))


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
