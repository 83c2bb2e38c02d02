"""Built-in rules for headroom that follows demand: ``include: [capacity-headroom]``.

A new GPU replica waits minutes for a node (launch, registration, driver and device plugin), its image and its
model. Placeholder pods hold spare GPUs so that a replica starts at once; sized by hand they cost GPUs all day. This
preset serves one metric that sizes them from demand, ``inference_queue_growth_rate``: how fast what waits for the
inference servers grows, in requests per second, from ``deriv`` (the least-squares slope) of the queue over
``window``, never below 0. A flat or falling queue reads 0, so headroom goes to zero with the load; only a workload
whose queue nobody reports has no value.

An HPA on the placeholder Deployment with ``target: {type: AverageValue, averageValue: Q / T}`` (``Q``: the
workload HPA's queue target per replica, ``T``: the expected time to capacity in seconds) asks for
``growth * T / Q`` placeholders: the replicas' worth of queue that will have built up one time to capacity from now,
which is what the workload's HPA will ask for then (docs/capacity.md). The threshold ``Q / T`` is small (5 requests
over 180 s: 0.03 requests/s per second), so the placeholders are asked for while the queue is still far below the
workload's own target.

Two ways, like the presets it builds on:

* External, selected with ``inference_pool: <pool>``: the inference gateway's flow-control queue (both metric-name
  generations, an empty queue read as 0, exactly as the ``inference-gateway`` preset serves
  ``llm_d_epp_flow_control_queue_size``), discovered from the flow-control pool-saturation gauge, which the
  endpoint picker exports for every pool it runs flow control for, labelled ``inference_pool`` (Gateway API
  Inference Extension v1.5.0 and llm-d-router; see adapter/rules/gateway.py). The slope reaches back over its window,
  further than the adapter's sample-age limit, so the adapter checks that the pool's series are recent (freshness,
  adapter/rules/freshness.py) on the discovered series with the request's ``inference_pool``: a series that carries
  that label is needed, and the saturation gauge is one that is there whether or not anything waits (the adapter
  checks the first discovered name, the previous generation's, which llm-d-router still exports beside its own);
* Object on ``deployments.apps``: the requests waiting in the inference servers of the Deployment's pods (vLLM,
  Triton, TGI, SGLang: each server's waiting gauge, as the inference presets name them), added up over the pods
  through the pod -> Deployment recording rule the inference presets use (kube-state-metrics' owner series).

Queue series come and go (a new pod, a drained flow), so the queue is first added up at every ``step`` of a
subquery and the slope taken over that: a series that appears or vanishes does not read as a jump of its own.
"""

from __future__ import annotations

from functools import cache

from adapter.rules.config import RulesConfig, parse_document
from adapter.rules.gateway import GATEWAY_METRICS
from adapter.rules.inference import POD_DEPLOYMENT_RULE
from adapter.rules.resources import BUILTIN, ResourceTable

__all__ = ["CAPACITY_PRESET", "GROWTH_METRIC", "POOL_SERIES", "SERVER_QUEUES", "STEP", "WINDOW", "capacity_preset",
           "capacity_rules", "capacity_yaml", "gateway_queue_query", "server_queue_query"]

CAPACITY_PRESET = "capacity-headroom"
GROWTH_METRIC = "inference_queue_growth_rate"
WINDOW = "2m"
"""The slope's window: four samples at a 30 s scrape interval, eight at 15 s; short next to a GPU node's minutes."""
STEP = "15s"
"""The subquery's resolution: the queue is added up every ``STEP`` over the window."""

SERVER_QUEUES: tuple[str, ...] = ("vllm:num_requests_waiting", "nv_inference_pending_request_count",
                                  "tgi_queue_size", "sglang:num_queue_reqs", "sglang:num_requests_waiting")
"""Requests waiting in an inference server, as the inference presets name them (adapter/rules/inference.py: vLLM,
Triton, TGI, SGLang's current and first names). A pod reports one server's, so a pod's queue is the largest of its
names' sums (SGLang under both names is not counted twice)."""

_DEPLOYMENT_RESOURCES = ("{overrides: {namespace: {resource: namespace}, "
                         "deployment: {group: apps, resource: deployment}}}")
_NAMESPACE_ONLY = "{overrides: {namespace: {resource: namespace}}}"
_QUEUE_SIZE, _SATURATION = GATEWAY_METRICS[0], GATEWAY_METRICS[2]
assert _QUEUE_SIZE.names[0] == "llm_d_epp_flow_control_queue_size" and _QUEUE_SIZE.empty_is_zero
assert _SATURATION.names[0] == "llm_d_epp_flow_control_pool_saturation" and _SATURATION.flow
POOL_SERIES = f'{{__name__=~"{"|".join(_SATURATION.names)}",inference_pool!="",namespace!=""}}'
"""What the External rule discovers from: one series per pool under flow control (and EPP replica)."""


def _growth(queue: str, window: str, step: str) -> str:
    """The slope of ``queue`` (an expression) over ``window``, at least 0."""
    return f"clamp_min(deriv(({queue})[{window}:{step}]), 0)"


def gateway_queue_query() -> str:
    """Requests held by the selected pools' endpoint pickers (0 when flow control runs and nothing waits)."""
    return _QUEUE_SIZE.external_query()


def server_queue_query() -> str:
    """Requests waiting in the servers of the Deployments the matchers name, one value per Deployment."""
    names = "|".join(SERVER_QUEUES)
    per_pod = (f'max by (namespace, pod) (sum by (namespace, pod, __name__) '
               f'({{__name__=~"{names}",namespace!="",pod!=""}}))')
    return (f"sum by (<<.GroupBy>>) ({per_pod} * on (namespace, pod) group_left (deployment) "
            f"{POD_DEPLOYMENT_RULE}{{<<.LabelMatchers>>}})")


def _rule(series: str, resources: str, query: str) -> str:
    """One rule as YAML text, in the flow style of the other presets (strings single-quoted; none holds one)."""
    assert "'" not in query + series
    return (f"- seriesQuery: '{series}'\n  resources: {resources}\n  name: {{as: {GROWTH_METRIC}}}\n"
            f"  metricsQuery: '{query}'\n")


def capacity_rules(window: str = WINDOW, step: str = STEP) -> tuple[list[str], list[str]]:
    """(``rules``, ``externalRules``) as YAML text, the slope taken over ``window`` at ``step``."""
    deployments = f'{POD_DEPLOYMENT_RULE}{{namespace!="",deployment!=""}}'
    rules = [_rule(deployments, _DEPLOYMENT_RESOURCES, _growth(server_queue_query(), window, step))]
    external = [_rule(POOL_SERIES, _NAMESPACE_ONLY, _growth(gateway_queue_query(), window, step))]
    return rules, external


def capacity_yaml(window: str = WINDOW, step: str = STEP) -> str:
    """The preset as a rules file (prometheus-adapter's format); another ``window``/``step`` for a compressed
    clock (the demo's)."""
    rules, external = capacity_rules(window, step)
    return (f"# Built-in rules for headroom that follows demand ({CAPACITY_PRESET}): {GROWTH_METRIC}, "
            f"requests/s over {window}.\nrules:\n" + "".join(rules) + "externalRules:\n" + "".join(external))


def capacity_preset(table: ResourceTable = BUILTIN) -> RulesConfig:
    """The preset, parsed with the same loader as a rules file (source name ``capacity-headroom``), once per
    table."""
    return _parsed(table)


@cache
def _parsed(table: ResourceTable) -> RulesConfig:
    return parse_document(capacity_yaml(), CAPACITY_PRESET, table)
