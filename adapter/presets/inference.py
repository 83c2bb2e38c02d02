"""Built-in rules for inference servers' own metrics (vLLM, Triton, TGI, SGLang), in prometheus-adapter's format.

GPU utilisation saturates at 100 %, so an HPA on it under-scales when load jumps; the servers' queue, batch and
KV-cache gauges do not saturate. A rules file pulls these in by name (``include: [vllm]``); none is served by
default. Each metric is served two ways:

* per pod (HPA ``type: Pods``, and ``namespaces`` like every pod rule): the pod's series added up (queues,
  batches, rates) or averaged (usage ratios) over its engines, models or ranks. The series carry the pod's own
  ``namespace``/``pod`` (the target labels a PodMonitor or ServiceMonitor adds), since the server is scraped
  directly;
* per Deployment (HPA ``type: Object`` on ``deployments.apps``): from a recording rule that joins the pods to
  their Deployment through kube-state-metrics' owner series (``recording_rules``; the chart installs them with
  ``adapter.rules.inferencePresets``). A Deployment's queue is the sum over its pods, so give that metric an
  ``AverageValue`` target; a ratio or a latency is deployment-wide, so give it a ``Value`` target.

Where a server renamed a metric, the API serves the current and the previous name, each answered from either
series (its own first), so an HPA written for one server version keeps working across an upgrade.

Names, types and labels come from each server's source (read, not assumed):

* vLLM: ``vllm/engine/metrics.py`` (the V0 engine; label ``model_name``; ``vllm:gpu_cache_usage_perc``) and
  ``vllm/v1/metrics/loggers.py`` (the V1 engine; labels ``model_name``, ``engine``; ``vllm:kv_cache_usage_perc``
  since 0.9, where ``vllm:gpu_cache_usage_perc`` is kept as deprecated and marked to be hidden later). The
  time-to-first-token histogram is ``vllm:time_to_first_token_seconds`` in both.
* Triton: ``src/metrics.cc`` of triton-inference-server/core (``nv_inference_pending_request_count``, a gauge
  first in its r23.09 branch; ``nv_inference_queue_duration_us``, a counter of microseconds without a ``_total`` suffix;
  labels ``model``, ``version``, and ``namespace`` when model namespacing is on) and the server's
  ``docs/user_guide/metrics.md``.
* TGI: ``router/src/server.rs`` and ``backends/v3/src/{queue,backend}.rs`` of text-generation-inference
  (``tgi_queue_size``, ``tgi_batch_current_size``: gauges without labels, the same names since the router's
  first metrics in 2023).
* SGLang: ``python/sglang/srt/metrics/collector.py`` (``sglang:num_queue_reqs``, ``sglang:num_running_reqs``,
  ``sglang:token_usage``; labels ``model_name`` plus ``engine_type``, ``tp_rank``, ``pp_rank`` in recent
  releases) and its first collector, ``python/sglang/srt/metrics/metrics_collector.py``
  (``sglang:num_requests_waiting``, ``sglang:num_requests_running``; label ``name``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from adapter.rules.config import RulesConfig, parse_document
from adapter.rules.resources import BUILTIN, ResourceTable

__all__ = ["DEPLOYMENT_MATCHERS", "DEPLOYMENT_RESOURCES", "INFERENCE_PRESETS", "POD_DEPLOYMENT_EXPR",
           "POD_DEPLOYMENT_RULE", "POD_MATCHERS", "RATE_WINDOW", "Gauge", "Preset", "Quantile", "Rate",
           "inference_preset", "preset_rules", "preset_yaml", "recording_rules"]

RATE_WINDOW = "2m"
"""Long enough for two samples at the common 30 s / 1 m scrape intervals."""

POD_DEPLOYMENT_RULE = "namespace_deployment_pod:kube_pod_owner:relabel"
"""Recorded series mapping each pod to its Deployment (value 1; labels ``namespace``, ``pod``, ``deployment``)."""
DEPLOYMENT_MATCHERS = 'namespace!="",deployment!=""'
"""The matchers of a series per Deployment (the per-Deployment rules discover from these)."""

POD_DEPLOYMENT_EXPR = (
    'max by (namespace, pod, deployment) ('
    'label_replace(kube_pod_owner{owner_kind="ReplicaSet"}, "replicaset", "$1", "owner_name", "(.*)") '
    '* on (namespace, replicaset) group_left (deployment) max by (namespace, replicaset, deployment) ('
    'label_replace(kube_replicaset_owner{owner_kind="Deployment"}, "deployment", "$1", "owner_name", "(.*)")))')
"""Each pod of a Deployment, value 1 (labels ``namespace``, ``pod``, ``deployment``): kube-state-metrics' pod ->
ReplicaSet -> Deployment owner series, what :data:`POD_DEPLOYMENT_RULE` records."""
POD_MATCHERS = 'namespace!="",pod!=""'
"""The matchers of a series that belongs to a pod."""
_JOIN = f"* on (namespace, pod) group_left (deployment) {POD_DEPLOYMENT_RULE}"
_POD_RESOURCES = "{overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}"
DEPLOYMENT_RESOURCES = ("{overrides: {namespace: {resource: namespace}, "
                        "deployment: {group: apps, resource: deployment}}}")
"""A rule's resources for a series per Deployment (the pod -> Deployment join's ``deployment`` label)."""


@dataclass(frozen=True)
class Gauge:
    """A gauge, added up (``sum``) or averaged (``avg``) over a pod's series. ``names``: the current name, then
    the names earlier releases used for it."""

    names: tuple[str, ...]
    aggregation: str = "sum"

    @property
    def api_names(self) -> tuple[str, ...]:
        return self.names

    @property
    def recorded(self) -> str:
        return f"namespace_deployment:{self.names[0]}:{self.aggregation}"

    def pod_rules(self) -> list[str]:
        query = f"{self.aggregation} by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>}})"
        return [_rule(series, api, POD_MATCHERS, _POD_RESOURCES, query)
                for api in self.names for series in (api, *(n for n in self.names if n != api))]

    def record_expr(self) -> str:
        either = " or ".join(f"{name}{{{POD_MATCHERS}}}" for name in self.names)
        either = f"({either})" if len(self.names) > 1 else either
        return f"{self.aggregation} by (namespace, deployment) ({either} {_JOIN})"


class _Renamed:
    """A metric served under one API name of its own (``api_name``), not its series' name."""

    api_name: str

    @property
    def api_names(self) -> tuple[str, ...]:
        return (self.api_name,)


@dataclass(frozen=True)
class Rate(_Renamed):
    """A counter served as its per-second rate, added up over a pod's series."""

    counter: str
    api_name: str

    @property
    def recorded(self) -> str:
        return f"namespace_deployment:{self.counter}:rate{RATE_WINDOW}"

    def pod_rules(self) -> list[str]:
        query = f"sum by (<<.GroupBy>>) (rate(<<.Series>>{{<<.LabelMatchers>>}}[{RATE_WINDOW}]))"
        return [_rule(self.counter, self.api_name, POD_MATCHERS, _POD_RESOURCES, query)]

    def record_expr(self) -> str:
        return f"sum by (namespace, deployment) (rate({self.counter}{{{POD_MATCHERS}}}[{RATE_WINDOW}]) {_JOIN})"


@dataclass(frozen=True)
class Quantile(_Renamed):
    """A histogram's quantile over the rate window. With no observation in the window the quantile is undefined
    (NaN, which the adapter never serves); the value is then 0, read from the ``+Inf`` bucket's rate, so an idle
    server can scale down. A server with no series at all still gets no value."""

    histogram: str
    quantile: float
    api_name: str

    @property
    def recorded(self) -> str:
        return f"namespace_deployment:{self.histogram}:p{round(self.quantile * 100)}"

    def pod_rules(self) -> list[str]:
        series = "<<.Series>>{<<.LabelMatchers>>}"
        inf = '<<.Series>>{<<.LabelMatchers>>,le="+Inf"}'
        query = (f"histogram_quantile({self.quantile:g}, sum by (<<.GroupBy>>, le) (rate({series}[{RATE_WINDOW}]))) "
                 f">= 0 or sum by (<<.GroupBy>>) (rate({inf}[{RATE_WINDOW}]))")
        return [_rule(f"{self.histogram}_bucket", self.api_name, POD_MATCHERS, _POD_RESOURCES, query)]

    def record_expr(self) -> str:
        buckets = f"{self.histogram}_bucket"
        return (f"histogram_quantile({self.quantile:g}, sum by (namespace, deployment, le) "
                f"(rate({buckets}{{{POD_MATCHERS}}}[{RATE_WINDOW}]) {_JOIN})) >= 0 "
                f"or sum by (namespace, deployment) "
                f'(rate({buckets}{{{POD_MATCHERS},le="+Inf"}}[{RATE_WINDOW}]) {_JOIN})')


Metric = Gauge | Rate | Quantile


@dataclass(frozen=True)
class Preset:
    name: str
    server: str
    metrics: tuple[Metric, ...]


INFERENCE_PRESETS: Mapping[str, Preset] = {p.name: p for p in (
    Preset("vllm", "vLLM", (
        Gauge(("vllm:num_requests_waiting",)),
        Gauge(("vllm:num_requests_running",)),
        Gauge(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "avg"),
        Quantile("vllm:time_to_first_token_seconds", 0.95, "vllm:time_to_first_token_seconds_p95"),
    )),
    Preset("triton", "NVIDIA Triton Inference Server", (
        Gauge(("nv_inference_pending_request_count",)),
        Rate("nv_inference_queue_duration_us", "nv_inference_queue_duration_us_per_second"),
    )),
    Preset("tgi", "Hugging Face Text Generation Inference", (
        Gauge(("tgi_queue_size",)),
        Gauge(("tgi_batch_current_size",)),
    )),
    Preset("sglang", "SGLang", (
        Gauge(("sglang:num_queue_reqs", "sglang:num_requests_waiting")),
        Gauge(("sglang:num_running_reqs", "sglang:num_requests_running")),
        Gauge(("sglang:token_usage",), "avg"),
    )),
)}


def _rule(series: str, api_name: str, matchers: str, resources: str, query: str) -> str:
    """One rule as YAML text, in the flow style of the GPU presets (strings single-quoted; none holds a quote)."""
    lines = [f"- seriesQuery: '{series}{{{matchers}}}'", f"  resources: {resources}"]
    if api_name != series:
        lines.append(f"  name: {{matches: '^{series}$', as: '{api_name}'}}")
    lines.append(f"  metricsQuery: '{query}'")
    return "\n".join(lines) + "\n"


def preset_rules(preset: Preset) -> list[str]:
    """The preset's adapter rules as YAML text: every per-pod rule, then every per-Deployment rule."""
    rules = [rule for metric in preset.metrics for rule in metric.pod_rules()]
    for metric in preset.metrics:
        for api in metric.api_names:
            rules.append(_rule(metric.recorded, api, DEPLOYMENT_MATCHERS, DEPLOYMENT_RESOURCES,
                               "max by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})"))
    return rules


def recording_rules(names: tuple[str, ...] | list[str]) -> list[dict[str, str]]:
    """Prometheus recording rules for the per-Deployment metrics of the named presets, the pod-to-Deployment
    mapping first (rules of a group are evaluated in order, so the others see it in the same evaluation)."""
    rules = [{"record": POD_DEPLOYMENT_RULE, "expr": POD_DEPLOYMENT_EXPR}]
    for name in names:
        rules += [{"record": m.recorded, "expr": m.record_expr()} for m in INFERENCE_PRESETS[name].metrics]
    return rules


def preset_yaml(preset: Preset) -> str:
    """The preset as a rules file (prometheus-adapter's format)."""
    return f"# Built-in rules for {preset.server} ({preset.name}).\nrules:\n" + "".join(preset_rules(preset))


def inference_preset(name: str, table: ResourceTable = BUILTIN) -> RulesConfig:
    """One preset, parsed with the same loader as a rules file (source name = the preset's name), once per table."""
    return _parsed(name, table)


@cache
def _parsed(name: str, table: ResourceTable) -> RulesConfig:
    return parse_document(preset_yaml(INFERENCE_PRESETS[name]), name, table)
