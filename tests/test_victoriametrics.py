"""A user who outgrew one Prometheus: the adapter against a real VictoriaMetrics, directly (its /prometheus path
prefix) and behind a multi-tenant gateway (/select/0/prometheus with an X-Scope-OrgID tenant header, the shape of
Mimir, Cortex and VictoriaMetrics cluster URLs). Discovery, custom and external metrics all work; two adapter
replicas on the same backend give the same answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.victoriametrics import TenantGateway, VictoriaMetricsServer

pytestmark = [pytest.mark.e2e, pytest.mark.tools]

EXPOSITION = """\
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",namespace="ml",pod="infer-0",container="main"} 50
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",namespace="ml",pod="infer-0",container="main"} 100
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-2",namespace="ml",pod="infer-1",container="main"} 30
inference_queue_depth{namespace="ml",queue="orders"} 42
"""
RULES = """\
include: [gpu-presets]
externalRules:
- seriesQuery: 'inference_queue_depth{namespace!="",queue!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  metricsQuery: 'sum by (queue) (<<.Series>>{<<.LabelMatchers>>})'
"""
PODS = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL"
QUEUE = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/inference_queue_depth"


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AdapterProcess, AdapterProcess,
                                                                              TenantGateway]]:
    tmp: Path = tmp_path_factory.mktemp("vm")
    endpoint = MetricsEndpoint(EXPOSITION)
    vm = VictoriaMetricsServer([endpoint.address])
    gateway = TenantGateway(vm.url, "/select/0/prometheus", tenant="tenant-a")
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    started: list[AdapterProcess] = []
    try:
        vm.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="infer-1"}')
        vm.wait_for("inference_queue_depth")
        args = ["--config", str(rules), "--metrics-relist-interval", "2s", "--metrics-max-age", "1m"]
        started.append(AdapterProcess(f"{vm.url}/prometheus", str(tmp / "a"), args))
        started.append(AdapterProcess(gateway.url, str(tmp / "b"),
                                      [*args, "--prometheus-header", "X-Scope-OrgID=tenant-a"]))
        yield started[0], started[1], gateway
    finally:
        for adapter in started:
            adapter.stop()
        gateway.stop()
        vm.stop()
        endpoint.stop()


def _items(adapter: AdapterProcess, path: str) -> list[tuple[str, str]]:
    response = adapter.get(path)
    assert response.status_code == 200, response.text
    return sorted((item.get("describedObject", {}).get("name") or item["metricLabels"]["queue"], item["value"])
                  for item in response.json()["items"])


def test_discovery_custom_and_external_metrics_through_victoriametrics(adapters: tuple) -> None:
    direct, _, _ = adapters
    listed = {r["name"] for r in direct.get("/apis/custom.metrics.k8s.io/v1beta2").json()["resources"]}
    assert "pods/DCGM_FI_DEV_GPU_UTIL" in listed
    assert _items(direct, PODS) == [("infer-0", "75"), ("infer-1", "30")]  # the presets average a pod's GPUs
    assert _items(direct, QUEUE) == [("orders", "42")]


def test_a_path_prefixed_multi_tenant_endpoint_gives_the_same_answers(adapters: tuple) -> None:
    direct, tenant, gateway = adapters
    for path in (PODS, QUEUE, "/apis/custom.metrics.k8s.io/v1beta2"):
        first = direct.get(path).json()
        second = tenant.get(path).json()
        for body in (first, second):
            for item in body.get("items", []):
                item.pop("timestamp")
        assert first == second, path
    # Every query went through the prefix with the tenant header (the gateway answers 401 without it).
    assert {"/api/v1/query", "/api/v1/series"} <= set(gateway.forwarded)
