"""Built-in rules for headroom that follows demand: ``include: [capacity-headroom]``.

A new GPU replica waits minutes for a node (launch, registration, driver and device plugin), its image and its
model. Placeholder pods hold spare GPUs so that a replica starts at once; sized by hand they cost GPUs all day. This
preset serves two metrics that size them from demand, each the least-squares slope (``deriv``) of a demand signal
over ``window``, never below 0, so headroom goes to zero when load is flat or falling:

* ``inference_queue_growth_rate``: how fast what waits for the inference servers grows, in requests per second. A
  queue forms only once the replicas are saturated, at about the moment the workload's own HPA (on utilisation or on
  the queue) asks for more replicas.
* ``inference_request_rate_growth``: how fast the rate of arriving requests grows, in requests per second per
  second. It rises with the load itself, while the replicas still have room and before any queue forms, so it can
  lead the workload's HPA during a ramp. What a flat load's random arrivals explain is left out
  (:func:`_rate_growth`), so an HPA that may scale to zero keeps no placeholder for a wobble.

An HPA on the placeholder Deployment with ``target: {type: AverageValue, averageValue: X / T}`` (``T``: the expected
time to capacity in seconds; ``X``: the workload HPA's queue target per replica for the queue metric, or the
requests per second one replica serves at its target for the request-rate metric) asks for ``growth * T / X``
placeholders: the replicas' worth of demand that will have built up one time to capacity from now
(docs/capacity.md).

Each is served two ways, like the presets it builds on:

* External, selected with ``inference_pool: <pool>``: the inference gateway's endpoint picker (EPP). The queue is its
  flow-control queue (both metric-name generations, an empty queue read as 0, exactly as the ``inference-gateway``
  preset serves ``llm_d_epp_flow_control_queue_size``); the request rate is its request counter
  (``llm_d_epp_request_total``, or ``inference_objective_request_total`` from Gateway API Inference Extension v1.1.0;
  labelled by model, not by pool, so it is taken from the EPP pods that report the pool) plus the growth of its
  flow-control queue, since the EPP counts a request once flow control has dispatched it (``pkg/epp/handlers/
  server.go``, ``RecordRequestCounter`` after ``HandleRequest``). Both rules are discovered from the flow-control
  pool-saturation gauge, which the endpoint picker exports for every pool it runs flow control for, labelled
  ``inference_pool`` (Gateway API Inference Extension v1.5.0 and llm-d-router; see adapter/presets/gateway.py). The
  slope reaches back over its window, further than the adapter's sample-age limit, so the adapter checks that the
  pool's series are recent (freshness, adapter/rules/freshness.py) on the discovered series with the request's
  ``inference_pool``: a series that carries that label is needed, and the saturation gauge is one that is there
  whether or not anything waits (the adapter checks the first discovered name, the previous generation's, which
  llm-d-router still exports beside its own);
* Object on ``deployments.apps``: the inference servers of the Deployment's pods (vLLM, Triton, TGI, SGLang), read
  in the request's namespace only and added up over the pods through the pod -> Deployment recording rule the
  inference presets use (kube-state-metrics' owner series). The queue is each server's waiting gauge, as the
  inference presets name them; the arrival rate is each server's request counter (:data:`SERVER_ARRIVALS`).

Queue series come and go (a new pod, a drained flow), so the demand is first added up at every ``step`` of a
subquery and the slope taken over that: a series that appears or vanishes does not read as a jump of its own.

Each growth is also served multiplied by the workload's provisioning time ``T`` as Prometheus records it
(:data:`~adapter.presets.capacity_history.HEADROOM_PROVISIONING`: the chart's ``headroom.auto`` records it from the
workload's measured history, its ``provisioningTime`` while there is none, or that value fixed):
``inference_request_rate_ahead`` (requests/s: how much the arrival rate will have grown one provisioning time from
now) and ``inference_queue_ahead`` (requests: how much more will be waiting by then). An HPA then targets the
demand one replica stands for (``averageValue: X``), and ``T`` can change with the measured history without a
new HPA target. Where no provisioning time is recorded for the workload they have no value, never a guessed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from adapter.presets.capacity_history import HEADROOM_PROVISIONING
from adapter.presets.gateway import GATEWAY_METRICS, IN_NAMESPACE, NAMESPACE_ONLY, preset_rule
from adapter.presets.inference import (
    DEPLOYMENT_MATCHERS,
    DEPLOYMENT_RESOURCES,
    POD_DEPLOYMENT_RULE,
    RATE_WINDOW,
)
from adapter.rules.config import RulesConfig, parse_document
from adapter.rules.resources import BUILTIN, ResourceTable
from clikit.durations import parse_prometheus_duration

__all__ = ["CAPACITY_PRESET", "EPP_REQUESTS", "GROWTH_METRIC", "NOISE_SIGMAS", "POOL_SERIES", "QUEUE_AHEAD_METRIC",
           "RATE_WINDOW", "REQUEST_AHEAD_METRIC", "REQUEST_GROWTH_METRIC", "SERVER_ARRIVALS", "SERVER_QUEUES", "STEP",
           "WINDOW", "ServerArrivals",
           "capacity_preset", "capacity_rules", "capacity_yaml", "gateway_arrivals_query", "gateway_queue_query",
           "server_arrivals_query", "server_queue_query"]

CAPACITY_PRESET = "capacity-headroom"
GROWTH_METRIC = "inference_queue_growth_rate"
"""What waits, predicted to grow per second: requests/s."""
REQUEST_GROWTH_METRIC = "inference_request_rate_growth"
"""The arrival rate's growth: requests/s per second."""
QUEUE_AHEAD_METRIC = "inference_queue_ahead"
"""What waits, grown over one provisioning time: requests."""
REQUEST_AHEAD_METRIC = "inference_request_rate_ahead"
"""The arrival rate, grown over one provisioning time: requests/s."""
WINDOW = "2m"
"""The slope's window: four samples at a 30 s scrape interval, eight at 15 s; short next to a GPU node's minutes."""
STEP = "15s"
"""The subquery's resolution: the demand is added up every ``STEP`` over the window."""

NOISE_SIGMAS = 2
"""How many standard deviations of a flat Poisson load's rate slope the request-rate growth leaves out. How many of
a flat load's reads still come out above 0 depends on the scrape interval: through Prometheus, about 4 % with a 15 s
scrape and 6 % with a 30 s one (``rate`` then extrapolates from fewer samples), at 8 to 100 requests/s, against half
of them without the margin (``python bench/headroom_noise.py``)."""

SERVER_QUEUES: tuple[str, ...] = ("vllm:num_requests_waiting", "nv_inference_pending_request_count",
                                  "tgi_queue_size", "sglang:num_queue_reqs", "sglang:num_requests_waiting")
"""Requests waiting in an inference server, as the inference presets name them (adapter/presets/inference.py: vLLM,
Triton, TGI, SGLang's current and first names). A pod reports one server's, so a pod's queue is the largest of its
names' sums (SGLang under both names is not counted twice)."""


@dataclass(frozen=True)
class ServerArrivals:
    """How one inference server's requests arrive: ``counters`` count requests (added up), and where they count a
    request only when it finishes, ``in_flight`` are the gauges of the requests it holds meanwhile, whose growth
    adds the requests that arrived and have not finished (arrivals = departures + change of what is inside: while a
    backlog drains, departures exceed arrivals by what it loses). A server exports each of these from start-up (zero
    included), so each term is there whenever the server is."""

    server: str
    counters: tuple[str, ...]
    in_flight: tuple[str, ...] = ()


SERVER_ARRIVALS: tuple[ServerArrivals, ...] = (
    # vllm/v1/metrics/loggers.py: vllm:request_success_total{finished_reason=stop|length|abort} per finished request
    # (V1 engine; labels model_name, engine); the running and waiting gauges hold the rest.
    ServerArrivals("vLLM", ("vllm:request_success_total",),
                   ("vllm:num_requests_running", "vllm:num_requests_waiting")),
    # router/src/server.rs of text-generation-inference: tgi_request_count, incremented as each request arrives.
    ServerArrivals("TGI", ("tgi_request_count",)),
    # python/sglang/srt/metrics/collector.py: sglang:num_requests_total, counted per finished request.
    ServerArrivals("SGLang", ("sglang:num_requests_total",), ("sglang:num_running_reqs", "sglang:num_queue_reqs")),
    # triton-inference-server/core src/metrics.cc: nv_inference_request_success and _failure (counters without
    # a _total suffix), per finished request; the pending gauge holds the queued ones.
    ServerArrivals("Triton", ("nv_inference_request_success", "nv_inference_request_failure"),
                   ("nv_inference_pending_request_count",)),
)
"""The arrival rate of each server family the inference presets know; a pod reports one of them."""

EPP_REQUESTS: tuple[str, str] = ("llm_d_epp_request_total", "inference_objective_request_total")
"""The endpoint picker's request counter: llm-d-router's name (``pkg/epp/metrics/llm_d_router_metrics.go``), then
Gateway API Inference Extension's (``pkg/epp/metrics/metrics.go``, v1.1.0 on). llm-d-router exports both, so the
first that a pod reports is taken."""

_QUEUE_SIZE, _SATURATION = (next(m for m in GATEWAY_METRICS if m.names[0] == name) for name in (
    "llm_d_epp_flow_control_queue_size", "llm_d_epp_flow_control_pool_saturation"))
_PODS = f'{IN_NAMESPACE},pod!=""'
"""A server's series: the request's namespace only. The join with the owner series narrows to the Deployment, but
Prometheus carries no matcher across ``on (...)``: without this every pod of every namespace would be read."""
POOL_SERIES = f'{{__name__=~"{"|".join(_SATURATION.names)}",inference_pool!="",namespace!=""}}'
"""What the External rules discover from: one series per pool under flow control (and EPP replica)."""


def _growth(demand: str, window: str, step: str) -> str:
    """The slope of ``demand`` (an expression) over ``window``, at least 0."""
    return f"clamp_min(deriv(({demand})[{window}:{step}]), 0)"


def _rate_growth(arrivals: str, window: str, step: str, count_window: str) -> str:
    """The slope of ``arrivals`` (requests/s) over ``window`` beyond what chance explains at a flat load, at least 0.

    Requests of a flat load arrive at random: a Poisson count over ``count_window`` (C s) has variance r C, so two
    rates measured a slope window (W s) apart differ by sqrt(2 r / C) (one standard deviation) and their slope by
    that over W. :data:`NOISE_SIGMAS` of those are taken off: what is left is growth, and a flat load reads 0, so an
    HPA that may scale to zero (which sizes from 0 as ceil(value / target), with no tolerance) does not buy a GPU
    node for a wobble.

    ``arrivals`` is written out twice, inside the subquery and in the noise term, so Prometheus evaluates it twice
    (about 10 % more work for the rule): PromQL has no common subexpressions or variables, and the noise term needs
    the current rate, a value the subquery's ``deriv`` does not expose. Only a recording rule per Deployment for the
    arrivals (as ``inference.recording_rules`` has for the inference presets) would share it, and it would also
    replace the subquery; a design change left for later."""
    c, w = parse_prometheus_duration(count_window), parse_prometheus_duration(window)
    noise = f"{NOISE_SIGMAS:g} * sqrt(2 * clamp_min({arrivals}, 0) / {c:g}) / {w:g}"
    return f"clamp_min(deriv(({arrivals})[{window}:{step}]) - {noise}, 0)"


def _names(names: tuple[str, ...], matchers: str) -> str:
    return f'{{__name__=~"{"|".join(names)}",{matchers}}}'


def _per_deployment(per_pod: str, window: str | None = None) -> str:
    """A per-pod expression (labels ``namespace``, ``pod``) added up per Deployment the matchers name. With
    ``window``, a pod keeps its Deployment for that long after its owner series ends (``last_over_time``): a deleted
    pod's counter still counts in a ``rate`` over the window, so a scale-down moves requests from the pods that went
    to those that stay without reading as a drop of arrivals and then a rise."""
    owners = f"{POD_DEPLOYMENT_RULE}{{<<.LabelMatchers>>}}"
    if window is not None:
        owners = f"last_over_time({owners}[{window}])"
    return f"sum by (<<.GroupBy>>) ({per_pod} * on (namespace, pod) group_left (deployment) {owners})"


def gateway_queue_query() -> str:
    """Requests held by the selected pools' endpoint pickers (0 when flow control runs and nothing waits)."""
    return _QUEUE_SIZE.external_query()


def gateway_arrivals_query(rate_window: str = RATE_WINDOW) -> str:
    """Requests per second arriving at the selected pools' endpoint pickers: the request counters of the EPP pods
    that report the pool, plus the growth of their flow-control queues (not counted until dispatched); 0 for a pool
    under flow control that has had no request. Each name generation is read on its own (``rate`` and ``deriv`` drop
    the name, so two names in one selector would give series with the same labels), the current first."""
    per_pod = " or ".join(f"sum by (namespace, pod) (rate({name}{{{IN_NAMESPACE}}}[{rate_window}]))"
                          for name in EPP_REQUESTS)
    pool = _names(_SATURATION.names, "<<.LabelMatchers>>")
    dispatched = f"sum(({per_pod}) * on (namespace, pod) group by (namespace, pod) ({pool}))"
    waiting = " or ".join(_change(f"{name}{{<<.LabelMatchers>>}}", rate_window, "sum") for name in _QUEUE_SIZE.names)
    # A counter has no series before its first request: the pool's own gauge then says it is there, at 0.
    return f"({dispatched} or 0 * count({pool})) + ({waiting} or vector(0))"


def _change(gauge: str, window: str, by: str) -> str:
    """How much ``gauge`` (a selector) changed per second over ``window``, added up with ``by``: ``delta`` over the
    window divided by its length, as ``rate`` divides a counter's ``increase``, so that departures counted by a
    counter and the change of what is inside cover the same stretch (arrivals = departures + that change, exactly,
    also while a backlog drains)."""
    return f"{by} (delta({gauge}[{window}])) / {parse_prometheus_duration(window):g}"


def server_queue_query() -> str:
    """Requests waiting in the servers of the Deployments the matchers name, one value per Deployment (the servers'
    series read in the request's namespace only, as :func:`gateway_arrivals_query` reads the EPP's)."""
    per_pod = f"max by (namespace, pod) (sum by (namespace, pod, __name__) ({_names(SERVER_QUEUES, _PODS)}))"
    return _per_deployment(per_pod)


def server_arrivals_query(rate_window: str = RATE_WINDOW) -> str:
    """Requests per second arriving at the servers of the Deployments the matchers name, one value per Deployment.
    One term per series name (``rate`` and ``deriv`` drop the name: two names in one selector would give series
    with the same labels)."""
    families = []
    for server in SERVER_ARRIVALS:
        terms = [f"sum by (namespace, pod) (rate({name}{{{_PODS}}}[{rate_window}]))" for name in server.counters]
        terms += [_change(f"{name}{{{_PODS}}}", rate_window, "sum by (namespace, pod)") for name in server.in_flight]
        families.append(f"({' + '.join(terms)})")
    return _per_deployment(f"({' or '.join(families)})", rate_window)


def _ahead(growth: str, by: str) -> str:
    """``growth`` (per second) times the provisioning time recorded for the objects the matchers name, joined on
    ``by`` (the object's label, or nothing for an External metric): no recorded time, no value."""
    return f"{growth} * on ({by}) max by ({by}) ({HEADROOM_PROVISIONING}{{<<.LabelMatchers>>}})"


def capacity_rules(window: str = WINDOW, step: str = STEP, rate_window: str = RATE_WINDOW,
                   count_window: str | None = None) -> tuple[list[str], list[str]]:
    """(``rules``, ``externalRules``) as YAML text, the slopes taken over ``window`` at ``step`` and the request
    counters' rates over ``rate_window``; ``count_window`` (default ``rate_window``) is the real time those rates
    count requests over, for the noise margin (a compressed clock shortens the windows, not the counts). Each side
    serves the two growths, then the same times the provisioning time (``*_ahead``)."""
    count = count_window or rate_window
    deployments = f"{POD_DEPLOYMENT_RULE}{{{DEPLOYMENT_MATCHERS}}}"
    queue = _growth(server_queue_query(), window, step)
    arrivals = _rate_growth(server_arrivals_query(rate_window), window, step, count)
    rules = [preset_rule(name, DEPLOYMENT_RESOURCES, query, deployments) for name, query in (
        (GROWTH_METRIC, queue), (REQUEST_GROWTH_METRIC, arrivals),
        (QUEUE_AHEAD_METRIC, _ahead(queue, "<<.GroupBy>>")), (REQUEST_AHEAD_METRIC, _ahead(arrivals, "<<.GroupBy>>")))]
    queue = _growth(gateway_queue_query(), window, step)
    arrivals = _rate_growth(gateway_arrivals_query(rate_window), window, step, count)
    external = [preset_rule(name, NAMESPACE_ONLY, query, POOL_SERIES) for name, query in (
        (GROWTH_METRIC, queue), (REQUEST_GROWTH_METRIC, arrivals),
        (QUEUE_AHEAD_METRIC, _ahead(queue, "")), (REQUEST_AHEAD_METRIC, _ahead(arrivals, "")))]
    return rules, external


def capacity_yaml(window: str = WINDOW, step: str = STEP, rate_window: str = RATE_WINDOW,
                  count_window: str | None = None) -> str:
    """The preset as a rules file (prometheus-adapter's format); other windows for a compressed clock (the
    demo's)."""
    rules, external = capacity_rules(window, step, rate_window, count_window)
    return (f"# Built-in rules for headroom that follows demand ({CAPACITY_PRESET}): {GROWTH_METRIC} (requests/s) "
            f"and {REQUEST_GROWTH_METRIC} (requests/s per second), over {window}, and each times the recorded "
            f"provisioning time ({QUEUE_AHEAD_METRIC}, {REQUEST_AHEAD_METRIC}).\nrules:\n" + "".join(rules)
            + "externalRules:\n" + "".join(external))


@cache
def capacity_preset(table: ResourceTable = BUILTIN) -> RulesConfig:
    """The preset, parsed with the same loader as a rules file (source name ``capacity-headroom``), once per
    table."""
    return parse_document(capacity_yaml(), CAPACITY_PRESET, table)
