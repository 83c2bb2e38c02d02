"""A value whose newest underlying sample is older than --max-sample-age is no value: a real Prometheus whose
target stops keeps answering `max_over_time(x[10m])` for ten minutes; the adapter stops answering within the limit,
on every API (metrics.k8s.io too: cAdvisor's irate(...[5m]) keeps answering after the kubelet's target stopped)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

RULES = """\
rules:
- seriesQuery: 'gpu_queue_depth{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {as: gpu_queue_depth_max_10m}
  metricsQuery: 'max by (<<.GroupBy>>) (max_over_time(<<.Series>>{<<.LabelMatchers>>}[10m]))'
- seriesQuery: 'gpu_queue_depth{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'max by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
externalRules:
- seriesQuery: 'gpu_queue_depth{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  name: {as: gpu_queue_depth_max_10m}
  metricsQuery: 'max by (pod) (max_over_time(<<.Series>>{<<.LabelMatchers>>}[10m]))'
resourceRules:
  cpu:
    containerQuery: 'sum by (<<.GroupBy>>) (irate(container_cpu_usage_seconds_total{<<.LabelMatchers>>}[5m]))'
    nodeQuery: 'sum by (<<.GroupBy>>) (irate(container_cpu_usage_seconds_total{<<.LabelMatchers>>}[5m]))'
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}, node: {resource: node}}}
    containerLabel: container
  memory:
    containerQuery: 'max by (<<.GroupBy>>) (max_over_time(container_memory_working_set_bytes{<<.LabelMatchers>>}[5m]))'
    nodeQuery: 'sum by (<<.GroupBy>>) (container_memory_working_set_bytes{<<.LabelMatchers>>})'
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}, node: {resource: node}}}
    containerLabel: container
  window: 5m
"""
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/worker-0"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/gpu_queue_depth_max_10m"
POD_METRICS = "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods/worker-0"
LIMIT_S = 4


def exposition() -> str:
    """The queue gauge, and a container's cAdvisor series (a CPU counter growing at half a core)."""
    labels = 'namespace="ml",pod="worker-0",container="main",node="node-a"'
    return (f'gpu_queue_depth{{namespace="ml",pod="worker-0"}} 7\n'
            f"container_cpu_usage_seconds_total{{{labels}}} {time.time() / 2:.3f}\n"
            f"container_memory_working_set_bytes{{{labels}}} 1048576\n")


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[tuple[AdapterProcess, PrometheusServer, MetricsEndpoint]]:
    tmp: Path = tmp_path_factory.mktemp("stale")
    endpoint = MetricsEndpoint(render=exposition)
    prom = PrometheusServer([(endpoint.address, {})], job="queue").start()
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    adapter = None
    try:
        prom.wait_for("gpu_queue_depth", timeout=30)
        prom.wait_for("irate(container_cpu_usage_seconds_total[5m])", timeout=30)
        adapter = AdapterProcess(prom.url, str(tmp / "certs"), [
            "--config", str(rules), "--max-sample-age", f"{LIMIT_S}s", "--query-cache-ttl", "0",
            "--metrics-relist-interval", "1m"])
        yield adapter, prom, endpoint
    finally:
        if adapter is not None:
            adapter.stop()
        prom.stop()
        endpoint.stop()


def test_values_while_fresh_and_none_once_the_target_stopped_longer_than_the_limit(stopped) -> None:
    adapter, prom, endpoint = stopped
    for path in (f"{CUSTOM}/gpu_queue_depth_max_10m", f"{CUSTOM}/gpu_queue_depth", EXTERNAL):
        response = adapter.get(path)
        assert response.status_code == 200, (path, response.text)
        assert response.json()["items"][0]["value"] == "7"
    response = adapter.get(POD_METRICS)
    assert response.status_code == 200, response.text
    [container] = response.json()["containers"]
    assert container["name"] == "main" and container["usage"]["memory"] == "1Mi"  # cpu: about half a core
    # The target stops answering (its endpoint goes away): Prometheus marks the series stale at the next scrape.
    endpoint.stop()
    stopped_at = time.monotonic()
    # The plain selector has no value at once (Prometheus' staleness marker), while the 10m window keeps answering
    # in Prometheus itself...
    wait_until(lambda: adapter.get(f"{CUSTOM}/gpu_queue_depth").status_code == 404, timeout=10)
    assert prom.query('max_over_time(gpu_queue_depth{namespace="ml",pod="worker-0"}[10m])')[0]["value"][1] == "7"
    # ...but not through the adapter once the newest sample is older than --max-sample-age.
    wait_until(lambda: adapter.get(f"{CUSTOM}/gpu_queue_depth_max_10m").status_code == 404, timeout=LIMIT_S + 10)
    assert time.monotonic() - stopped_at >= LIMIT_S - 2  # not before the limit (2 s: scrape and timing slack)
    body = adapter.get(f"{CUSTOM}/gpu_queue_depth_max_10m").json()
    assert body["kind"] == "Status" and body["code"] == 404
    wait_until(lambda: adapter.get(EXTERNAL).status_code == 404, timeout=5)
    assert prom.query('max_over_time(gpu_queue_depth{namespace="ml",pod="worker-0"}[10m])')[0]["value"][1] == "7"
    # metrics.k8s.io: the pod's usage is no longer served, though Prometheus' 5m windows still answer.
    wait_until(lambda: adapter.get(POD_METRICS).status_code == 404, timeout=5)
    assert prom.query('irate(container_cpu_usage_seconds_total{pod="worker-0"}[5m])')

