"""Inference-gateway presets (``include: [inference-gateway]``): they load as prometheus-adapter rules, discover
every metric from the endpoint picker's ready gauge, and serve External values (selected by ``inference_pool``)
and Object values on the InferencePool from a real Prometheus scraping EPP expositions of both metric-name
generations (``tests/data/gateway``); an empty queue reads 0, a pool nobody reports gets no value."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import yaml

from adapter.presets.gateway import (
    GATEWAY_METRICS,
    GATEWAY_PRESET,
    INFERENCE_POOL_GROUPS,
    SERIES_QUERY,
    gateway_preset,
    gateway_yaml,
)
from adapter.rules import GroupResource, MetricInfo, RulesError, build_catalogue
from adapter.rulesfile.loader import parse_rules
from loadtest.hpa.spec import milli
from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.test_inference_presets import samples
from tests.test_rules_presets import matching

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parent / "data" / "gateway"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
POOLS = [GroupResource(group, "inferencepools") for group in INFERENCE_POOL_GROUPS]
NAMESPACES = GroupResource("", "namespaces")
API_NAMES = [name for metric in GATEWAY_METRICS for name in metric.names]

# exposition -> the EPP pod it stands for (target labels a ServiceMonitor adds); the gemma EPP's text changes in a test.
TARGETS = {
    "llm-d-router-llama-0.prom": ("llm", "llama-epp-7c9d8-0"),
    "llm-d-router-llama-1.prom": ("llm", "llama-epp-7c9d8-1"),
    "llm-d-router-gemma-waiting.prom": ("llm", "gemma-epp-5b6a4-0"),
    "llm-d-router-team-b-llama.prom": ("team-b", "llama-epp-66f1c-0"),
    "gaie-v1.5-qwen.prom": ("llm", "qwen-epp-0"),
    "gaie-v1.5-mistral-no-flow-control.prom": ("llm", "mistral-epp-0"),
}


def target_labels(namespace: str, pod: str) -> dict[str, str]:
    return {"namespace": namespace, "pod": pod, "container": "epp", "service": pod.rsplit("-", 2)[0],
            "endpoint": "metrics"}


# ---------------------------------------------------------------------------------------------- rules, pure


def scraped_series() -> list[dict[str, str]]:
    series = []
    for name, (namespace, pod) in TARGETS.items():
        for sample, labels, _ in samples((DATA / name).read_text()):
            series.append({"__name__": sample, **labels, **target_labels(namespace, pod), "job": "epp",
                           "instance": f"{pod}:9090"})
    return series


def test_the_preset_is_a_plain_prometheus_adapter_rules_file() -> None:
    config = gateway_preset()
    assert config is gateway_preset() and config.source == GATEWAY_PRESET and config.include == ()
    text = gateway_yaml()
    assert "include" not in text and "missingValue" not in text  # nothing prometheus-adapter would refuse
    again = parse_rules(text, "gateway.yaml")
    assert [r.metrics_query.source for r in again.external_rules] == [r.metrics_query.source
                                                                       for r in config.external_rules]
    # One rule per API name: External, and Object on each InferencePool group; one series call for all of them.
    assert len(config.external_rules) == len(API_NAMES) and len(config.rules) == len(API_NAMES) * len(POOLS)
    assert config.series_queries() == (SERIES_QUERY,)
    included = parse_rules("include: [inference-gateway]\n", "rules.yaml")
    assert len(included.rules) == len(config.rules) and len(included.external_rules) == len(config.external_rules)
    with pytest.raises(RulesError, match=r"unknown include 'gateway' \(known: capacity-headroom, gpu-presets, "
                                         r"inference-gateway, "):
        parse_rules("include: [gateway]\n", "rules.yaml")


def test_every_metric_is_discovered_from_the_ready_gauge_under_both_names() -> None:
    config = gateway_preset()
    series = scraped_series()
    catalogue = build_catalogue(config, {q: matching(series, q) for q in config.series_queries()})
    assert catalogue.external_metrics() == sorted(API_NAMES)
    served = set(catalogue.custom_metrics())
    for name in API_NAMES:
        assert {MetricInfo(name, pool, True) for pool in POOLS} <= served, name
        [binding, *_] = catalogue.external_lookup(name)
        assert binding.namespace_label == "namespace" and binding.namespaced
        for pool in POOLS:
            [first, *_] = catalogue.lookup(name, pool)
            assert (first.resource_label, first.namespace_label) == ("name", "namespace")
    # Nothing but the ready gauge is needed: an EPP whose queues are all empty (no queue series) still lists them.
    ready_only = [s for s in series if s["__name__"] in ("llm_d_epp_ready_endpoints", "inference_pool_ready_pods")]
    assert build_catalogue(config, {SERIES_QUERY: ready_only}).external_metrics() == sorted(API_NAMES)


def test_the_chart_copy_is_the_preset() -> None:
    # scripts/gen-chart-presets.py writes it; tests/test_chart.py checks it is current.
    chart = Path(__file__).parent.parent / "charts" / "gpu-autoscaler" / "files" / "gateway-presets.yaml"
    assert yaml.safe_load(chart.read_text()) == yaml.safe_load(gateway_yaml())


# ------------------------------------------------------- through the adapter, from a real Prometheus


class Stack:
    def __init__(self, adapter: AdapterProcess, gemma: MetricsEndpoint) -> None:
        self.adapter = adapter
        self.gemma = gemma

    def get(self, path: str, **params: str) -> httpx.Response:
        return self.adapter.get(path, **params)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("gateway")
    (tmp / "rules.yaml").write_text("include: [inference-gateway]\n")
    with ExitStack() as running:
        endpoints = {name: running.enter_context(MetricsEndpoint(text=(DATA / name).read_text())) for name in TARGETS}
        targets = [(endpoints[name].address, target_labels(namespace, pod))
                   for name, (namespace, pod) in TARGETS.items()]
        prom = running.enter_context(PrometheusServer(targets, job="epp"))
        prom.wait_for('count(count by (instance) ({__name__=~"llm_d_epp_ready_endpoints|inference_pool_ready_pods"})) '
                      f'== {len(TARGETS)}', timeout=40)
        adapter = running.enter_context(AdapterProcess(prom.url, str(tmp / "certs"), [
            "--config", str(tmp / "rules.yaml"), "--metrics-relist-interval", "1s"]))
        wait_until_listed(adapter)
        yield Stack(adapter, endpoints["llm-d-router-gemma-waiting.prom"])


def wait_until_listed(adapter: AdapterProcess, timeout: float = 15) -> None:
    """Until the adapter's discovery lists every metric on both APIs (the first relists run after start)."""
    wanted_custom = {f"inferencepools.{group}/{name}" for group in INFERENCE_POOL_GROUPS for name in API_NAMES}
    deadline = time.monotonic() + timeout
    while True:
        custom = {r["name"] for r in adapter.get(CUSTOM).json()["resources"]}
        external_names = {r["name"] for r in adapter.get(EXTERNAL).json()["resources"]}
        if (wanted_custom <= custom and set(API_NAMES) <= external_names) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert wanted_custom <= custom, sorted(wanted_custom - custom)
    assert set(API_NAMES) <= external_names, sorted(set(API_NAMES) - external_names)


def answer(stack: Stack, path: str, selector: str | None = None) -> httpx.Response:
    return stack.get(path, **({"labelSelector": selector} if selector is not None else {}))


def external(stack: Stack, namespace: str, metric: str, pools: str) -> float | None:
    """The External metric's value for the HPA's selector (``None``: no value, a 404 Status)."""
    response = answer(stack, f"{EXTERNAL}/namespaces/{namespace}/{metric}", pools)
    if response.status_code == 404:
        assert response.json()["kind"] == "Status"
        return None
    assert response.status_code == 200, response.text
    [item] = response.json()["items"]
    assert item["metricName"] == metric
    return milli(item["value"]) / 1000


def on_pool(stack: Stack, namespace: str, pool: str, metric: str, group: str = INFERENCE_POOL_GROUPS[0]
            ) -> float | None:
    """The Object metric on the InferencePool, as the HPA asks it (``None``: no value)."""
    response = answer(stack, f"{CUSTOM}/namespaces/{namespace}/inferencepools.{group}/{pool}/{metric}")
    if response.status_code == 404:
        assert response.json()["kind"] == "Status"
        return None
    assert response.status_code == 200, response.text
    [item] = response.json()["items"]
    version = "v1" if group == INFERENCE_POOL_GROUPS[0] else "v1alpha2"
    assert item["describedObject"] == {"kind": "InferencePool", "namespace": namespace, "name": pool,
                                       "apiVersion": f"{group}/{version}"}
    return milli(item["value"]) / 1000


# (namespace, pool) -> expected value of each metric (both names; None = no value)
EXPECTED = {
    # llm-d-router: two EPP replicas hold 5 and 4 requests (a drained flow reads 0 until collected); they report the
    # same pool, so its gauges are taken once; the deprecated twins are not counted again.
    ("llm", "llama"): {"queue_size": 9, "queue_bytes": 6144 + 20480 + 8192, "pool_saturation": 1.25,
                       "average_queue_size": 4.5, "average_kv_cache_utilization": 0.72,
                       "average_running_requests": 12, "ready": 3},
    # Gateway API Inference Extension v1.5.0: the previous names only.
    ("llm", "qwen"): {"queue_size": 7, "queue_bytes": 14336, "pool_saturation": 0.8, "average_queue_size": 1,
                      "average_kv_cache_utilization": 0.5, "average_running_requests": 6, "ready": 2},
    # No flow control: no queue to read (0 would claim a buffering gateway that is not there).
    ("llm", "mistral"): {"queue_size": None, "queue_bytes": None, "pool_saturation": None, "average_queue_size": 2,
                         "average_kv_cache_utilization": 0.3, "average_running_requests": 5, "ready": 1},
    # The same pool name in another namespace is another pool.
    ("team-b", "llama"): {"queue_size": 40, "queue_bytes": 81920, "pool_saturation": 2.0, "average_queue_size": 9,
                          "average_kv_cache_utilization": 0.95, "average_running_requests": 30, "ready": 5},
    # Nobody reports this pool: no value, never a 0.
    ("llm", "ghost"): dict.fromkeys(("queue_size", "queue_bytes", "pool_saturation", "average_queue_size",
                                     "average_kv_cache_utilization", "average_running_requests", "ready")),
}
# Pool gemma (scaled to zero): its averages are left from its last pod, so no value; its endpoints read 0.
GEMMA_AT_ZERO = {"average_queue_size": None, "average_kv_cache_utilization": None, "average_running_requests": None,
                 "ready": 0, "pool_saturation": 1.0}


def api_names(short: str) -> tuple[str, str]:
    """The current and previous names of ``short`` (``queue_size`` -> ``llm_d_epp_flow_control_queue_size``...)."""
    current = {"ready": "llm_d_epp_ready_endpoints"}.get(short) or next(
        m.names[0] for m in GATEWAY_METRICS if m.names[0] in (f"llm_d_epp_{short}", f"llm_d_epp_flow_control_{short}"))
    [metric] = [m for m in GATEWAY_METRICS if m.names[0] == current]
    return metric.names


CASES = [(ns, pool, short, value) for (ns, pool), values in EXPECTED.items() for short, value in values.items()]
CASES += [("llm", "gemma", short, value) for short, value in GEMMA_AT_ZERO.items()]


@pytest.mark.parametrize(("namespace", "pool", "short", "expected"), CASES,
                         ids=[f"{ns}/{pool}/{short}" for ns, pool, short, _ in CASES])
def test_values_external_and_on_the_inference_pool(stack: Stack, namespace: str, pool: str, short: str,
                                                   expected: float | None) -> None:
    for name in api_names(short):  # the current name and the previous one answer alike
        got = [external(stack, namespace, name, f"inference_pool={pool}"),
               *(on_pool(stack, namespace, pool, name, group) for group in INFERENCE_POOL_GROUPS)]
        wanted = [pytest.approx(expected, abs=1e-3) if expected is not None else None] * 3
        assert got == wanted, name


def test_several_pools_in_one_selector(stack: Stack) -> None:
    # Queued requests and endpoints add up over the selected pools; the pools' averages are averaged.
    both = "inference_pool in (llama,qwen)"
    assert external(stack, "llm", "llm_d_epp_flow_control_queue_size", both) == 16
    assert external(stack, "llm", "llm_d_epp_ready_endpoints", both) == 5
    assert external(stack, "llm", "inference_pool_average_kv_cache_utilization", both) == pytest.approx(0.61)
    assert external(stack, "llm", "llm_d_epp_flow_control_pool_saturation", both) == 1.25


def test_a_selector_on_the_flows_narrows_the_queue(stack: Stack) -> None:
    # The flow-control labels select within the pool; an empty selection of an existing pool reads 0.
    assert external(stack, "llm", "llm_d_epp_flow_control_queue_size", "inference_pool=llama,fairness_id=batch") == 2
    assert external(stack, "llm", "llm_d_epp_flow_control_queue_size", "inference_pool=llama,priority=0") == 7
    assert external(stack, "llm", "llm_d_epp_flow_control_queue_size", "inference_pool=llama,fairness_id=none") == 0


def test_the_queue_of_a_pool_at_zero_reads_its_waiting_requests_then_zero(stack: Stack) -> None:
    # Scaled to zero, the EPP holds 3 requests: that is what wakes the Deployment.
    for name in api_names("queue_size"):
        assert external(stack, "llm", name, "inference_pool=gemma") == 3
        assert on_pool(stack, "llm", "gemma", name) == 3
    assert external(stack, "llm", "llm_d_epp_flow_control_queue_bytes", "inference_pool=gemma") == 3072
    # The queue drains and the flow registry collects the flow: its series are gone. The queue reads 0, not "no value".
    stack.gemma.text = (DATA / "llm-d-router-gemma-idle.prom").read_text()
    deadline = time.monotonic() + 20
    while external(stack, "llm", "llm_d_epp_flow_control_queue_size", "inference_pool=gemma") != 0:
        assert time.monotonic() < deadline, "the drained queue never read 0"
        time.sleep(0.25)
    for name in (*api_names("queue_size"), *api_names("queue_bytes")):
        assert external(stack, "llm", name, "inference_pool=gemma") == 0
        for group in INFERENCE_POOL_GROUPS:
            assert on_pool(stack, "llm", "gemma", name, group) == 0


def test_the_hpa_namespace_bounds_what_it_sees(stack: Stack) -> None:
    # An HPA in team-b asking for qwen (a pool of namespace llm) gets no value, not llm's queue.
    assert external(stack, "team-b", "llm_d_epp_flow_control_queue_size", "inference_pool=qwen") is None
    assert on_pool(stack, "team-b", "qwen", "llm_d_epp_flow_control_queue_size") is None


def test_a_namespace_object_totals_its_pools(stack: Stack) -> None:
    # Like every rule that maps a namespace label, the Object rules serve the namespace too: team-b has one pool.
    for name, expected in (("llm_d_epp_flow_control_queue_size", 40), ("inference_pool_ready_pods", 5),
                           ("llm_d_epp_average_kv_cache_utilization", 0.95)):
        response = stack.get(f"{CUSTOM}/namespaces/team-b/metrics/{name}")
        assert response.status_code == 200, response.text
        [item] = response.json()["items"]
        assert item["describedObject"]["kind"] == "Namespace"
        assert milli(item["value"]) / 1000 == pytest.approx(expected)
