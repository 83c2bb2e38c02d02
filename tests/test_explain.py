"""Explain: ``gpu-adapter explain`` and ``GET /debug/explain/<API path>`` against a real Prometheus show the rule,
the rendered PromQL, Prometheus' raw samples, the objects and the final items, for Object, Pods (wildcard) and
external requests; errors are the API's own Status errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapter.api.status import ApiError
from adapter.presets.gpu import gpu_presets
from adapter.provider.explain import parse_api_path, prometheus_value, query_selectors
from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port

pytestmark = pytest.mark.e2e

EXPOSITION = """\
DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="ml",pod="infer-0"} 50
DCGM_FI_DEV_GPU_UTIL{gpu="1",namespace="ml",pod="infer-0"} 100
DCGM_FI_DEV_GPU_UTIL{gpu="2",namespace="ml",pod="infer-1"} 30
DCGM_FI_DEV_GPU_UTIL{gpu="3",namespace="other",pod="x-0"} 10
DCGM_FI_DEV_FB_USED{gpu="0",namespace="ml",pod="infer-0"} 1000
DCGM_FI_DEV_FB_USED{gpu="4",namespace="ml",pod="broken-0"} NaN
DCGM_FI_DEV_POWER_USAGE{gpu="0",namespace="ml",pod="infer-0"} 100.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",namespace="ml",pod="infer-0"} 200.25
DCGM_FI_DEV_POWER_USAGE{gpu="3",namespace="other",pod="x-0"} 7
"""

RULES = """\
include: [gpu-presets]
externalRules:
- seriesQuery: 'DCGM_FI_DEV_POWER_USAGE{namespace!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  name: {matches: '^DCGM_FI_DEV_POWER_USAGE$', as: 'gpu_power_watts_total'}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'
"""

C = "/apis/custom.metrics.k8s.io"
E = "/apis/external.metrics.k8s.io"
PODS = f"{C}/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL"
SERVICE = f"{C}/v1beta1/namespaces/default/services/dcgm-exporter/DCGM_FI_DEV_GPU_UTIL_AVG"
EXTERNAL = f"{E}/v1beta1/namespaces/ml/gpu_power_watts_total"


@dataclass
class Stack:
    prom: PrometheusServer
    adapter: AdapterProcess
    rules: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("explain")
    endpoint = MetricsEndpoint(EXPOSITION)
    prom = PrometheusServer([(endpoint.address, {"service": "dcgm-exporter"})], honor_labels=True).start()
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    adapter = None
    try:
        prom.wait_for("DCGM_FI_DEV_POWER_USAGE", lambda r: len(r) == 3, timeout=30)
        adapter = AdapterProcess(prom.url, str(tmp / "certs"), ["--config", str(rules)])
        yield Stack(prom, adapter, rules)
    finally:
        if adapter is not None:
            adapter.stop()
        prom.stop()
        endpoint.stop()


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapter", "explain", "--prometheus-url", stack.prom.url,
                           "--config", str(stack.rules), *args], capture_output=True, text=True, timeout=60)


def cli_json(stack: Stack, *args: str) -> dict[str, Any]:
    out = cli(stack, "--output", "json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def debug(stack: Stack, path: str, status: int = 200, **params: str) -> dict[str, Any]:
    response = stack.adapter.get("/debug/explain" + path, **params)
    assert response.status_code == status, response.text
    return response.json()


def samples_by_object(rule: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    return {s["object"]: (s["value"], s["used"]) for s in rule["samples"]}


def test_pods_wildcard_shows_the_rule_promql_raw_samples_objects_and_items(stack: Stack) -> None:
    report = cli_json(stack, PODS)
    assert (report["request"]["namespace"], report["request"]["resource"], report["request"]["name"]) == (
        "ml", "pods", "*")
    # no labelSelector: every pod with series in the namespace, no Kubernetes API needed
    assert report["objects"] == {"labelSelector": "", "names": None, "withValues": ["infer-0", "infer-1"]}
    first = report["rules"][0]
    assert first["rule"] == "gpu-presets:rules[0]" and first["source"] == "gpu-presets"
    assert first["seriesQuery"] == 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
    assert first["metricsQuery"] == "avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})"
    assert first["promql"] == 'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod!=""})'
    assert samples_by_object(first) == {"infer-0": ("75", True), "infer-1": ("30", True)}
    sample = first["samples"][0]
    assert set(sample) == {"labels", "value", "timestamp", "time", "object", "used"}
    assert sample["labels"] == {"pod": sample["object"]}
    assert {(i["describedObject"]["name"], i["value"]) for i in report["items"]} == {("infer-0", "75"),
                                                                                       ("infer-1", "30")}
    assert report["items"][0]["metric"] == {"name": "DCGM_FI_DEV_GPU_UTIL", "selector": None}  # v1beta2 shape
    assert report["status"] is None


def test_object_metric_in_text(stack: Stack) -> None:
    out = cli(stack, SERVICE)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    (position,) = [i for i, r in enumerate(gpu_presets().rules) if r.name.as_ == "DCGM_FI_DEV_GPU_UTIL_AVG"]
    assert f"Rule gpu-presets:rules[{position}] (gpu-presets), series DCGM_FI_DEV_GPU_UTIL" in text
    assert "name:         matches ^DCGM_FI_DEV_GPU_UTIL$ as DCGM_FI_DEV_GPU_UTIL_AVG" in text
    assert 'PromQL:       avg by (service) (DCGM_FI_DEV_GPU_UTIL{service="dcgm-exporter"})' in text
    assert 'used 47.5 @ ' in text and '{service="dcgm-exporter"}' in text  # (50 + 100 + 30 + 10) / 4, raw
    assert "Objects  dcgm-exporter" in text
    assert "Service dcgm-exporter: 47500m @ " in text  # the item as a Quantity


def test_external_through_the_debug_endpoint(stack: Stack) -> None:
    report = debug(stack, EXTERNAL)
    assert report["objects"] is None
    (rule,) = report["rules"]
    assert rule["rule"] == "externalRules[0]" and rule["source"] == str(stack.rules)
    assert rule["name"] == {"matches": "^DCGM_FI_DEV_POWER_USAGE$", "as": "gpu_power_watts_total"}
    assert rule["promql"] == 'sum(DCGM_FI_DEV_POWER_USAGE{namespace="ml"})'
    assert [(s["labels"], s["value"], s["used"]) for s in rule["samples"]] == [({}, "300.75", True)]
    assert [(i["metricName"], i["value"]) for i in report["items"]] == [("gpu_power_watts_total", "300750m")]
    # what the API itself answers
    api = stack.adapter.get(EXTERNAL).json()
    assert api["items"] == report["items"]


def test_debug_endpoint_and_cli_tell_the_same_story(stack: Stack) -> None:
    from_cli = cli_json(stack, PODS)
    from_api = debug(stack, PODS)
    assert from_api["request"] == from_cli["request"]
    assert [r["promql"] for r in from_api["rules"]] == [r["promql"] for r in from_cli["rules"]]
    assert [i["value"] for i in from_api["items"]] == [i["value"] for i in from_cli["items"]]


def test_a_nan_sample_shows_why_the_api_answers_404(stack: Stack) -> None:
    path = f"{C}/v1beta1/namespaces/ml/pods/broken-0/DCGM_FI_DEV_FB_USED"
    report = debug(stack, path)
    assert samples_by_object(report["rules"][0]) == {"broken-0": ("NaN", False)}
    assert report["items"] == []
    assert report["status"] == stack.adapter.get(path).json()  # the very Status the API answers
    assert report["status"]["code"] == 404


def test_metric_label_selector_reaches_the_promql(stack: Stack) -> None:
    report = cli_json(stack, f"{C}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL",
                      "--metric-label-selector", "gpu=1")
    assert report["rules"][0]["promql"] == 'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{gpu="1",namespace="ml",pod="infer-0"})'
    assert report["objects"]["names"] == ["infer-0"]
    assert [i["value"] for i in report["items"]] == ["100"]
    assert report["items"][0]["selector"] == {"matchLabels": {"gpu": "1"}}


@pytest.mark.parametrize(("path", "args", "line"), [
    (f"{C}/v1beta1/namespaces/ml/pods/infer-0/nope", [],
     "gpu-adapter: error: 404 NotFound: the server could not find the metric nope for pods infer-0"),
    (f"{C}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL", ["--metric-label-selector", "gpu in (0"],
     "gpu-adapter: error: 400 BadRequest: invalid metricLabelSelector"),
    (f"{PODS}?labelSelector=app%3Dinfer", [],
     "gpu-adapter: error: 400 BadRequest: labelSelector needs the Kubernetes API"),
    (f"{C}/v1beta1", [], "gpu-adapter: error: 400 BadRequest: explain needs a metric request path"),
])
def test_cli_errors_are_one_line_with_the_api_status(stack: Stack, path: str, args: list[str], line: str) -> None:
    out = cli(stack, path, *args)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), out.stderr
    assert out.stdout == ""


def test_debug_endpoint_errors_are_the_api_status(stack: Stack) -> None:
    path = f"{C}/v1beta1/namespaces/ml/pods/infer-0/nope"
    assert debug(stack, path, 404) == stack.adapter.get(path).json()
    body = debug(stack, PODS, 400, labelSelector="app=infer")
    assert body == stack.adapter.get(PODS, labelSelector="app=infer").json()


def test_an_unreachable_prometheus_is_one_line() -> None:
    out = subprocess.run([sys.executable, "-m", "adapter", "explain", "--prometheus-url",
                          f"http://127.0.0.1:{free_port()}", "--prometheus-timeout", "1s", PODS],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("gpu-adapter: error: 503 ServiceUnavailable: cannot list series from http://127.0.0.1:")


@pytest.mark.parametrize("path", ["/apis/custom.metrics.k8s.io/v9/pods/p/m", "/apis/other.k8s.io/v1/x",
                                  "/api/v1/pods", "/apis/external.metrics.k8s.io/v1beta2/namespaces/ml/m"])
def test_unknown_api_paths_are_404(path: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_api_path(path)
    assert info.value.code == 404


def test_path_parsing_and_values() -> None:
    target = parse_api_path(f"{C}/v1beta2/namespaces/ml/pods/%2A/m?labelSelector=a%3Db")
    assert target.metric_path is not None and target.metric_path.wildcard
    assert query_selectors(f"{PODS}?labelSelector=a%3Db&metricLabelSelector=gpu%3D0") == ("a=b", "gpu=0")
    external = parse_api_path(EXTERNAL)
    assert (external.namespace, external.metric) == ("ml", "gpu_power_watts_total")
    assert [prometheus_value(v) for v in (75.0, 100.5, float("nan"), float("inf"), -float("inf"), 0.1)] == [
        "75", "100.5", "NaN", "+Inf", "-Inf", "0.1"]
