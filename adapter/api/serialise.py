"""Kubernetes JSON for custom and external metrics, per API version (pure)."""

from __future__ import annotations

import datetime as dt
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple, overload

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


class ObjectValues(Sequence[ObjectValue]):
    """One answer's items as columns: what they share once, then each object's name and (timestamp, value) pair.

    An answer about 1,500 pods would otherwise build 1,500 ``ObjectValue`` tuples only to encode them; the encoder
    reads the columns, and anything else sees a sequence of ``ObjectValue``."""

    __slots__ = ("api_version", "kind", "metric", "names", "namespace", "samples", "selector")

    def __init__(self, kind: str, api_version: str, namespace: str | None, metric: str,
                 selector: dict[str, Any] | None, names: list[str], samples: Sequence[Sequence[Any]]) -> None:
        """``samples[i]`` is ``names[i]``'s ``(labels, timestamp, value)`` (a ``prometheus.Sample``)."""
        self.kind, self.api_version, self.namespace, self.metric = kind, api_version, namespace, metric
        self.selector, self.names, self.samples = selector, names, samples

    def __len__(self) -> int:
        return len(self.names)

    @overload
    def __getitem__(self, index: int) -> ObjectValue: ...

    @overload
    def __getitem__(self, index: slice) -> list[ObjectValue]: ...

    def __getitem__(self, index: int | slice) -> ObjectValue | list[ObjectValue]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        sample = self.samples[index]
        return ObjectValue(self.kind, self.api_version, self.namespace, self.names[index], self.metric, sample[1],
                           sample[2], self.selector)


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
# what comes before the timestamp (describedObject, the metric name) is encoded once per object and kept, what comes
# after the value (the selector) is the same for every item of an answer, and each answer joins those with its
# timestamps and values. orjson.dumps(metric_value_list(...)) gives the same bytes (tests/test_serialise_bytes.py);
# building the per-item dicts it needs was most of a 1,500-item answer's time, and so was a Python loop over the
# items: the join below runs in C (map, zip, chain) but for objects, values and timestamps seen for the first time.
_FRAGMENTS_KEPT = 16_384  # objects whose fragments are kept; then the memory starts over
_QUANTITIES_KEPT = 4_096
# (version, kind, apiVersion, namespace, metric, encoded selector) -> object name -> the item up to its timestamp
_fragments: dict[tuple[Any, ...], dict[str, bytes]] = {}
_fragment_count = 0
_quantities: dict[float, bytes] = {}  # equal numbers format alike (1 and 1.0), so no need to key by type
_HEADS = {v: b'{"kind":"MetricValueList","apiVersion":"%s/%s","metadata":{},"items":[' % (CUSTOM_GROUP.encode(),
                                                                                          v.encode())
          for v in ("v1beta1", "v1beta2")}
_timestamps = operator.itemgetter(1)
_values = operator.itemgetter(2)


def _item_head(version: str, obj: ObjectValue, selector: bytes) -> bytes:
    """What an item's encoding holds before its timestamp."""
    described = orjson.dumps(_described(obj))
    if version == "v1beta1":
        return b'{"describedObject":%s,"metricName":%s,"timestamp":"' % (described, orjson.dumps(obj.metric))
    return (b'{"describedObject":%s,"metric":{"name":%s,"selector":%s},"timestamp":"'
            % (described, orjson.dumps(obj.metric), selector))


def _item_tail(version: str, selector: bytes) -> bytes:
    """What follows an item's value, with the comma that separates it from the next item."""
    return b'","selector":%s},' % selector if version == "v1beta1" else b'"},'


def _quantity_text(value: float) -> bytes:
    if len(_quantities) >= _QUANTITIES_KEPT:
        _quantities.clear()
    text = _quantities[value] = format_quantity(value).encode()
    return text


def encode_metric_value_list(version: str, items: Sequence[ObjectValue]) -> bytes:
    """``orjson.dumps(metric_value_list(version, items))``, from per-object fragments kept between answers."""
    head = _HEADS.get(version)
    if head is None or not items:
        return orjson.dumps(metric_value_list(version, items))
    out = [head]
    for columns in _as_columns(items):
        _encode_columns(out, version, columns)
    out[-1] = out[-1][:-1]  # the last item's comma
    out.append(b"]}")
    return b"".join(out)


def _as_columns(items: Sequence[ObjectValue]) -> Iterator[ObjectValues]:
    """The provider's answer as it is; other items in runs that share what columns share."""
    if isinstance(items, ObjectValues):
        yield items
        return
    for _, run in itertools.groupby(items, lambda o: (o.kind, o.api_version, o.namespace, o.metric, id(o.selector))):
        group = list(run)
        first = group[0]
        yield ObjectValues(first.kind, first.api_version, first.namespace, first.metric, first.selector,
                           [o.name for o in group], [(None, o.timestamp, o.value) for o in group])


def _encode_columns(out: list[bytes], version: str, items: ObjectValues) -> None:
    """Append each item's encoding, with a comma after each: (head, timestamp, value, tail) per item, four byte
    strings the final join copies."""
    selector = orjson.dumps(items.selector)
    key = (version, items.kind, items.api_version, items.namespace, items.metric, selector)
    names = items.names
    kept = _fragments.get(key)
    heads = list(map(kept.get, names)) if kept is not None else [None] * len(names)
    if None in heads:
        heads = _new_heads(version, items, key, heads, selector)
    samples = items.samples
    timestamps = list(map(_timestamps, samples))
    if timestamps.count(timestamps[0]) == len(timestamps):  # an instant query: one evaluation time for all
        stamped: Iterator[bytes] = itertools.repeat(_stamp(timestamps[0]))
    else:
        stamped = map(_stamp, timestamps)
    values = list(map(_values, samples))
    texts = list(map(_quantities.get, values))
    if None in texts:
        texts = [text or _quantity_text(value) for text, value in zip(texts, values, strict=True)]
    out.extend(itertools.chain.from_iterable(zip(heads, stamped, texts,
                                                 itertools.repeat(_item_tail(version, selector)))))


def _new_heads(version: str, items: ObjectValues, key: tuple[Any, ...], heads: list[bytes | None],
               selector: bytes) -> list[bytes]:
    """``heads`` with the missing ones encoded and kept (the memory starts over when it holds too many)."""
    global _fragment_count
    kept = _fragments.setdefault(key, {})
    filled = []
    for name, head in zip(items.names, heads, strict=True):
        if head is None:
            if _fragment_count >= _FRAGMENTS_KEPT:
                _fragments.clear()
                _fragment_count, kept = 0, _fragments.setdefault(key, {})
            head = kept[name] = _item_head(version, ObjectValue(items.kind, items.api_version, items.namespace,
                                                                name, items.metric, 0.0, 0.0, items.selector),
                                                   selector)
            _fragment_count += 1
        filled.append(head)
    return filled


@lru_cache(maxsize=256)
def _stamp(timestamp: float) -> bytes:
    """What lies between an item's head and its value: the timestamp."""
    return b'%s","value":"' % _rfc3339_seconds(int(timestamp)).encode()


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
