"""Built-in rules for the inference gateway's endpoint picker (EPP): ``include: [inference-gateway]``.

The EPP of Gateway API Inference Extension buffers requests in its flow-control layer while no model-server
replica can take them, so what waits there is the demand signal that can wake a Deployment from zero (a per-pod
metric cannot: at zero replicas there is no pod). Each metric is served two ways, under its current and its
previous name (an HPA written for either keeps working across an EPP upgrade; each name answers from whichever
series the EPP exports, the current first):

* External (``external.metrics.k8s.io``), selected with ``inference_pool: <pool name>`` in the HPA's
  ``metric.selector``, within the HPA's namespace;
* Object, on the ``InferencePool`` (``inferencepools.inference.networking.k8s.io``, and the older
  ``inferencepools.inference.networking.x-k8s.io``), resolved through API discovery like any custom resource.

Every rule discovers its metric from the EPP's ready-endpoints gauge, which the EPP exports for its pool from
start-up, zero included; the flow-control queue gauges exist only while some flow has requests, so an empty
queue is usually no series at all. The queue metrics therefore read 0 for a pool whose EPP runs flow control
(its dispatch-cycle histogram is exported by the same target) when no series is queued, and no value for a pool
no EPP reports. The pool averages are answered only while the pool has ready endpoints: with none the EPP stops
updating them, and their last value would be stale.

Facts read from the sources (names, types, labels; nothing copied):

* kubernetes-sigs/gateway-api-inference-extension ``pkg/epp/metrics/metrics.go`` (v0.3.0 to v1.5.0): pool gauges
  ``inference_pool_average_kv_cache_utilization``, ``inference_pool_average_queue_size``,
  ``inference_pool_ready_pods`` (label ``name``: the pool's name; ``inference_pool_average_running_requests``
  from v1.5.0); flow-control gauges ``inference_extension_flow_control_queue_size`` (labels ``fairness_id``,
  ``priority``; ``inference_pool``, ``model_name``, ``target_model_name`` from v1.3.0),
  ``inference_extension_flow_control_queue_bytes`` (v1.4.0), ``inference_extension_flow_control_pool_saturation``
  (label ``inference_pool``, v1.5.0) and the histogram
  ``inference_extension_flow_control_dispatch_cycle_duration_seconds`` (no label, v1.4.0).
  ``pkg/epp/datalayer/logger/logger.go``: the ready gauge is set on every refresh, 0 included; the averages only
  while some endpoint is ready. ``pkg/epp/flowcontrol/controller/controller.go``: the queue
  gauges go up on enqueue and down at the request's outcome. ``config/crd/bases``: ``InferencePool`` is
  ``inference.networking.k8s.io/v1`` from v1.0.0, ``inference.networking.x-k8s.io/v1alpha2`` before and beside it
  until v1.5.0. From v1.6.0 the EPP lives in llm-d/llm-d-router (its README).
* llm-d/llm-d-router ``pkg/epp/metrics/llm_d_router_metrics.go`` (subsystem ``llm_d_epp`` from v0.9.0): the same
  families renamed ``llm_d_epp_*``, the ready gauge as ``llm_d_epp_ready_endpoints``; ``pool_saturation`` gains
  a ``stage`` label (prefill, decode, effective = their maximum). ``pkg/epp/metrics/metrics.go``: the previous
  names are still exported beside them, marked deprecated, and ``DeleteFlowControlFlowSeries`` drops an idle
  flow's queue series when the flow registry collects it (``pkg/epp/flowcontrol/registry/registry.go``).
  ``pkg/epp/flowcontrol/controller/internal/processor.go``: the dispatch cycle runs on a 1 ms ticker whenever flow
  control is on. ``cmd/epp/runner/runner.go``: ``inference_pool`` is the EPP's ``--pool-name``.
* llm-d/llm-d ``guides/workload-autoscaling/README.hpa-epp.md``: the guide's External rule selects the queue by
  ``inference_pool`` and maps the series' ``namespace`` label (the scrape target's) to namespaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from adapter.rules.config import RulesConfig, parse_document
from adapter.rules.resources import BUILTIN, ResourceTable

__all__ = ["GATEWAY_METRICS", "GATEWAY_PRESET", "INFERENCE_POOL_GROUPS", "IN_NAMESPACE", "NAMESPACE_ONLY", "EppMetric",
           "gateway_preset", "gateway_rules", "gateway_yaml", "preset_rule"]

GATEWAY_PRESET = "inference-gateway"
INFERENCE_POOL_GROUPS = ("inference.networking.k8s.io", "inference.networking.x-k8s.io")
"""The InferencePool's API groups: v1 first, then the v1alpha2 group it moved from."""

READY = ("llm_d_epp_ready_endpoints", "inference_pool_ready_pods")
DISPATCH_CYCLES = ("llm_d_epp_flow_control_dispatch_cycle_duration_seconds_count",
                   "inference_extension_flow_control_dispatch_cycle_duration_seconds_count")
SERIES_QUERY = f'{{__name__=~"{"|".join(READY)}",name!="",namespace!=""}}'
"""What every rule discovers from: one series per pool and EPP replica, from start-up on."""

_NS = '<<index .LabelValuesByName "namespace">>'
# External: the pool named by the selector's inference_pool value (matchLabels or In), as the pool gauges label it.
_SELECTED_POOLS = f'name=~"<<index .LabelValuesByName "inference_pool">>",namespace=~"{_NS}"'
IN_NAMESPACE = f'namespace=~"{_NS}"'
"""The request's namespace: a series joined with ``on (...)`` needs it in its own selector (Prometheus carries no
matcher across a join)."""
NAMESPACE_ONLY = "{overrides: {namespace: {resource: namespace}}}"
"""An External rule's resources: the series' ``namespace`` label is the request's namespace."""
_PER_POOL = "max by (namespace, name)"  # EPP replicas report the same pool: one value per pool


@dataclass(frozen=True)
class EppMetric:
    """One EPP metric. ``names``: the current series name, then the previous one.

    ``flow``: a flow-control family, labelled ``inference_pool`` (one series per flow: queued requests add up
    over flows and EPP replicas); otherwise a pool gauge, labelled ``name``. ``pools``: how several selected pools
    combine (``sum``, ``avg``, ``max``). ``empty_is_zero``: a queue, 0 when nothing is queued. ``while_ready``: a pool
    average, answered only while the pool has ready endpoints.
    """

    names: tuple[str, str]
    flow: bool
    pools: str
    empty_is_zero: bool = False
    while_ready: bool = False

    def external_query(self) -> str:
        if self.flow:
            series = _either(self.names, "<<.LabelMatchers>>")
            if not self.empty_is_zero:
                return f"{self.pools}({series})"
            return f"sum({series}) or 0 * count({_flow_control_on(_either(READY, _SELECTED_POOLS))})"
        value = f"{self.pools}({_PER_POOL} ({_either(self.names, _SELECTED_POOLS)}))"
        if not self.while_ready:
            return value
        return f"{value} and on () (sum({_PER_POOL} ({_either(READY, _SELECTED_POOLS)})) > 0)"

    def object_query(self) -> str:
        ready = _either(READY, "<<.LabelMatchers>>")
        if self.flow:
            # The flows as the pool gauges name pools, kept for the objects asked (a pool and its namespace).
            flows = (f'label_replace({_either(self.names, IN_NAMESPACE)}, '
                     '"name", "$1", "inference_pool", "(.+)")')
            value = f"{self.pools} by (<<.GroupBy>>) ({flows} and on (namespace, name) {ready})"
            if not self.empty_is_zero:
                return value
            return f"{value} or 0 * count by (<<.GroupBy>>) ({_flow_control_on(ready)})"
        value = f"{self.pools} by (<<.GroupBy>>) ({_PER_POOL} ({_either(self.names, '<<.LabelMatchers>>')}))"
        if not self.while_ready:
            return value
        return f"{value} and on (<<.GroupBy>>) (sum by (<<.GroupBy>>) ({_PER_POOL} ({ready})) > 0)"


GATEWAY_METRICS: tuple[EppMetric, ...] = (
    EppMetric(("llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size"), True, "sum",
              empty_is_zero=True),
    EppMetric(("llm_d_epp_flow_control_queue_bytes", "inference_extension_flow_control_queue_bytes"), True, "sum",
              empty_is_zero=True),
    EppMetric(("llm_d_epp_flow_control_pool_saturation", "inference_extension_flow_control_pool_saturation"), True,
              "max"),
    EppMetric(("llm_d_epp_average_queue_size", "inference_pool_average_queue_size"), False, "avg", while_ready=True),
    EppMetric(("llm_d_epp_average_kv_cache_utilization", "inference_pool_average_kv_cache_utilization"), False,
              "avg", while_ready=True),
    EppMetric(("llm_d_epp_average_running_requests", "inference_pool_average_running_requests"), False, "avg",
              while_ready=True),
    EppMetric(READY, False, "sum"),
)
"""What each metric is and which HPA target suits it: docs/rules.md ("Inference-gateway presets")."""


def _either(names: tuple[str, ...], matchers: str) -> str:
    """The current series, or the previous one where no current series has the same labels (the EPP exports both
    for a while: set operators match label sets without the metric name)."""
    selector = f"{{{matchers}}}" if matchers else ""
    return "(" + " or ".join(f"{name}{selector}" for name in names) + ")"


def _flow_control_on(pools: str) -> str:
    """``pools`` (ready-gauge series) whose EPP target also exports flow control's dispatch cycles."""
    return f"{pools} and on (job, instance) {_either(DISPATCH_CYCLES, '')}"


def preset_rule(api_name: str, resources: str, query: str, series: str = SERIES_QUERY) -> str:
    """One rule as YAML text, in the flow style of the other presets (strings single-quoted; none holds one),
    discovered from ``series`` (the capacity-headroom preset passes its own)."""
    assert "'" not in query + api_name + series
    return (f"- seriesQuery: '{series}'\n  resources: {resources}\n  name: {{as: {api_name}}}\n"
            f"  metricsQuery: '{query}'\n")


def gateway_rules() -> tuple[list[str], list[str]]:
    """(``rules``, ``externalRules``) as YAML text: every API name, on each InferencePool group and External."""
    rules, external = [], []
    for group in INFERENCE_POOL_GROUPS:
        resources = (f"{{overrides: {{namespace: {{resource: namespace}}, "
                     f"name: {{group: {group}, resource: inferencepools}}}}}}")
        rules += [preset_rule(api, resources, m.object_query()) for m in GATEWAY_METRICS for api in m.names]
    external += [preset_rule(api, NAMESPACE_ONLY, m.external_query()) for m in GATEWAY_METRICS for api in m.names]
    return rules, external


def gateway_yaml() -> str:
    """The preset as a rules file (prometheus-adapter's format)."""
    rules, external = gateway_rules()
    return (f"# Built-in rules for the inference gateway's endpoint picker ({GATEWAY_PRESET}).\n"
            "rules:\n" + "".join(rules) + "externalRules:\n" + "".join(external))


def gateway_preset(table: ResourceTable = BUILTIN) -> RulesConfig:
    """The preset, parsed with the same loader as a rules file (source name ``inference-gateway``), once per
    table."""
    return _parsed(table)


@cache
def _parsed(table: ResourceTable) -> RulesConfig:
    return parse_document(gateway_yaml(), GATEWAY_PRESET, table)
