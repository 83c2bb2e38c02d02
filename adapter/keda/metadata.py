"""A KEDA trigger's ``metadata`` (``ScaledObjectRef.scalerMetadata``) read into a :class:`Trigger` (pure).

KEDA forwards every key of the trigger's ``metadata`` unchanged (``pkg/scalers/external_scaler.go``,
``parseExternalScalerMetadata``), its own connection keys included, and resolves a key ending in ``FromEnv`` from
the scale target's container environment, passing it on under the same key (dropped when the variable is empty).
So: KEDA's keys are ignored here, ``<key>FromEnv`` stands for ``<key>``, and every other key must be ours. An
unknown key is an error naming it (a misspelt ``activationTreshold`` must not silently mean 0).

Keys (docs/keda.md has the table and examples):

* ``metric`` (required): a metric the adapter serves, by its API name (``DCGM_FI_DEV_GPU_UTIL``,
  ``vllm:num_requests_waiting``, ``llm_d_epp_flow_control_queue_size``, or one of your rules).
* ``targetValue`` (required, > 0): the HPA target KEDA writes (``GetMetricSpec``'s ``targetSizeFloat``).
* ``activationThreshold`` (default 0): active (``IsActive``) while the value is greater than this.
* ``resource``: the metric is a custom metric of this resource (``pods``, ``deployments.apps``,
  ``inferencepools.inference.networking.k8s.io``, ``namespaces``); without it, an external metric.
* ``name`` (custom): one object, an Object metric; ``labelSelector`` (custom): the objects it selects, usually the
  scale target's pods. One of the two, except for ``namespaces`` (the ScaledObject's own namespace).
* ``metricSelector``: a label selector on the metric's own series (custom: ``metricLabelSelector``; external:
  ``labelSelector``, e.g. ``inference_pool=vllm``).
* ``aggregation`` (default ``sum``): ``sum``, ``avg``, ``max`` or ``min`` of the values (objects or series), the
  one number KEDA gets.
* ``zeroWhenNoneSelected`` (default ``false``; with ``labelSelector``): when the selector selects no object at all
  (the target scaled to zero: no pod), the value is 0 rather than an error. Objects that exist but have no value
  are still an error. For a trigger that holds replicas while they serve beside one that wakes the target.

The namespace is always the ScaledObject's: there is no key to read another namespace's metrics.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from adapter.rules import ResourceError, normalise_resource
from adapter.rules.selectors import SelectorError, parse_selector, to_promql_matchers

# KEDA's own keys for this trigger type (external_scaler.go, externalScalerMetadata): the scaler's address and how
# KEDA dials it. The last three are read from authentication parameters, but are ignored here too when written
# into metadata.
KEDA_KEYS = frozenset({"scalerAddress", "enableTLS", "unsafeSsl", "caCert", "tlsClientCert", "tlsClientKey"})
AGGREGATIONS = ("sum", "avg", "max", "min")
KEYS = ("metric", "targetValue", "activationThreshold", "resource", "name", "labelSelector", "metricSelector",
        "aggregation", "zeroWhenNoneSelected")
_FROM_ENV = "FromEnv"
# Where a user coming from KEDA's Prometheus scaler or an HPA might reach for another word.
_HINTS = {
    "threshold": "the HPA target is targetValue",
    "query": "this scaler reads the adapter's rules and presets, not PromQL: name the metric with metric",
    "serverAddress": "Prometheus is the adapter's --prometheus-url",
    "metricName": "the metric is named with metric",
    "metricType": "metricType is a field of the trigger, beside metadata, not inside it",
    "namespace": "the namespace is always the ScaledObject's",
    "selector": "use labelSelector (the objects) or metricSelector (the metric's series)",
    "metricLabelSelector": "use metricSelector",
}
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?")
_KEDA_UNSAFE = ("/", ".", ":", "%", "(", ")")


class MetadataError(ValueError):
    """A metadata map this scaler cannot serve; ``key`` names the offending key."""

    def __init__(self, key: str, problem: str, where: str = "scalerMetadata") -> None:
        super().__init__(f"{where}.{key}: {problem}")
        self.key = key


@dataclass(frozen=True)
class Trigger:
    metric: str
    target: float
    activation: float = 0.0
    resource: str | None = None  # None: an external metric
    name: str | None = None  # custom: one object
    label_selector: str = ""  # custom: the objects
    metric_selector: str = ""
    aggregation: str = "sum"
    zero_when_none_selected: bool = False

    @property
    def external(self) -> bool:
        return self.resource is None

    @property
    def metric_name(self) -> str:
        """The name in KEDA's metric spec: the metric with the characters KEDA itself replaces in metric names
        (``NormalizeString`` in ``pkg/util/normalize_string.go``: ``/ . : % ( )``) written as ``-``; KEDA prefixes it
        with ``s<trigger index>-`` in the HPA and strips that again in ``GetMetricsRequest.metricName``."""
        name = self.metric
        for char in _KEDA_UNSAFE:
            name = name.replace(char, "-")
        return name


def parse_metadata(metadata: Mapping[str, str]) -> Trigger:
    """The trigger a metadata map describes; a :class:`MetadataError` naming the first bad key."""
    values = _our_keys(metadata)
    metric = values.get("metric", "").strip()
    if not metric:
        raise MetadataError("metric", "required: the name of a metric the adapter serves (e.g. DCGM_FI_DEV_GPU_UTIL)")
    if any(c in metric for c in "/{}\"' \t\r\n"):
        raise MetadataError("metric", f"{metric!r} is not a metric name")
    target = _number(values, "targetValue", None)
    if target <= 0:
        raise MetadataError("targetValue", f"must be greater than 0, got {values['targetValue']!r}")
    activation = _number(values, "activationThreshold", 0.0)
    aggregation = values.get("aggregation", "sum").strip()
    if aggregation not in AGGREGATIONS:
        raise MetadataError("aggregation", f"expected one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    metric_selector = _selector(values, "metricSelector", promql=True)
    label_selector = _selector(values, "labelSelector", promql=False)
    name = values.get("name", "").strip() or None
    resource = values.get("resource", "").strip() or None
    given = {"name": name is not None, "labelSelector": bool(label_selector)}
    zero_when_none = _boolean(values, "zeroWhenNoneSelected")
    if zero_when_none and not given["labelSelector"]:
        raise MetadataError("zeroWhenNoneSelected", "only with labelSelector (it says what no selected object means)")
    if resource is None:
        for key in ("name", "labelSelector"):
            if given[key]:
                raise MetadataError(key, "only with resource (a custom metric of those objects); an external metric "
                                         "selects its series with metricSelector")
        return Trigger(metric, target, activation, None, None, "", metric_selector, aggregation)
    try:
        group_resource = normalise_resource(resource)
    except ResourceError as exc:
        raise MetadataError("resource", str(exc)) from None
    if str(group_resource) == "namespaces":
        for key in ("name", "labelSelector"):
            if given[key]:
                raise MetadataError(key, "not with resource namespaces: the namespace is the ScaledObject's own")
    elif given["name"] and given["labelSelector"]:
        raise MetadataError("labelSelector", "give name (one object) or labelSelector (the objects it selects), "
                                             "not both")
    elif not given["name"] and not given["labelSelector"]:
        raise MetadataError("labelSelector", f"required with resource {resource}: select the objects (e.g. the "
                                             "scale target's pods, app=vllm), or name one object with name")
    if name is not None and (len(name) > 253 or not _NAME.fullmatch(name)):
        raise MetadataError("name", f"{name!r} is not a Kubernetes object name")
    return Trigger(metric, target, activation, str(group_resource), name, label_selector, metric_selector,
                   aggregation, zero_when_none)


def _our_keys(metadata: Mapping[str, str]) -> dict[str, str]:
    """Our keys' values, ``<key>FromEnv`` read as ``<key>``; KEDA's keys dropped; anything else an error."""
    values: dict[str, str] = {}
    for key in sorted(metadata):
        if key in KEDA_KEYS:
            continue
        base = key[:-len(_FROM_ENV)] if key.endswith(_FROM_ENV) and key[:-len(_FROM_ENV)] in KEYS else key
        if base not in KEYS:
            hint = _HINTS.get(base)
            raise MetadataError(key, f"unknown key{f' ({hint})' if hint else ''}; this scaler reads "
                                     f"{', '.join(KEYS)} (and KEDA's own {', '.join(sorted(KEDA_KEYS))})")
        if base in values:
            raise MetadataError(key, f"{base} is given twice ({base} and {base}{_FROM_ENV})")
        values[base] = metadata[key]
    return values


def _number(values: Mapping[str, str], key: str, default: float | None) -> float:
    text = values.get(key)
    if text is None:
        if default is None:
            raise MetadataError(key, "required: a number (KEDA's metric target)")
        return default
    text = text.strip()
    value = float(text) if _FLOAT.fullmatch(text) else math.nan
    if not math.isfinite(value):
        raise MetadataError(key, f"expected a number such as 5 or 0.8, got {text!r}")
    return value


def _boolean(values: Mapping[str, str], key: str) -> bool:
    text = values.get(key, "false").strip()
    if text not in ("true", "false"):
        raise MetadataError(key, f"expected true or false, got {text!r}")
    return text == "true"


def _selector(values: Mapping[str, str], key: str, *, promql: bool) -> str:
    text = values.get(key, "").strip()
    try:
        requirements = parse_selector(text)
        if promql:
            to_promql_matchers(requirements)
    except SelectorError as exc:
        raise MetadataError(key, f"invalid label selector {text!r}: {exc}") from None
    return text
