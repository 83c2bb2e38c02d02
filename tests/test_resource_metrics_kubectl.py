"""``kubectl top`` (the real binary from the tools folder) against the adapter's metrics.k8s.io, through the fake
Kubernetes API acting as the aggregator (it forwards /apis/metrics.k8s.io to the adapter and serves the nodes
and pods kubectl and the adapter's label-selector resolver read)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.support.adapter_process import AdapterProcess
from tests.support.fake_kube import FakeKube, node, pod
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.tools import require_tool
from tests.test_resource_metrics_e2e import EXPOSITION, RULES

pytestmark = [pytest.mark.e2e, pytest.mark.tools]


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], AdapterProcess]]:
    binary = require_tool("kubectl")
    tmp = tmp_path_factory.mktemp("kubectl-top")
    kube = FakeKube()
    for name, cpu, memory in (("node-a", "4", "16Gi"), ("node-b", "2", "8Gi")):
        obj = node(name, {"kubernetes.io/hostname": name, "pool": "gpu" if name == "node-a" else "cpu"})
        obj["status"] = {"allocatable": {"cpu": cpu, "memory": memory}, "capacity": {"cpu": cpu, "memory": memory}}
        kube.put("", "v1", "nodes", obj)
    for ns, name, app in (("ml", "infer-0", "infer"), ("ml", "infer-1", "batch"), ("other", "x-0", "x")):
        kube.put("", "v1", "pods", pod(ns, name, {"app": app}))
    kube.start()
    endpoint = MetricsEndpoint(EXPOSITION)
    prom = PrometheusServer([(endpoint.address, {})], job="cadvisor", honor_labels=True).start()
    adapter = None
    try:
        prom.wait_for('node_mem{instance="node-b"}', timeout=30)
        (tmp / "rules.yaml").write_text(RULES)
        adapter = AdapterProcess(prom.url, str(tmp / "certs"),
                                 ["--config", str(tmp / "rules.yaml"),
                                  "--kubeconfig", kube.write_kubeconfig(tmp / "adapter-kubeconfig")])
        kube.aggregated["metrics.k8s.io"] = adapter.url
        config = kube.write_kubeconfig(tmp / "kubeconfig")
        yield [binary, "--kubeconfig", config, "--cache-dir", str(tmp / "cache")], adapter
    finally:
        if adapter is not None:
            adapter.stop()
        prom.stop()
        endpoint.stop()
        kube.stop()


def top(kubectl: list[str], *args: str) -> list[list[str]]:
    done = subprocess.run([*kubectl, "top", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines()]


def test_top_pods_in_a_namespace(kubectl: tuple) -> None:
    # infer-0: 250m + 0.123456m, which kubectl rounds up to the next millicore; 1Gi + 1536 bytes -> 1024Mi
    assert top(kubectl[0], "pods", "-n", "ml") == [
        ["NAME", "CPU(cores)", "MEMORY(bytes)"], ["infer-0", "251m", "1024Mi"], ["infer-1", "1500m", "2Mi"]]


def test_top_pods_all_namespaces_and_containers(kubectl: tuple) -> None:
    rows = top(kubectl[0], "pods", "-A")
    assert rows[1:] == [["ml", "infer-0", "251m", "1024Mi"], ["ml", "infer-1", "1500m", "2Mi"],
                        ["other", "x-0", "100m", "0Mi"]]
    rows = top(kubectl[0], "pods", "-n", "ml", "infer-0", "--containers")
    assert rows[1:] == [["infer-0", "main", "250m", "1024Mi"], ["infer-0", "sidecar", "1m", "0Mi"]]


def test_top_pods_with_a_label_selector(kubectl: tuple) -> None:
    assert top(kubectl[0], "pods", "-n", "ml", "-l", "app=batch")[1:] == [["infer-1", "1500m", "2Mi"]]


def test_top_nodes(kubectl: tuple) -> None:
    rows = top(kubectl[0], "nodes")
    assert rows[1:] == [["node-a", "3500m", "87%", "8192Mi", "50%"], ["node-b", "500m", "25%", "4096Mi", "50%"]]
    assert top(kubectl[0], "nodes", "node-b")[1:] == [["node-b", "500m", "25%", "4096Mi", "50%"]]


def test_missing_pod_is_an_error(kubectl: tuple) -> None:
    done = subprocess.run([*kubectl[0], "top", "pods", "-n", "ml", "gone"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode != 0 and 'podmetrics.metrics.k8s.io "ml/gone" not found' in done.stderr



def _raw(kubectl: list[str], path: str) -> dict:
    done = subprocess.run([*kubectl, "get", "--raw", path], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_items_carry_the_objects_labels_and_the_answer_time(kubectl: tuple) -> None:
    """As metrics-server (pkg/storage/pod.go, node.go) and prometheus-adapter (pkg/resourceprovider): an item's
    metadata holds the object's labels, and its creationTimestamp is when the answer was made."""
    before = datetime.now(UTC).replace(microsecond=0)
    pods = _raw(kubectl[0], "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods")["items"]
    assert {p["metadata"]["name"]: p["metadata"]["labels"] for p in pods} == {
        "infer-0": {"app": "infer"}, "infer-1": {"app": "batch"}}
    nodes = _raw(kubectl[0], "/apis/metrics.k8s.io/v1beta1/nodes")["items"]
    assert {n["metadata"]["name"]: n["metadata"]["labels"]["pool"] for n in nodes} == {"node-a": "gpu",
                                                                                        "node-b": "cpu"}
    one = _raw(kubectl[0], "/apis/metrics.k8s.io/v1beta1/namespaces/other/pods/x-0")
    assert one["metadata"]["labels"] == {"app": "x"}
    for item in (*pods, *nodes, one):
        made = datetime.fromisoformat(item["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        assert before <= made <= datetime.now(UTC)


def test_a_field_selector_on_spec_node_name_is_refused_as_metrics_server_refuses_it(kubectl: tuple) -> None:
    """metrics-server registers no field labels of its own, so the generic API server's default conversion
    refuses every field but metadata.name and metadata.namespace with this message (a 400)."""
    done = subprocess.run([*kubectl[0], "top", "pods", "-A", "--field-selector", "spec.nodeName=node-a"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert '"spec.nodeName" is not a known field selector: only "metadata.name", "metadata.namespace"' in done.stderr
    rows = top(kubectl[0], "pods", "-A", "--field-selector", "metadata.namespace=other")
    assert rows[1:] == [["other", "x-0", "100m", "0Mi"]]
