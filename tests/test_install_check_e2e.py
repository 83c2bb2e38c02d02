"""The bare-cluster install end to end, as far as a machine without Kubernetes allows: the fake Kubernetes API holds
the chart's own Services (rendered for a cluster without the Prometheus Operator), an exporter pod and the
EndpointSlices behind them; the real VictoriaMetrics discovers and scrapes them with docs/prometheus/
scrape-configs.yaml through Kubernetes discovery; the real adapter (the chart's rules) answers from it behind the
fake API (acting as the aggregator); and the `helm test` pod's command, as the chart renders it, checks it all:
Available / not Available, a metric / no series, no Prometheus at the URL, RBAC 403, and waiting for a fresh
install."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.support.adapter_process import AdapterProcess
from tests.support.fake_kube import FakeKube, pod
from tests.support.k8s_validation import REPO, find, one
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port
from tests.support.victoriametrics import VictoriaMetricsServer
from tests.test_chart import NAMESPACE, RELEASE, render

pytestmark = [pytest.mark.e2e, pytest.mark.tools]

# What the exporter serves with -k on a GPU node: GPU 0 held by pod ml/infer-0, GPU 1 idle (no pod labels).
EXPOSITION = (
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100",Hostname="gpu-node-1",'
    'namespace="ml",pod="infer-0",container="main"} 70\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H100",Hostname="gpu-node-1"} 10\n'
    'gpu_exporter_gpu_up{gpu="0",UUID="GPU-a"} 1\ngpu_exporter_gpu_up{gpu="1",UUID="GPU-b"} 1\n')
APISERVICES = "apiregistration.k8s.io", "v1", "apiservices"
AVAILABLE = {"type": "Available", "status": "True", "reason": "Passed", "message": "all checks passed"}


@dataclass
class Cluster:
    fake: FakeKube
    vm: VictoriaMetricsServer
    adapter: AdapterProcess
    kubeconfig: str
    docs: list[dict[str, Any]]  # the chart rendered for a bare cluster

    @property
    def check_args(self) -> list[str]:
        """The `helm test` pod's command line, with Prometheus' URL mapped to the test's VictoriaMetrics."""
        container = one(self.docs, "Pod")["spec"]["containers"][0]
        args = [a.replace(a.partition("=")[2], self.vm.url) if a.startswith("--prometheus-url=") else a
                for a in container["args"]]
        return [*container["command"], *args]

    def set_apiservices(self, condition: dict[str, str] | None) -> None:
        for api in find(self.docs, "APIService"):
            obj = copy.deepcopy(api)
            obj["status"] = {"conditions": [condition]} if condition else {}
            self.fake.put(*APISERVICES, obj)


def endpoint_slice(service: str, port_name: str, port: int, pod_obj: dict[str, Any]) -> dict[str, Any]:
    """The EndpointSlice the control plane keeps for a Service: one ready endpoint, the pod behind it."""
    meta = pod_obj["metadata"]
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service}-abcde", "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4", "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True},
                           "nodeName": pod_obj["spec"]["nodeName"],
                           "targetRef": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                                         "uid": meta["uid"]}}]}


def endpoints(service: str, port_name: str, port: int, pod_obj: dict[str, Any]) -> dict[str, Any]:
    """The same as a (legacy) Endpoints object, which annotation-driven scrape jobs (role: endpoints) read."""
    meta = pod_obj["metadata"]
    return {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": service, "namespace": NAMESPACE},
            "subsets": [{"addresses": [{"ip": "127.0.0.1", "nodeName": pod_obj["spec"]["nodeName"],
                                        "targetRef": {"kind": "Pod", "namespace": meta["namespace"],
                                                      "name": meta["name"], "uid": meta["uid"]}}],
                         "ports": [{"name": port_name, "port": port, "protocol": "TCP"}]}]}


# An annotation-driven job as the prometheus-community chart's kubernetes-service-endpoints job is written (its
# values.yaml): Services annotated prometheus.io/scrape "true", scheme/path/port from the annotations,
# honor_labels: true, namespace/service/node as target labels (its labelmap of the Service's labels left out).
ANNOTATION_JOB = {
    "job_name": "kubernetes-service-endpoints", "honor_labels": True, "scrape_interval": "1s",
    "scrape_timeout": "1s", "kubernetes_sd_configs": [{"role": "endpoints"}],
    "relabel_configs": [
        {"source_labels": ["__meta_kubernetes_service_annotation_prometheus_io_scrape"], "action": "keep",
         "regex": "true"},
        {"source_labels": ["__meta_kubernetes_service_annotation_prometheus_io_scheme"], "action": "replace",
         "target_label": "__scheme__", "regex": "(https?)"},
        {"source_labels": ["__meta_kubernetes_service_annotation_prometheus_io_path"], "action": "replace",
         "target_label": "__metrics_path__", "regex": "(.+)"},
        {"source_labels": ["__address__", "__meta_kubernetes_service_annotation_prometheus_io_port"],
         "action": "replace", "target_label": "__address__", "regex": "(.+?)(?::\\d+)?;(\\d+)",
         "replacement": "$1:$2"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
    ]}


def run_check(cluster: Cluster, *args: str, replace: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The pod's command against the fake API; it checks once (the chart's pod waits test.waitSeconds)."""
    command = cluster.check_args
    for old, new in {"--wait-seconds=": "--wait-seconds=0", **(replace or {})}.items():
        command = [new if a.startswith(old) else a for a in command]
    assert command[0] == "gpu-adapter"  # the console script; run as its module here
    return subprocess.run([sys.executable, "-m", "adapter", *command[1:], "--kubeconfig", cluster.kubeconfig, *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("bare-cluster")
    exporter = MetricsEndpoint(EXPOSITION)
    exporter_port = int(exporter.address.rsplit(":", 1)[1])
    # The exporter listens where the chart says it does (its container port, Service and annotations).
    docs = render(None, f"exporter.service.port={exporter_port}", api_versions=())
    fake = FakeKube()
    fake.register("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
    fake.register("", "v1", "endpoints", "Endpoints")
    fake.register(*APISERVICES, "APIService", namespaced=False)
    exporter_service = one(docs, "Service", "dcgm-exporter")
    adapter_service = one(docs, "Service", f"{RELEASE}-gpu-autoscaler-adapter")
    for service in (exporter_service, adapter_service):
        fake.put("", "v1", "services", service)
    node = "gpu-node-1"
    exporter_pod = pod(NAMESPACE, f"{RELEASE}-gpu-autoscaler-exporter-x7k2p", node_name=node)
    exporter_pod["status"]["podIP"] = "127.0.0.1"
    exporter_pod = fake.put("", "v1", "pods", exporter_pod)
    fake.put("discovery.k8s.io", "v1", "endpointslices",
             endpoint_slice("dcgm-exporter", "metrics", exporter_port, exporter_pod))
    fake.put("", "v1", "endpoints", endpoints("dcgm-exporter", "metrics", exporter_port, exporter_pod))
    fake.start()
    jobs = yaml.safe_load((REPO / "docs" / "prometheus" / "scrape-configs.yaml").read_text())["scrape_configs"]
    for job in jobs:
        job["scrape_interval"] = job["scrape_timeout"] = "1s"
        for discovery in job["kubernetes_sd_configs"]:
            discovery["api_server"] = fake.url  # in a cluster: the pod's service account
    vm = adapter = None
    try:
        vm = VictoriaMetricsServer([], scrape_configs=jobs)
        vm.wait_for('DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"}')
        rules = tmp / "rules.yaml"
        rules.write_text(one(docs, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")["data"]["rules.yaml"])
        adapter = AdapterProcess(vm.url, str(tmp / "certs"), ["--config", str(rules)])
        # The adapter's pod behind its Service, so the docs' adapter job scrapes it (HTTPS, its own certificate).
        adapter_pod = pod(NAMESPACE, f"{RELEASE}-gpu-autoscaler-adapter-5d8f-q2w", node_name="node-2")
        adapter_pod["status"]["podIP"] = "127.0.0.1"
        adapter_pod = fake.put("", "v1", "pods", adapter_pod)
        fake.put("discovery.k8s.io", "v1", "endpointslices",
                 endpoint_slice(adapter_service["metadata"]["name"], "https", adapter.port, adapter_pod))
        fake.aggregated["custom.metrics.k8s.io"] = adapter.url
        yield Cluster(fake, vm, adapter, fake.write_kubeconfig(tmp / "kubeconfig"), docs)
    finally:
        if adapter is not None:
            adapter.stop()
        if vm is not None:
            vm.stop()
        exporter.stop()
        fake.stop()


def test_the_docs_scrape_jobs_label_the_series_as_the_servicemonitor_does(cluster):
    series = {s["metric"]["gpu"]: s["metric"] for s in cluster.vm.wait_for('DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"}')}
    # honor_labels: the GPU's consumer keeps its labels; the idle GPU gets none from the exporter's pod.
    assert {k: series["0"][k] for k in ("namespace", "pod", "container", "service", "node")} == {
        "namespace": "ml", "pod": "infer-0", "container": "main", "service": "dcgm-exporter", "node": "gpu-node-1"}
    assert "pod" not in series["1"] and "namespace" not in series["1"] and series["1"]["service"] == "dcgm-exporter"
    assert not any(k.startswith("exported_") for labels in series.values() for k in labels)
    # The adapter's job: its pod, over HTTPS, up.
    up = cluster.vm.wait_for('up{job="gpu-autoscaler-adapter"} == 1')
    assert up[0]["metric"]["service"] == f"{RELEASE}-gpu-autoscaler-adapter"
    adapter = [t for t in cluster.vm.targets() if t["labels"]["job"] == "gpu-autoscaler-adapter"]
    assert [t["scrapeUrl"] for t in adapter] == [f"{cluster.adapter.url}/metrics"]


def test_the_services_annotations_get_the_exporter_scraped_by_an_annotation_driven_prometheus(cluster):
    """Zero configuration on a plain Prometheus: its annotation job finds the exporter's Service (and only it: the
    adapter's Service is not annotated by default) and the series carry the `service` label the EKS guide's Object
    metric needs."""
    job = copy.deepcopy(ANNOTATION_JOB)
    job["kubernetes_sd_configs"][0]["api_server"] = cluster.fake.url
    vm = VictoriaMetricsServer([], scrape_configs=[job])
    try:
        series = {s["metric"]["gpu"]: s["metric"] for s in vm.wait_for("DCGM_FI_DEV_GPU_UTIL")}
        targets = vm.targets()
    finally:
        vm.stop()
    assert [t["labels"]["service"] for t in targets] == ["dcgm-exporter"]
    assert {k: series["0"][k] for k in ("job", "service", "node", "namespace", "pod")} == {
        "job": "kubernetes-service-endpoints", "service": "dcgm-exporter", "node": "gpu-node-1", "namespace": "ml",
        "pod": "infer-0"}
    # The idle GPU gets the Service's namespace from the target (the ServiceMonitor drops it); no pod.
    assert series["1"]["namespace"] == NAMESPACE and "pod" not in series["1"]


def test_helm_test_passes_when_everything_answers(cluster):
    cluster.set_apiservices(AVAILABLE)
    proc = run_check(cluster)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == [f"ok    APIService {name}: Available (Passed: all checks passed)"
                         for name in ("v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io")]
    assert lines[2] == f"ok    Prometheus at {cluster.vm.url}: answers PromQL queries"
    # DCGM_FI_DEV_GPU_UTIL_AVG on Service dcgm-exporter: the average of both GPUs behind it.
    assert lines[3] == (f"ok    metric /apis/custom.metrics.k8s.io/v1beta2/namespaces/{NAMESPACE}/services/"
                        "dcgm-exporter/DCGM_FI_DEV_GPU_UTIL_AVG: 1 value(s); Service dcgm-exporter: 40")
    assert lines[-1] == "the metrics API is installed and answering"


def test_no_series_yet_names_the_scraping(cluster, tmp_path):
    """An adapter whose Prometheus scrapes nothing (nothing picked up the exporter yet)."""
    cluster.set_apiservices(AVAILABLE)
    with PrometheusServer([]) as empty:
        adapter = AdapterProcess(empty.url, str(tmp_path / "certs"))
        cluster.fake.aggregated["custom.metrics.k8s.io"] = adapter.url
        try:
            proc = run_check(cluster, replace={"--prometheus-url=": f"--prometheus-url={empty.url}"})
        finally:
            cluster.fake.aggregated["custom.metrics.k8s.io"] = cluster.adapter.url
            adapter.stop()
    assert proc.returncode == 1
    assert f"ok    Prometheus at {empty.url}: answers PromQL queries" in proc.stdout
    assert "FAIL  metric /apis/custom.metrics.k8s.io/v1beta2/namespaces/gpu-system/services/dcgm-exporter/" \
           "DCGM_FI_DEV_GPU_UTIL_AVG: 404: the server could not find the metric DCGM_FI_DEV_GPU_UTIL_AVG" in proc.stdout
    assert f"likely cause: no series yet: the adapter found none of its rules' series in Prometheus at {empty.url}" \
        in proc.stdout
    assert "Is Prometheus scraping the exporter?" in proc.stdout and "1 check(s) failed" in proc.stdout


def test_a_service_without_series_is_told_apart(cluster):
    cluster.set_apiservices(AVAILABLE)
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NAMESPACE}/services/other/DCGM_FI_DEV_GPU_UTIL_AVG"
    proc = run_check(cluster, replace={"--metric-path=": f"--metric-path={path}"})
    assert proc.returncode == 1
    assert f"FAIL  metric {path}: 404: the server could not find the metric DCGM_FI_DEV_GPU_UTIL_AVG for services " \
           "other" in proc.stdout


def test_no_prometheus_at_the_url_keeps_the_apiservices_unavailable(cluster):
    """What a cluster shows when adapter.prometheus.url points nowhere: the adapter never turns ready, so the
    aggregator finds no endpoint (MissingEndpoints), and nothing answers at the URL."""
    service = f"{RELEASE}-gpu-autoscaler-adapter"
    cluster.set_apiservices({"type": "Available", "status": "False", "reason": "MissingEndpoints",
                             "message": f'endpointslices for service/{service} in "{NAMESPACE}" have no addresses '
                                        'with port name "https"'})
    nowhere = f"http://127.0.0.1:{free_port()}"
    try:
        proc = run_check(cluster, replace={"--prometheus-url=": f"--prometheus-url={nowhere}"})
    finally:
        cluster.set_apiservices(AVAILABLE)
    assert proc.returncode == 1
    out = proc.stdout
    assert "FAIL  APIService v1beta2.custom.metrics.k8s.io: not Available (MissingEndpoints: endpointslices for " \
           f"service/{service}" in out
    assert f"likely cause: no adapter pod behind Service {NAMESPACE}/{service} is ready" in out
    assert f"FAIL  Prometheus at {nowhere}: no answer:" in out
    assert "likely cause: no Prometheus at this URL (adapter.prometheus.url)" in out
    assert "skip  metric" in out and "not read: the APIService serving it is not Available" in out
    assert out.endswith("3 check(s) failed\n")


def test_rbac_denials_are_named(cluster):
    cluster.set_apiservices(AVAILABLE)
    metric = next(a.partition("=")[2] for a in cluster.check_args if a.startswith("--metric-path="))
    denied = ('services.custom.metrics.k8s.io "dcgm-exporter" is forbidden: User "system:serviceaccount:gpu-system:'
              'gpu-gpu-autoscaler-test" cannot get resource "services/DCGM_FI_DEV_GPU_UTIL_AVG" in API group '
              '"custom.metrics.k8s.io" in the namespace "gpu-system"')
    cluster.fake.forbid = lambda method, path: denied if path == metric else None
    try:
        proc = run_check(cluster)
    finally:
        cluster.fake.forbid = lambda method, path: None
    assert proc.returncode == 1
    assert f"FAIL  metric {metric}: 403 Forbidden: {denied}" in proc.stdout
    assert "likely cause: RBAC: the caller may not get this metric in API group custom.metrics.k8s.io" in proc.stdout


def test_a_fresh_install_is_waited_for(cluster):
    """The APIServices turn Available while the check waits (the second time it reads them): it passes, having said
    what it waited for."""
    cluster.set_apiservices(None)
    first = "/apis/apiregistration.k8s.io/v1/apiservices/v1beta2.custom.metrics.k8s.io"
    reads = []

    def observe(method: str, path: str) -> None:
        if path == first:
            reads.append(path)
            if len(reads) == 2:
                cluster.set_apiservices(AVAILABLE)

    cluster.fake.forbid = observe
    try:
        proc = run_check(cluster, replace={"--wait-seconds=": "--wait-seconds=60"})
    finally:
        cluster.fake.forbid = lambda method, path: None
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == ("waiting: APIService v1beta2.custom.metrics.k8s.io: no Available "
                                           "condition yet")
    assert len(reads) == 2 and proc.stdout.endswith("the metrics API is installed and answering\n")


def test_without_any_kubernetes_configuration_it_says_so(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "adapter", "check-install", "--apiservice", "x",
                           "--kubeconfig", str(tmp_path / "missing")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"gpu-adapter: error: kubeconfig {tmp_path / 'missing'}:")

