"""external.metrics.k8s.io end to end: the real adapter over HTTPS answering from a real Prometheus."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.e2e

SERIES = """\
inference_queue_depth{namespace="shop",queue="orders"} 42
inference_queue_depth{namespace="shop",queue="refunds"} 8
inference_queue_depth{namespace="other",queue="orders"} 1000
cluster_gpu_pending_pods{pool="h100"} 3
cluster_gpu_pending_pods{pool="a10g"} 2
"""

RULES = """\
include: [gpu-presets]
externalRules:
- seriesQuery: 'inference_queue_depth{namespace!="",queue!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  metricsQuery: 'sum by (queue) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'cluster_gpu_pending_pods{pool!=""}'
  resources: {namespaced: false}
  metricsQuery: 'sum by (pool) (<<.Series>>{<<.LabelMatchers>>})'
"""

EXT = "/apis/external.metrics.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def external(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AdapterProcess, AdapterProcess]]:
    """An adapter with externalRules, and one with only custom rules (to show the group is not claimed)."""
    tmp = tmp_path_factory.mktemp("external")
    endpoint = MetricsEndpoint(SERIES)
    prom = PrometheusServer([endpoint.address], job="queues", honor_labels=True).start()
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    started: list[AdapterProcess] = []
    try:
        prom.wait_for("inference_queue_depth", timeout=30)
        started.append(AdapterProcess(prom.url, str(tmp / "c1"), ["--config", str(rules)]))
        started.append(AdapterProcess(prom.url, str(tmp / "c2")))
        yield started[0], started[1]
    finally:
        for adapter in started:
            adapter.stop()
        prom.stop()
        endpoint.stop()


def test_discovery_lists_external_metrics(external: tuple[AdapterProcess, AdapterProcess]) -> None:
    adapter, _ = external
    groups = adapter.get("/apis").json()["groups"]
    assert [g["name"] for g in groups] == ["custom.metrics.k8s.io", "external.metrics.k8s.io"]
    listing = adapter.get(EXT).json()
    assert listing["kind"] == "APIResourceList" and listing["groupVersion"] == "external.metrics.k8s.io/v1beta1"
    names = sorted(r["name"] for r in listing["resources"])
    assert names == ["cluster_gpu_pending_pods", "inference_queue_depth"]


def test_namespaced_external_metric_is_scoped_to_the_hpa_namespace(
        external: tuple[AdapterProcess, AdapterProcess]) -> None:
    adapter, _ = external
    body = adapter.get(f"{EXT}/namespaces/shop/inference_queue_depth").json()
    assert body["kind"] == "ExternalMetricValueList" and body["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    values = {item["metricLabels"]["queue"]: item["value"] for item in body["items"]}
    assert values == {"orders": "42", "refunds": "8"}, "the other namespace's 1000 must not leak in"
    assert all(item["metricName"] == "inference_queue_depth" for item in body["items"])
    selected = adapter.get(f"{EXT}/namespaces/shop/inference_queue_depth", labelSelector="queue=orders").json()
    assert [(i["metricLabels"], i["value"]) for i in selected["items"]] == [({"queue": "orders"}, "42")]


def test_cluster_wide_external_metric_ignores_the_namespace(
        external: tuple[AdapterProcess, AdapterProcess]) -> None:
    adapter, _ = external
    for namespace in ("shop", "anything"):
        body = adapter.get(f"{EXT}/namespaces/{namespace}/cluster_gpu_pending_pods").json()
        assert sorted((i["metricLabels"]["pool"], i["value"]) for i in body["items"]) == [("a10g", "2"), ("h100", "3")]


def test_external_errors_are_status(external: tuple[AdapterProcess, AdapterProcess]) -> None:
    adapter, _ = external
    missing = adapter.get(f"{EXT}/namespaces/shop/no_such_metric")
    assert missing.status_code == 404 and missing.json()["kind"] == "Status"
    assert "no_such_metric" in missing.json()["message"]
    empty = adapter.get(f"{EXT}/namespaces/shop/inference_queue_depth", labelSelector="queue=nope")
    assert empty.status_code == 404
    bad = adapter.get(f"{EXT}/namespaces/shop/inference_queue_depth", labelSelector="queue in (")
    assert bad.status_code == 400 and bad.json()["reason"] == "BadRequest"


def test_without_external_rules_the_group_is_left_to_others(external: tuple[AdapterProcess, AdapterProcess]) -> None:
    """KEDA owns external.metrics.k8s.io in many clusters: an adapter with no externalRules must not claim it."""
    _, custom_only = external
    assert [g["name"] for g in custom_only.get("/apis").json()["groups"]] == ["custom.metrics.k8s.io"]
    assert custom_only.get(EXT).status_code == 404
    assert custom_only.get(f"{EXT}/namespaces/shop/inference_queue_depth").status_code == 404


def test_external_metric_path_parts_are_escaped(external: tuple[AdapterProcess, AdapterProcess]) -> None:
    adapter, _ = external
    hostile = adapter.get(f'{EXT}/namespaces/shop"}}or vector(1)%23/inference_queue_depth')
    assert hostile.status_code in (400, 404)
    assert hostile.json()["kind"] == "Status"
    assert "1000" not in hostile.text
