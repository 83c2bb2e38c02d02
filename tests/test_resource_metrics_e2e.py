"""metrics.k8s.io from resourceRules: the real adapter over HTTPS, a real Prometheus scraping cAdvisor- and
node-exporter-shaped gauges (gauges, so the figures are exact without waiting for rate windows)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from adapter.api.resource_metrics import cpu_quantity, memory_quantity
from adapter.rules import RulesError
from adapter.rulesfile.loader import parse_rules
from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.resource_rules import resource_rules_yaml

pytestmark = pytest.mark.e2e

EXPOSITION = """\
cpu_cores{namespace="ml",pod="infer-0",container="main",node="node-a"} 0.25
cpu_cores{namespace="ml",pod="infer-0",container="sidecar",node="node-a"} 0.000123456
cpu_cores{namespace="ml",pod="infer-1",container="main",node="node-a"} 1.5
cpu_cores{namespace="ml",pod="no-memory",container="main",node="node-a"} 1
cpu_cores{namespace="other",pod="x-0",container="main",node="node-b"} 0.1
mem_bytes{namespace="ml",pod="infer-0",container="main",node="node-a"} 1073741824
mem_bytes{namespace="ml",pod="infer-0",container="sidecar",node="node-a"} 1536
mem_bytes{namespace="ml",pod="infer-1",container="main",node="node-a"} 2097152
mem_bytes{namespace="other",pod="x-0",container="main",node="node-b"} 1000
node_cpu{instance="node-a"} 3.5
node_cpu{instance="node-b"} 0.5
node_cpu{instance="node-c"} 1
node_mem{instance="node-a"} 8589934592
node_mem{instance="node-b"} 4294967296
"""

RULES = resource_rules_yaml(window="5m", cpu=("cpu_cores", "node_cpu"), memory=("mem_bytes", "node_mem"),
                            node_label="instance")
BASE = "/apis/metrics.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    endpoint = MetricsEndpoint(EXPOSITION)
    prom = PrometheusServer([(endpoint.address, {})], job="cadvisor", honor_labels=True).start()
    try:
        prom.wait_for('node_mem{instance="node-b"}', timeout=30)
        yield prom
    finally:
        prom.stop()
        endpoint.stop()


@pytest.fixture(scope="module")
def adapter(prometheus: PrometheusServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdapterProcess]:
    tmp = tmp_path_factory.mktemp("resource")
    (tmp / "rules.yaml").write_text(RULES)
    process = AdapterProcess(prometheus.url, str(tmp / "certs"), ["--config", str(tmp / "rules.yaml")])
    try:
        yield process
    finally:
        process.stop()


def get(adapter: AdapterProcess, path: str, status: int = 200, **params: str) -> dict:
    response = adapter.get(path, **params)
    assert response.status_code == status, response.text
    return response.json()


def usage(body: dict) -> dict:
    return {(i["metadata"].get("namespace"), i["metadata"]["name"]):
            i.get("usage") or {c["name"]: c["usage"] for c in i["containers"]} for i in body["items"]}


def test_group_is_listed_and_discoverable(adapter: AdapterProcess) -> None:
    groups = [g["name"] for g in get(adapter, "/apis")["groups"]]
    assert "metrics.k8s.io" in groups
    resources = get(adapter, BASE)["resources"]
    assert {(r["name"], r["kind"], r["namespaced"]) for r in resources} == {
        ("nodes", "NodeMetrics", False), ("pods", "PodMetrics", True)}


def test_pods_in_a_namespace(adapter: AdapterProcess) -> None:
    body = get(adapter, f"{BASE}/namespaces/ml/pods")
    assert body["kind"] == "PodMetricsList" and body["apiVersion"] == "metrics.k8s.io/v1beta1"
    assert all(i["window"] == "5m0s" for i in body["items"])
    # no-memory has cpu but no memory sample: left out, never reported with an invented 0
    assert usage(body) == {
        ("ml", "infer-0"): {"main": {"cpu": "250m", "memory": "1Gi"},
                            "sidecar": {"cpu": "123456n", "memory": "1536"}},
        ("ml", "infer-1"): {"main": {"cpu": "1500m", "memory": "2Mi"}},
    }


def test_pods_in_all_namespaces(adapter: AdapterProcess) -> None:
    assert set(usage(get(adapter, f"{BASE}/pods"))) == {("ml", "infer-0"), ("ml", "infer-1"), ("other", "x-0")}


def test_single_pod_and_missing_pod(adapter: AdapterProcess) -> None:
    body = get(adapter, f"{BASE}/namespaces/other/pods/x-0")
    assert body["kind"] == "PodMetrics" and body["metadata"]["namespace"] == "other"
    assert body["containers"] == [{"name": "main", "usage": {"cpu": "100m", "memory": "1000"}}]
    for name in ("gone", "no-memory"):
        status = get(adapter, f"{BASE}/namespaces/ml/pods/{name}", 404)
        assert status["kind"] == "Status" and status["reason"] == "NotFound"
        assert status["message"] == f'podmetrics.metrics.k8s.io "ml/{name}" not found'


def test_nodes_list_and_single(adapter: AdapterProcess) -> None:
    body = get(adapter, f"{BASE}/nodes")
    assert body["kind"] == "NodeMetricsList"
    # node-c has cpu but no memory sample: left out
    assert usage(body) == {(None, "node-a"): {"cpu": "3500m", "memory": "8Gi"},
                           (None, "node-b"): {"cpu": "500m", "memory": "4Gi"}}
    single = get(adapter, f"{BASE}/nodes/node-b")
    assert single["kind"] == "NodeMetrics" and single["usage"] == {"cpu": "500m", "memory": "4Gi"}
    assert get(adapter, f"{BASE}/nodes/node-c", 404)["reason"] == "NotFound"


def test_label_selector_without_kubernetes_api_is_a_clear_400(adapter: AdapterProcess) -> None:
    status = get(adapter, f"{BASE}/namespaces/ml/pods", 400, labelSelector="app=infer")
    assert "labelSelector" in status["message"]


@pytest.mark.parametrize(("cores", "text"), [(0.25, "250m"), (1, "1"), (0.000123456, "123456n"), (2.5, "2500m")])
def test_cpu_quantity(cores: float, text: str) -> None:
    assert cpu_quantity(cores) == text


@pytest.mark.parametrize(("value", "text"), [(1073741824, "1Gi"), (1536, "1536"), (1000, "1000"), (2048, "2Ki"),
                                             (0, "0"), (1023.9, "1023")])
def test_memory_quantity(value: float, text: str) -> None:
    assert memory_quantity(value) == text


@pytest.mark.parametrize(("edit", "message"), [
    (lambda r: r.replace("  window: 5m\n", ""), "rules.yaml: resourceRules.window: is required"),
    (lambda r: r.replace("window: 5m", "window: soon"),
     "rules.yaml: resourceRules.window: 'soon': expected a Prometheus duration"),
    (lambda r: r.replace("    containerLabel: container\n", "    containerLabel: container\n    extra: 1\n", 1),
     "rules.yaml: resourceRules.cpu.extra: unknown field"),
    (lambda r: r.replace("        instance: {resource: node}\n", "", 1),
     "rules.yaml: resourceRules.cpu.resources: must name a label for nodes"),
    (lambda r: r.replace("sum by (<<.GroupBy>>) (cpu_cores", "sum by (<<.GroupBy>> (cpu_cores", 1),
     "rules.yaml: resourceRules.cpu.containerQuery: renders invalid PromQL"),
])
def test_strict_parsing_names_the_field(edit, message: str) -> None:
    with pytest.raises(RulesError) as caught:
        parse_rules(edit(RULES), "rules.yaml")
    assert str(caught.value).startswith(message), str(caught.value)


def test_parsed_rules_render_escaped_queries() -> None:
    rules = parse_rules(RULES, "rules.yaml").resource_rules
    assert rules is not None and rules.window_s == 300
    query = rules.cpu.render_pods('ml"x', ["a.b", "c"])
    assert 'namespace="ml\\"x"' in query and 'pod=~"a\\\\.b|c"' in query
    assert "by (pod,container)" in query
    assert rules.memory.render_nodes(["n"]) == 'sum by (instance) (node_mem{instance="n"})'


def test_field_selectors(adapter: AdapterProcess) -> None:
    body = get(adapter, f"{BASE}/pods", fieldSelector="metadata.namespace!=ml")
    assert set(usage(body)) == {("other", "x-0")}
    body = get(adapter, f"{BASE}/nodes", fieldSelector="metadata.name=node-a")
    assert set(usage(body)) == {(None, "node-a")}
    status = get(adapter, f"{BASE}/pods", 400, fieldSelector="spec.nodeName=node-a")
    assert status["message"] == '"spec.nodeName" is not a known field selector: only "metadata.name", ' \
                                '"metadata.namespace"' and status["reason"] == "BadRequest"


def test_timestamps_are_the_earliest_sample_of_the_object() -> None:
    """provider_test.go: "the reported times for each are the earliest times for each pod" (cpu 10/20, memory
    11/21 -> 10; node cpu 14, memory 12 -> 12)."""
    from adapter.api.resource_metrics import NodeUsage, PodUsage, Usage, node_metrics, pod_metrics

    pod = PodUsage("ns", "pod1", (("cont1", Usage(1100, 3100, min(10, 11))), ("cont2", Usage(1110, 3110, 20))))
    assert pod_metrics(pod, 60)["timestamp"] == "1970-01-01T00:00:10Z"
    assert pod_metrics(pod, 60)["window"] == "1m0s"
    node = NodeUsage("node2", Usage(1200, 2200, min(14, 12)))
    assert node_metrics(node, 90)["timestamp"] == "1970-01-01T00:00:12Z"
    assert node_metrics(node, 90)["window"] == "1m30s"


def test_check_reports_what_each_resource_query_yields(prometheus: PrometheusServer, tmp_path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.replace("node_mem{", "node_memory_nothing{"))
    out = subprocess.run([sys.executable, "-m", "adapter", "check", "--prometheus-url", prometheus.url, "--config",
                          str(rules)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = re.sub(r"\s+", " ", out.stdout)
    assert "resourceRules.cpu.containerQuery sum by (namespace,pod,container) (cpu_cores{pod!=\"\",container!=\"\"}) " \
           "4 pods with samples" in text
    assert "resourceRules.cpu.nodeQuery sum by (instance) (node_cpu{instance!=\"\"}) 3 nodes with samples" in text
    assert "resourceRules.memory.containerQuery" in text and "3 pods with samples" in text
    assert "resourceRules.memory.nodeQuery sum by (instance) (node_memory_nothing{instance!=\"\"}) matches no " \
           "series" in text


@pytest.mark.parametrize(("path", "verb", "resource", "namespace", "name"), [
    ("/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods", "list", "pods", "ml", ""),
    ("/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods/infer-0", "get", "pods", "ml", "infer-0"),
    ("/apis/metrics.k8s.io/v1beta1/pods", "list", "pods", "", ""),
    ("/apis/metrics.k8s.io/v1beta1/nodes/node-a", "get", "nodes", "", "node-a"),
])
def test_subject_access_review_attributes(path: str, verb: str, resource: str, namespace: str, name: str) -> None:
    """What the SubjectAccessReview asks: verb get/list on pods/nodes in group metrics.k8s.io."""
    from adapter.auth.attributes import ResourceAttributes, request_attributes

    attrs = request_attributes("GET", path)
    assert isinstance(attrs, ResourceAttributes)
    assert (attrs.verb, attrs.group, attrs.version, attrs.resource, attrs.namespace, attrs.name) == (
        verb, "metrics.k8s.io", "v1beta1", resource, namespace, name)


def _explain(prometheus: PrometheusServer, tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    return subprocess.run([sys.executable, "-m", "adapter", "explain", "--prometheus-url", prometheus.url,
                           "--config", str(rules), *args], capture_output=True, text=True, timeout=60)


def test_explain_shows_each_resource_query_its_samples_and_the_items(adapter: AdapterProcess,
                                                                     prometheus: PrometheusServer, tmp_path) -> None:
    done = _explain(prometheus, tmp_path, "-o", "json", f"{BASE}/namespaces/ml/pods")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    cpu, memory = report["queries"]
    assert cpu["rule"] == "resourceRules.cpu.containerQuery" and 'namespace="ml"' in cpu["promql"]
    assert memory["rule"] == "resourceRules.memory.containerQuery"
    by_object = {s["object"]: s for s in cpu["samples"]}
    assert by_object["ml/infer-0 main"]["used"] and by_object["ml/infer-1 main"]["used"]
    # no-memory has a cpu sample but no memory one: left out, and the report says why
    assert not by_object["ml/no-memory main"]["used"]
    assert "cpu and memory are both needed" in by_object["ml/no-memory main"]["unused"]
    api = adapter.get(f"{BASE}/namespaces/ml/pods").json()["items"]

    def comparable(items: list[dict]) -> list[dict]:  # the two answers come from two queries, at two times
        return [{k: v for k, v in i.items() if k not in ("metadata", "timestamp")} | {"name": i["metadata"]["name"]}
                for i in items]

    assert comparable(report["items"]) == comparable(api)
    assert report["objects"]["withValues"] == ["ml/infer-0", "ml/infer-1"]
    text = _explain(prometheus, tmp_path, f"{BASE}/nodes/node-c")
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert "resourceRules.memory.nodeQuery" in flat and 'node_mem{instance="node-c"}' in flat
    assert 'Answer 404 NotFound: nodemetrics.metrics.k8s.io "node-c" not found' in flat


def test_explain_through_the_debug_endpoint_matches_the_api(adapter: AdapterProcess) -> None:
    report = adapter.get(f"/debug/explain{BASE}/nodes").json()
    assert [i["metadata"]["name"] for i in report["items"]] == ["node-a", "node-b"]
    assert [i["usage"] for i in report["items"]] == [i["usage"] for i in adapter.get(f"{BASE}/nodes").json()["items"]]
    node_c = [s for s in report["queries"][0]["samples"] if s["object"] == "node-c"]
    assert node_c and not node_c[0]["used"]
    bad = adapter.get(f"/debug/explain{BASE}/namespaces/ml/deployments")
    assert bad.status_code == 400 and "explain needs a metrics request path" in bad.json()["message"]
