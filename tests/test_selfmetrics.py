"""The adapter's own /metrics: every family, sane values after real requests, and the request middleware."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from unittest.mock import create_autospec

import pytest
from kubernetes.client import Configuration
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import Receive, Scope, Send

from adapter.kube.api import KubeClient
from adapter.kube.cache import MetadataCache
from adapter.rules.resources import PODS
from adapter.rulesfile.loader import parse_rules, rule_label
from adapter.server.observe import ObserveRequests, route_of
from adapter.server.selfmetrics import ROUTES, AdapterMetrics
from tests.support.adapter_metrics import Samples, scrape, value
from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.unit

C = "/apis/custom.metrics.k8s.io"
E = "/apis/external.metrics.k8s.io"


@pytest.mark.parametrize(("path", "route"), [
    ("/apis", "apis"),
    (f"{C}", "discovery"),
    (f"{C}/v1beta2", "discovery"),
    (f"{E}/v1beta1", "discovery"),
    (f"{C}/v1beta1/namespaces/ml/pods/infer-0/m", "custom_object"),
    (f"{C}/v1beta1/nodes/node-a/m", "custom_object"),
    (f"{C}/v1beta1/namespaces/ml/pods/*/m", "custom_selector"),
    (f"{C}/v1beta1/nodes/*/m", "custom_selector"),
    (f"{C}/v1beta2/namespaces/ml/metrics/m", "custom_namespace"),
    (f"{E}/v1beta1/namespaces/ml/queue_depth", "external"),
    ("/healthz", "health"), ("/readyz", "health"), ("/livez", "health"),
    ("/metrics", "metrics"),
    (f"/debug/explain{C}/v1beta1/namespaces/ml/pods/*/m", "explain"),
    (f"{C}/v1beta1/namespaces/ml/too/many/parts/here", "other"),
    ("/openapi/v2", "other"), ("/favicon.ico", "other"), ("/", "other"),
])
def test_routes_are_a_small_fixed_set(path: str, route: str) -> None:
    assert route_of(path) == route
    assert route in ROUTES


def test_rule_label_is_the_position_in_the_rules_file() -> None:
    config = parse_rules("include: [gpu-presets]\nrules:\n- seriesQuery: 'up'\n  metricsQuery: 'up'\n"
                         "externalRules:\n- seriesQuery: 'up'\n  metricsQuery: 'up'\n", "rules.yaml")
    assert rule_label(config.rules[0]) == "rules[0]"
    assert rule_label(config.external_rules[0]) == "externalRules[0]"
    assert rule_label(config.rules[1]) == "gpu-presets:rules[0]"  # an included rule says where it comes from


def families(metrics: AdapterMetrics) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}


def cache_stats(**counts: int) -> MetadataCache:
    """A stand-in for a Kubernetes object cache with these counts, autospec'd from a real (unstarted) one: a count
    the cache does not have fails here."""
    real = MetadataCache(KubeClient(Configuration(host="https://kube.invalid")), PODS, start=False)
    stats = create_autospec(real, spec_set=True)
    for name, count in counts.items():
        setattr(stats, name, count)
    return stats


def test_families_declared_for_authentication_authorization_and_kube_caches() -> None:
    metrics = AdapterMetrics()
    metrics.authentications.labels("token").inc()
    metrics.authorizations.labels("deny", "true").inc()
    metrics.watch_kube(lambda: {"pods": cache_stats(objects=12, watch_restarts_total=2),
                                "replicasets.apps": cache_stats(objects=3, watch_restarts_total=0)})
    text = metrics.exposition().decode()
    assert 'gpu_adapter_authentications_total{result="token"} 1.0' in text
    assert 'gpu_adapter_authentications_total{result="anonymous"} 0.0' in text  # every result from the start
    assert 'gpu_adapter_authorizations_total{cached="true",decision="deny"} 1.0' in text
    assert 'gpu_adapter_kube_cache_objects{resource="pods"} 12.0' in text
    assert 'gpu_adapter_kube_watch_restarts_total{resource="pods"} 2.0' in text
    assert 'gpu_adapter_kube_cache_objects{resource="replicasets.apps"} 3.0' in text
    # the global registry is left alone: a second instance declares the same families without conflict
    assert set(families(AdapterMetrics())) == set(families(metrics))


def test_the_middleware_times_requests_an_inner_auth_middleware_refuses(caplog: pytest.LogCaptureFixture) -> None:
    async def refusing_auth(scope: Scope, receive: Receive, send: Send) -> None:
        scope["state"]["user"] = "system:anonymous"
        await send({"type": "http.response.start", "status": 403, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def exploding(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("bug")

    async def run(app: ObserveRequests, path: str) -> None:
        scope = {"type": "http", "method": "GET", "path": path, "state": {}}

        async def receive() -> dict:
            return {"type": "http.request"}

        async def send(message: dict) -> None:
            pass

        await app(scope, receive, send)

    metrics = AdapterMetrics()
    with caplog.at_level(logging.INFO, logger="adapter.access"):
        asyncio.run(run(ObserveRequests(refusing_auth, metrics), f"{C}/v1beta1/namespaces/ml/pods/*/m"))
        with pytest.raises(RuntimeError):
            asyncio.run(run(ObserveRequests(exploding, metrics), "/apis"))
    text = metrics.exposition().decode()
    assert 'gpu_adapter_request_duration_seconds_count{code="403",route="custom_selector"} 1.0' in text
    assert 'gpu_adapter_request_duration_seconds_count{code="500",route="apis"} 1.0' in text
    lines = [r for r in caplog.records if r.name == "adapter.access"]
    assert [(r.method, r.route, r.code, r.user) for r in lines] == [  # type: ignore[attr-defined]
        ("GET", "custom_selector", 403, "system:anonymous"), ("GET", "apis", 500, None)]
    assert all(r.duration_ms >= 0 for r in lines)  # type: ignore[attr-defined]


# -- the real adapter -----------------------------------------------------------------------------------------

RULES = """\
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
externalRules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  name: {matches: '^DCGM_FI_DEV_GPU_UTIL$', as: 'gpu_util_sum'}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'
"""


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AdapterProcess, float]]:
    tmp = tmp_path_factory.mktemp("selfmetrics")
    (tmp / "rules.yaml").write_text(RULES)
    with (MetricsEndpoint('DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="ml",pod="infer-0"} 40\n'
                          'DCGM_FI_DEV_GPU_UTIL{gpu="1",namespace="ml",pod="infer-1"} 80\n') as endpoint,
          PrometheusServer([endpoint.address], honor_labels=True) as prom):
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", lambda r: len(r) == 2, timeout=30)
        started = time.time()
        with AdapterProcess(prom.url, str(tmp / "certs"), ["--config", str(tmp / "rules.yaml"),
                                                           "--query-cache-ttl", "0"]) as process:
            yield process, started


def count(samples: Samples, route: str, code: str) -> float:
    return value(samples, "gpu_adapter_request_duration_seconds_count", route=route, code=code) or 0


@pytest.mark.e2e
def test_self_metrics_after_real_requests(adapter: tuple[AdapterProcess, float]) -> None:
    process, started = adapter
    before = scrape(process)
    for _ in range(3):
        assert process.get(f"{C}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL").status_code == 200
    assert process.get(f"{C}/v1beta1/namespaces/ml/pods/nobody/DCGM_FI_DEV_GPU_UTIL").status_code == 404
    assert process.get(f"{C}/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL").status_code == 200
    assert process.get(f"{E}/v1beta1/namespaces/ml/gpu_util_sum").status_code == 200
    resources = process.get(f"{C}/v1beta1").json()["resources"]
    assert process.get("/apis").status_code == 200

    response = process.get("/metrics")
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "_created" not in response.text  # no prometheus_client creation-time series
    after = scrape(process)

    def delta(route: str, code: str) -> float:
        return count(after, route, code) - count(before, route, code)

    assert delta("custom_object", "200") == 3
    assert delta("custom_object", "404") == 1
    assert delta("custom_selector", "200") == 1
    assert delta("external", "200") == 1
    assert delta("discovery", "200") == 1
    assert delta("apis", "200") == 1
    assert count(after, "health", "200") >= 1  # the readiness polls while the test waited for the adapter
    routes = {dict(labels)["route"] for (name, labels) in after if name.startswith("gpu_adapter_request_")}
    assert routes <= set(ROUTES)  # never a raw path

    # one Prometheus query per metric request here (--query-cache-ttl 0 and nothing concurrent), per rule
    def queries(rule: str, samples: Samples) -> float:
        return value(samples, "gpu_adapter_prometheus_query_duration_seconds_count", rule=rule) or 0

    assert queries("rules[0]", after) - queries("rules[0]", before) == 5
    assert queries("externalRules[0]", after) - queries("externalRules[0]", before) == 1
    lookups = sum(value(after, "gpu_adapter_query_cache_requests_total", result=r) or 0
                  for r in ("hit", "coalesced", "miss"))
    assert lookups == queries("rules[0]", after) + queries("externalRules[0]", after)

    assert value(after, "gpu_adapter_discovery_metrics", api="custom") == len(resources) == 2
    assert value(after, "gpu_adapter_discovery_metrics", api="external") == 1
    assert value(after, "gpu_adapter_discovery_failures_total") == 0
    last = value(after, "gpu_adapter_discovery_last_success_timestamp_seconds")
    assert last is not None and started <= last <= time.time()
    duration = value(after, "gpu_adapter_discovery_last_duration_seconds")
    assert duration is not None and duration > 0
    assert value(after, "gpu_adapter_rules", section="rules") == 1
    assert value(after, "gpu_adapter_rules", section="externalRules") == 1
    assert value(after, "gpu_adapter_rules_reloads_total", result="rejected") == 0
    assert value(after, "gpu_adapter_query_cache_ttl_seconds") == 0
    for result in ("frontproxy", "token", "anonymous", "failed"):
        assert value(after, "gpu_adapter_authentications_total", result=result) == 0
    assert (value(after, "process_resident_memory_bytes") or 0) > 0


@pytest.mark.e2e
def test_discovery_failures_are_counted_and_the_last_success_is_absent_until_one(tmp_path: Path) -> None:
    process = AdapterProcess(f"http://127.0.0.1:{free_port()}", str(tmp_path / "certs"),
                             ["--prometheus-timeout", "1s"], wait_ready=False)
    try:
        wait_until(lambda: (value(scrape(process), "gpu_adapter_discovery_failures_total") or 0) >= 1,
                   what="a failed relist counted")
        samples = scrape(process)
        assert value(samples, "gpu_adapter_discovery_last_success_timestamp_seconds") is None  # never made up
        assert value(samples, "gpu_adapter_discovery_metrics", api="custom") is None
    finally:
        process.stop()
