"""The EKS GPU guide's prometheus-adapter values file rule set, unchanged, through a real Prometheus and the real
``kubectl get --raw``: its rules name the metric with ``name: {as: ...}`` alone (no ``matches``) and map
``exported_container`` to Services (../shared/reference/eks-gpu-hpa-guide.md, section 5,
prometheus-adapter-values.yaml).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.adapter_process import AdapterProcess
from tests.support.kubectl import kubectl_get_raw
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer

pytestmark = [pytest.mark.e2e, pytest.mark.tools]

# The guide's `rules.custom` (its values file's `rules:` block holds them under `custom:`; the rules file is that list).
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
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{exported_namespace!="",exported_container!="",exported_pod!=""}'
  name:
    as: "DCGM_FI_DEV_GPU_UTIL_MIN"
  resources:
    overrides:
      exported_container: {resource: "service"}
      exported_namespace: {resource: "namespace"}
      exported_pod: {resource: "pod"}
  metricsQuery: min by (exported_namespace, exported_container) (round(min_over_time(<<.Series>>[1m])))
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{exported_namespace!="",exported_container!="",exported_pod!=""}'
  name:
    as: "DCGM_FI_DEV_GPU_UTIL_MAX"
  resources:
    overrides:
      exported_container: {resource: "service"}
      exported_namespace: {resource: "namespace"}
      exported_pod: {resource: "pod"}
  metricsQuery: max by (exported_namespace, exported_container) (round(max_over_time(<<.Series>>[1m])))
"""

GPUS = [  # gpu, namespace, container (= the Service's name, as the guide requires), pod, utilisation
    ("0", "default", "gpu-api", "gpu-api-0", 20),
    ("1", "default", "gpu-api", "gpu-api-0", 40),
    ("2", "default", "gpu-api", "gpu-api-1", 60),
    ("3", "staging", "gpu-api", "gpu-api-s0", 90),  # same Service name, another namespace
    ("4", "default", "other-svc", "other-0", 10),
]
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta1"


def exposition() -> str:
    # What Prometheus stores for dcgm-exporter behind a ServiceMonitor without honorLabels: the workload's labels
    # renamed exported_*.
    return "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-{gpu}",exported_namespace="{ns}",exported_container="{c}",'
        f'exported_pod="{pod}"}} {util}\n' for gpu, ns, c, pod, util in GPUS)


@pytest.fixture(scope="module")
def guide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AdapterProcess, Path]]:
    tmp = tmp_path_factory.mktemp("guide")
    rules = tmp / "rules.yaml"
    rules.write_text(GUIDE_RULES)
    with (MetricsEndpoint(exposition()) as endpoint,
          PrometheusServer([(endpoint.address, {})], job="dcgm-exporter") as prom):
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{exported_pod="other-0"}', timeout=30)
        with AdapterProcess(prom.url, str(tmp / "certs"), ["--config", str(rules)]) as adapter:
            yield adapter, tmp


def kubectl_raw(adapter: AdapterProcess, tmp: Path, path: str) -> subprocess.CompletedProcess[str]:
    return kubectl_get_raw(adapter.url, tmp, path)


def test_the_guide_lists_its_metrics_under_their_as_names(guide) -> None:
    adapter, tmp = guide
    out = kubectl_raw(adapter, tmp, CUSTOM)
    assert out.returncode == 0, out.stderr
    names = {r["name"] for r in json.loads(out.stdout)["resources"]}
    for metric in ("DCGM_FI_DEV_GPU_UTIL_AVG", "DCGM_FI_DEV_GPU_UTIL_MIN", "DCGM_FI_DEV_GPU_UTIL_MAX"):
        assert {f"services/{metric}", f"pods/{metric}", f"namespaces/{metric}"} <= names
    assert not any(n.endswith("/DCGM_FI_DEV_GPU_UTIL") for n in names)


@pytest.mark.parametrize(("metric", "value"), [("DCGM_FI_DEV_GPU_UTIL_AVG", "40"), ("DCGM_FI_DEV_GPU_UTIL_MIN", "20"),
                                               ("DCGM_FI_DEV_GPU_UTIL_MAX", "60")])
def test_the_guide_service_metric_answers_its_own_namespace(guide, metric: str, value: str) -> None:
    # default/gpu-api has GPUs at 20, 40 and 60; staging/gpu-api (90) is another Service, though the guide's query
    # returns it too (it does not use <<.LabelMatchers>>).
    adapter, tmp = guide
    out = kubectl_raw(adapter, tmp, f"{CUSTOM}/namespaces/default/services/gpu-api/{metric}")
    assert out.returncode == 0, out.stderr
    [item] = json.loads(out.stdout)["items"]
    assert item["describedObject"] == {"kind": "Service", "namespace": "default", "name": "gpu-api",
                                       "apiVersion": "/v1"}
    assert (item["metricName"], item["value"]) == (metric, value)
    out = kubectl_raw(adapter, tmp, f"{CUSTOM}/namespaces/staging/services/gpu-api/{metric}")
    assert json.loads(out.stdout)["items"][0]["value"] == "90"


def test_several_series_for_one_object_are_no_value_logged_and_counted(guide) -> None:
    # namespaces/default under the guide's rule: its query returns one series per (namespace, container), so the
    # namespace default gets two (gpu-api 40, other-svc 10). Which is "the namespace's" is not ours to pick.
    adapter, tmp = guide
    path = f"{CUSTOM}/namespaces/default/metrics/DCGM_FI_DEV_GPU_UTIL_AVG"
    for _ in range(2):
        out = kubectl_raw(adapter, tmp, path)
        assert out.returncode != 0
        assert "the server could not find the metric DCGM_FI_DEV_GPU_UTIL_AVG for namespaces default" in out.stderr
    metrics = adapter.get("/metrics").text
    assert 'gpu_adapter_several_series_total{outcome="conflict",rule="rules[0]"} 2.0' in metrics
    log = adapter.stop()
    lines = [line for line in log.splitlines() if "2 series with different values for namespaces default" in line]
    assert len(lines) == 1, log  # once per rule and object
    assert "rules[0]" in lines[0] and "DCGM_FI_DEV_GPU_UTIL_AVG" in lines[0]
