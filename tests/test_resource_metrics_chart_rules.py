"""The chart's default resourceRules (adapter.rules.resource) against kube-prometheus-stack-shaped series: cAdvisor
counters and gauges per container (plus the pod-level container="" series cAdvisor also exports) and node-exporter
series with `instance` set to the node name. Explicit sample timestamps 10 s apart make the irate exact."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml

from tests.support.adapter_process import AdapterProcess
from tests.support.k8s_validation import REPO
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


def exposition(step: int, at_ms: int) -> str:
    cpu = {"main": 100 + step * 25.0, "sidecar": 10 + step * 0.5}  # 2.5 and 0.05 cores
    lines = []
    for container, seconds in cpu.items():
        labels = f'namespace="ml",pod="infer-0",container="{container}",node="node-a",image="x"'
        lines.append(f"container_cpu_usage_seconds_total{{{labels}}} {seconds} {at_ms}")
        lines.append(f"container_memory_working_set_bytes{{{labels}}} {1 << 30 if container == 'main' else 1 << 20}"
                     f" {at_ms}")
    pod_level = 'namespace="ml",pod="infer-0",container="",node="node-a"'  # must not count twice
    lines.append(f"container_cpu_usage_seconds_total{{{pod_level}}} {200 + step * 100.0} {at_ms}")
    lines.append(f"container_memory_working_set_bytes{{{pod_level}}} {1 << 33} {at_ms}")
    for cpu_id, idle_per_s in (("0", 0.5), ("1", 1.0)):
        for mode, per_s in (("idle", idle_per_s), ("user", 1 - idle_per_s)):
            lines.append(f'node_cpu_seconds_total{{instance="node-a",cpu="{cpu_id}",mode="{mode}"}} '
                         f"{1000 + step * 10 * per_s} {at_ms}")
    lines.append(f'node_memory_MemTotal_bytes{{instance="node-a"}} {16 << 30} {at_ms}')
    lines.append(f'node_memory_MemAvailable_bytes{{instance="node-a"}} {12 << 30} {at_ms}')
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdapterProcess]:
    values = yaml.safe_load((REPO / "charts" / "gpu-autoscaler" / "values.yaml").read_text())
    tmp = tmp_path_factory.mktemp("chart-resource-rules")
    (tmp / "rules.yaml").write_text(yaml.safe_dump({"resourceRules": values["adapter"]["rules"]["resource"]}))
    start_ms = int(time.time() * 1000) - 20_000
    endpoint = MetricsEndpoint(exposition(0, start_ms))
    prom = PrometheusServer([(endpoint.address, {})], job="kubelet", honor_labels=True).start()
    process = None
    try:
        prom.wait_for('node_memory_MemAvailable_bytes{instance="node-a"}', timeout=30)
        endpoint.text = exposition(1, start_ms + 10_000)
        wait_until(lambda: prom.query("count(count_over_time(node_memory_MemTotal_bytes[5m]) >= 2)"), 30,
                   "the second sample in Prometheus")
        # The samples keep their fixed timestamps (for an exact irate), so they age while the tests run: no
        # sample-age limit here (tests/test_resource_values.py checks that policy on these rules).
        process = AdapterProcess(prom.url, str(tmp / "certs"), ["--config", str(tmp / "rules.yaml"),
                                                                 "--max-sample-age", "0"])
        yield process
    finally:
        if process is not None:
            process.stop()
        prom.stop()
        endpoint.stop()


def test_pods_from_cadvisor_series(adapter: AdapterProcess) -> None:
    response = adapter.get("/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods/infer-0")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["window"] == "5m0s"
    assert {c["name"]: c["usage"] for c in body["containers"]} == {
        "main": {"cpu": "2500m", "memory": "1Gi"}, "sidecar": {"cpu": "50m", "memory": "1Mi"}}


def test_nodes_from_node_exporter_series(adapter: AdapterProcess) -> None:
    response = adapter.get("/apis/metrics.k8s.io/v1beta1/nodes/node-a")
    assert response.status_code == 200, response.text
    # cpu 0 half idle, cpu 1 fully idle: 0.5 cores busy; MemTotal - MemAvailable = 4Gi
    assert response.json()["usage"] == {"cpu": "500m", "memory": "4Gi"}
