"""The EKS GPU-autoscaling guide's prometheus-adapter rule, unchanged, through a real Prometheus and kubectl.

The guide (../shared/reference/eks-gpu-hpa-guide.md and its prometheus-adapter-values.yaml) scrapes
dcgm-exporter without honor_labels, so the GPU pod's labels arrive as exported_namespace/exported_container/
exported_pod, and names its metric with `name: {as: DCGM_FI_DEV_GPU_UTIL_AVG}` and no `matches`: upstream
matches ".*" then (pkg/naming/metric_namer.go), so the metric is served as DCGM_FI_DEV_GPU_UTIL_AVG.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.tools import require_tool

GUIDE_RULES = """\
rules:
  - seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{exported_namespace!="",exported_container!="",exported_pod!=""}'
    name:
      as: "DCGM_FI_DEV_GPU_UTIL_AVG"
    resources:
      overrides:
        exported_namespace: {resource: "namespace"}
        exported_container: {resource: "service"}
        exported_pod: {resource: "pod"}
    metricsQuery: avg by (exported_namespace, exported_container) (round(avg_over_time(<<.Series>>[1m])))
"""

# What dcgm-exporter reports in Kubernetes mode: the GPU's pod in namespace/pod/container.
EXPOSITION = """\
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA A10G",Hostname="ip-10-0-1-5",\
namespace="default",pod="vision-api-7d9f-abcde",container="vision-api"} 40
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA A10G",Hostname="ip-10-0-2-7",\
namespace="default",pod="vision-api-7d9f-fghij",container="vision-api"} 81
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-2",device="nvidia0",modelName="NVIDIA A10G",Hostname="ip-10-0-3-9",\
namespace="batch",pod="trainer-0",container="trainer"} 99
"""
# The scrape target's own labels, as kube-prometheus-stack's ServiceMonitor sets them: they clash with the
# exposition's, so Prometheus (honor_labels false) renames the exposition's to exported_*.
TARGET_LABELS = {"namespace": "gpu-operator", "pod": "dcgm-exporter-x2k8p", "container": "dcgm-exporter",
                 "service": "dcgm-exporter"}
BASE = "/apis/custom.metrics.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdapterProcess]:
    tmp = tmp_path_factory.mktemp("eks-guide")
    endpoint = MetricsEndpoint(EXPOSITION)
    prom = PrometheusServer([(endpoint.address, TARGET_LABELS)], job="dcgm-exporter", honor_labels=False)
    rules = tmp / "rules.yaml"
    rules.write_text(GUIDE_RULES)
    process = None
    try:
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{exported_pod="trainer-0"}', timeout=30)
        process = AdapterProcess(prom.url, str(tmp / "certs"), ["--config", str(rules)])
        yield process
    finally:
        if process is not None:
            process.stop()
        prom.stop()
        endpoint.stop()


def _kubectl_raw(adapter: AdapterProcess, path: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "adapter",
        "clusters": [{"name": "adapter", "cluster": {"server": adapter.url, "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "adapter", "context": {"cluster": "adapter", "user": "nobody"}}],
        "users": [{"name": "nobody", "user": {"token": "not-checked-without-auth"}}]}))
    return subprocess.run([require_tool("kubectl"), "--kubeconfig", str(kubeconfig), "get", "--raw", path],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_the_guides_metric_is_listed_under_its_as_name(adapter: AdapterProcess, tmp_path: Path) -> None:
    out = _kubectl_raw(adapter, BASE, tmp_path)
    assert out.returncode == 0, out.stderr
    names = {resource["name"] for resource in json.loads(out.stdout)["resources"]}
    assert "services/DCGM_FI_DEV_GPU_UTIL_AVG" in names
    assert not any(name.endswith("/DCGM_FI_DEV_GPU_UTIL") for name in names)


def test_the_guides_service_metric_answers_the_average_of_its_gpus(adapter: AdapterProcess, tmp_path: Path) -> None:
    out = _kubectl_raw(adapter, f"{BASE}/namespaces/default/services/vision-api/DCGM_FI_DEV_GPU_UTIL_AVG", tmp_path)
    assert out.returncode == 0, out.stderr
    [item] = json.loads(out.stdout)["items"]
    assert item["describedObject"] == {"kind": "Service", "namespace": "default", "name": "vision-api",
                                       "apiVersion": "/v1"}
    assert item["metricName"] == "DCGM_FI_DEV_GPU_UTIL_AVG"
    assert item["value"] == "60500m"  # avg(round(40), round(81)) = 60.5
