"""The real adapter over HTTPS, answering from a real Prometheus that scrapes dcgm-exporter-shaped series."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.adapter_metrics import metric_value
from tests.support.adapter_process import AdapterProcess
from tests.support.kubectl import kubectl_get_raw
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]

GPUS = [  # gpu, node, namespace, pod, util, power, fb_used
    ("0", "node-a", "ml", "infer-0", "50", "100.5", "1000"),
    ("1", "node-a", "ml", "infer-0", "100", "200.25", "3000"),
    ("2", "node-a", "ml", "infer-1", "30", "50", "500"),
    ("3", "node-b", "ml", "broken-0", None, "10", "NaN"),
    ("4", "node-b", "other", "x-0", "10", "20", "100"),
    ("5", "node-b", None, None, "0", "30", "0"),
]


def exposition() -> str:
    lines = []
    for gpu, node, ns, pod, util, power, fb in GPUS:
        labels = f'gpu="{gpu}",UUID="GPU-{gpu}",device="nvidia{gpu}",modelName="NVIDIA H100",Hostname="{node}"'
        if pod:
            labels += f',namespace="{ns}",pod="{pod}",container="main"'
        if util is not None:
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}")
        lines.append(f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {power}")
        lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {fb}")
    return "\n".join(lines) + "\n"


RULES = """\
include: [gpu-presets]
rules:
- seriesQuery: 'DCGM_FI_DEV_POWER_USAGE{Hostname!=""}'
  resources:
    overrides:
      Hostname: {resource: node}
  name: {matches: "^DCGM_FI_DEV_POWER_USAGE$", as: "node_gpu_power_watts"}
  metricsQuery: 'sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_DEV_FB_USED{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  name: {matches: "^DCGM_FI_DEV_FB_USED$", as: "fb_used_or_zero"}
  metricsQuery: 'max by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
  missingValue: zero
"""

BASE = "/apis/custom.metrics.k8s.io"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AdapterProcess, PrometheusServer, Path]]:
    tmp = tmp_path_factory.mktemp("adapter")
    endpoint = MetricsEndpoint(exposition())
    prom = PrometheusServer([(endpoint.address, {"service": "dcgm-exporter"})], job="dcgm", honor_labels=True).start()
    rules = tmp / "rules.yaml"
    rules.write_text(RULES)
    adapter = None
    try:
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="infer-0"}', timeout=30)
        adapter = AdapterProcess(prom.url, str(tmp / "certs"), ["--config", str(rules),
                                                                "--metrics-relist-interval", "2s"])
        yield adapter, prom, tmp
    finally:
        if adapter is not None:
            adapter.stop()
        prom.stop()
        endpoint.stop()


def get_json(adapter: AdapterProcess, path: str, status: int = 200, **params: str) -> dict:
    response = adapter.get(path, **params)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def one_value(body: dict) -> str:
    assert body["kind"] == "MetricValueList"
    assert len(body["items"]) == 1, body
    return body["items"][0]["value"]


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_discovery_lists_the_gpu_presets(stack: tuple, version: str) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, f"{BASE}/{version}")
    assert body["kind"] == "APIResourceList" and body["groupVersion"] == f"custom.metrics.k8s.io/{version}"
    entries = {r["name"]: r for r in body["resources"]}
    assert entries["pods/DCGM_FI_DEV_GPU_UTIL"] == {
        "name": "pods/DCGM_FI_DEV_GPU_UTIL", "singularName": "", "namespaced": True, "kind": "MetricValueList",
        "verbs": ["get"]}
    assert entries["services/DCGM_FI_DEV_GPU_UTIL_AVG"]["namespaced"] is True
    assert entries["nodes/node_gpu_power_watts"]["namespaced"] is False
    assert entries["namespaces/DCGM_FI_DEV_GPU_UTIL"]["namespaced"] is False


def test_api_group_prefers_v1beta2(stack: tuple) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, BASE)
    assert body["preferredVersion"]["version"] == "v1beta2"
    assert [v["version"] for v in body["versions"]] == ["v1beta2", "v1beta1"]


def test_single_pod_v1beta1_shape_and_average_over_its_gpus(stack: tuple) -> None:
    adapter, prom, _ = stack
    body = get_json(adapter, f"{BASE}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL")
    assert body["apiVersion"] == "custom.metrics.k8s.io/v1beta1" and body["metadata"] == {}
    (item,) = body["items"]
    assert set(item) == {"describedObject", "metricName", "timestamp", "value", "selector"}
    assert item["describedObject"] == {"kind": "Pod", "namespace": "ml", "name": "infer-0", "apiVersion": "/v1"}
    assert item["metricName"] == "DCGM_FI_DEV_GPU_UTIL"
    assert item["value"] == "75"  # (50 + 100) / 2: averaged over the pod's GPUs, not summed
    assert item["selector"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", item["timestamp"])
    # the timestamp is the sample's (Prometheus evaluation time), not made up later
    sample_time = float(prom.query('avg(DCGM_FI_DEV_GPU_UTIL{pod="infer-0"})')[0]["value"][0])
    stamp = time.mktime(time.strptime(item["timestamp"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert abs(stamp - sample_time) < 30


def test_single_pod_v1beta2_shape_with_metric_selector_echoed(stack: tuple) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, f"{BASE}/v1beta2/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL",
                    metricLabelSelector="gpu=0")
    assert body["apiVersion"] == "custom.metrics.k8s.io/v1beta2"
    (item,) = body["items"]
    assert set(item) == {"describedObject", "metric", "timestamp", "value"}
    assert item["metric"] == {"name": "DCGM_FI_DEV_GPU_UTIL", "selector": {"matchLabels": {"gpu": "0"}}}
    assert item["value"] == "50"


@pytest.mark.parametrize("star", ["*", "%2A"])
@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_wildcard_pods_in_a_namespace(stack: tuple, star: str, version: str) -> None:
    adapter, _, _ = stack
    response = adapter.client.get(f"{BASE}/{version}/namespaces/ml/pods/{star}/DCGM_FI_DEV_GPU_UTIL")
    assert response.status_code == 200, response.text
    values = {i["describedObject"]["name"]: i["value"] for i in response.json()["items"]}
    # broken-0 has no GPU_UTIL sample: omitted, not reported as 0; pods of other namespaces never leak in
    assert values == {"infer-0": "75", "infer-1": "30"}


def test_wildcard_with_label_selector_needs_the_kubernetes_api(stack: tuple) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, f"{BASE}/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL", 400,
                    labelSelector="app=infer")
    assert body["kind"] == "Status" and body["reason"] == "BadRequest"
    assert "Kubernetes API" in body["message"]


def test_object_metric_on_the_exporter_service_as_in_the_eks_guide(stack: tuple) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, f"{BASE}/v1beta1/namespaces/default/services/dcgm-exporter/DCGM_FI_DEV_GPU_UTIL_AVG")
    (item,) = body["items"]
    assert item["describedObject"] == {"kind": "Service", "namespace": "default", "name": "dcgm-exporter",
                                       "apiVersion": "/v1"}
    assert item["value"] == "38"  # (50 + 100 + 30 + 10 + 0) / 5 GPUs behind the Service


def test_namespace_metric_form(stack: tuple) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, f"{BASE}/v1beta2/namespaces/ml/metrics/DCGM_FI_DEV_GPU_UTIL")
    (item,) = body["items"]
    assert item["describedObject"] == {"kind": "Namespace", "name": "ml", "apiVersion": "/v1"}
    assert item["value"] == "60"


def test_root_scoped_objects_and_fractional_quantities(stack: tuple) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, f"{BASE}/v1beta1/nodes/node-a/node_gpu_power_watts")
    assert one_value(body) == "350750m"  # 100.5 + 200.25 + 50 W, canonical Quantity
    assert body["items"][0]["describedObject"] == {"kind": "Node", "name": "node-a", "apiVersion": "/v1"}
    body = get_json(adapter, f"{BASE}/v1beta1/nodes/*/node_gpu_power_watts")
    assert {i["describedObject"]["name"]: i["value"] for i in body["items"]} == {"node-a": "350750m", "node-b": "60"}


def test_missing_and_nan_values_are_errors_by_default(stack: tuple) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, f"{BASE}/v1beta1/namespaces/ml/pods/broken-0/DCGM_FI_DEV_GPU_UTIL", 404)
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "the server could not find the metric DCGM_FI_DEV_GPU_UTIL for pods broken-0",
                    "reason": "NotFound", "code": 404}
    body = get_json(adapter, f"{BASE}/v1beta1/namespaces/ml/pods/broken-0/DCGM_FI_DEV_FB_USED", 404)  # NaN sample
    assert body["reason"] == "NotFound"


def test_missing_value_zero_policy_is_opt_in_per_rule(stack: tuple) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, f"{BASE}/v1beta1/namespaces/ml/pods/broken-0/fb_used_or_zero")
    assert one_value(body) == "0"
    body = get_json(adapter, f"{BASE}/v1beta1/namespaces/ml/pods/infer-0/fb_used_or_zero")
    assert one_value(body) == "3k"


@pytest.mark.parametrize(("path", "params", "code", "message"), [
    ("/v1beta1/namespaces/ml/pods/infer-0/no_such_metric", {}, 404,
     "the server could not find the metric no_such_metric for pods infer-0"),
    ("/v1beta1/namespaces/ml/pods/*/no_such_metric", {}, 404,
     "the server could not find the metric no_such_metric for pods"),
    ("/v1beta1/namespaces/ml/widgets.example.com/w/DCGM_FI_DEV_GPU_UTIL", {}, 404,
     "the server could not find the metric DCGM_FI_DEV_GPU_UTIL for widgets.example.com w"),
    ("/v1beta1/namespaces/default/foo", {}, 400, "invalid request path"),
    ("/v1beta1/pods/infer-0/DCGM_FI_DEV_GPU_UTIL", {}, 404,
     "the server could not find the metric DCGM_FI_DEV_GPU_UTIL for pods infer-0"),
    ("/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL", {"metricLabelSelector": "gpu in (0"}, 400,
     "invalid metricLabelSelector"),
    ("/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL", {"metricLabelSelector": "gpu>1"}, 400,
     "invalid metricLabelSelector"),
    ("/v9/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL", {}, 404, "the server could not find the requested"),
])
def test_errors_are_kubernetes_status(stack: tuple, path: str, params: dict, code: int, message: str) -> None:
    adapter, _, _ = stack
    body = get_json(adapter, BASE + path, code, **params)
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == code
    assert body["message"].startswith(message), body["message"]


def test_request_values_cannot_inject_promql(stack: tuple) -> None:
    adapter, _, _ = stack
    hostile = 'infer-0"} or vector(1) or up{a="'
    response = adapter.client.get(f"{BASE}/v1beta1/namespaces/ml/pods/{hostile}/DCGM_FI_DEV_GPU_UTIL")
    assert response.status_code == 404  # treated as a (non-existent) pod name, never as PromQL
    response = adapter.get(f"{BASE}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL",
                           metricLabelSelector='gpu=0"} or vector(1)')
    assert response.status_code == 400


def test_health_and_openapi(stack: tuple) -> None:
    adapter, _, _ = stack
    for path in ("/healthz", "/livez", "/readyz"):
        response = adapter.get(path)
        assert (response.status_code, response.text) == (200, "ok")
        head = adapter.client.head(path)  # answered as GET, without a body
        assert (head.status_code, head.content) == (200, b"")
    for path in ("/openapi/v2", "/openapi/v3"):
        assert adapter.get(path).status_code == 404


@pytest.mark.tools
def test_kubectl_get_raw_against_the_adapter(stack: tuple) -> None:
    adapter, _, tmp = stack
    out = kubectl_get_raw(adapter.url, tmp, f"{BASE}/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL")
    assert out.returncode == 0, out.stderr
    assert {i["describedObject"]["name"] for i in json.loads(out.stdout)["items"]} == {"infer-0", "infer-1"}
    out = kubectl_get_raw(adapter.url, tmp, f"{BASE}/v1beta1/namespaces/ml/pods/infer-0/nope")
    assert out.returncode != 0
    assert "the server could not find the metric nope for pods infer-0" in out.stderr


def test_gpu_adapter_check_reports_rules(stack: tuple) -> None:
    _, prom, tmp = stack
    import sys

    rules = tmp / "check-rules.yaml"
    rules.write_text(RULES + """\
- seriesQuery: 'nothing_matches_this_metric'
  resources: {template: "<<.Resource>>"}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
""")
    out = subprocess.run([sys.executable, "-m", "adapter", "check", "--prometheus-url", prom.url, "--config",
                          str(rules)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pods/DCGM_FI_DEV_GPU_UTIL" in out.stdout
    assert "nodes/node_gpu_power_watts" in out.stdout
    assert "nothing_matches_this_metric\n  matches no series" in out.stdout
    # the presets' exported_* and profiling rules match nothing in this Prometheus, and are flagged too
    assert re.search(r"^\d+ rule\(s\) matched nothing$", out.stdout, re.M)


class SlowQueries:
    """Passes series discovery through to Prometheus, but holds every instant query until :meth:`stop` (at most
    ``delay_s``): a Prometheus slower than any timeout the test sets."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        import httpx

        self.released = threading.Event()
        released = self.released

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.startswith("/api/v1/query"):
                    released.wait(delay_s)
                reply = httpx.post(upstream + self.path, content=body,
                                   headers={"Content-Type": self.headers["Content-Type"]})
                self.send_response(reply.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()


def test_slow_or_down_prometheus_gives_503_within_the_timeout(stack: tuple) -> None:
    _, prom, tmp = stack
    slow = SlowQueries(prom.url, delay_s=30)
    adapter = AdapterProcess(slow.url, str(tmp / "certs"), ["--prometheus-timeout", "1s"])
    try:
        started = time.monotonic()
        response = adapter.get(f"{BASE}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL")
        elapsed = time.monotonic() - started
        assert response.status_code == 503, response.text
        body = response.json()
        assert body["reason"] == "ServiceUnavailable" and "unable to fetch metrics" in body["message"]
        assert elapsed < 10  # the 1 s timeout, not the 30 s Prometheus would take
        slow.stop()  # now Prometheus is gone entirely: still a 503, never a remembered value
        response = adapter.get(f"{BASE}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL")
        assert response.status_code == 503
    finally:
        adapter.stop()
        slow.stop()


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_https_only_with_tls_1_2_or_newer_and_a_kept_self_signed_certificate(stack: tuple) -> None:
    import socket
    import ssl

    from cryptography import x509

    adapter, _, tmp = stack
    cert_file = tmp / "certs" / "apiserver.crt"
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)

    def handshake(version: ssl.TLSVersion) -> str:
        context = ssl.create_default_context(cafile=str(cert_file))
        context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the client offer old versions: the server must refuse
        context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        context.maximum_version = version
        with socket.create_connection(("127.0.0.1", adapter.port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.version() or ""

    assert handshake(ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    assert handshake(ssl.TLSVersion.TLSv1_3) == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        handshake(ssl.TLSVersion.TLSv1_1)
    with socket.create_connection(("127.0.0.1", adapter.port), timeout=5) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP is not served
        assert not raw.recv(64).startswith(b"HTTP/")


def test_ready_without_prometheus_and_a_wrong_url_is_named(tmp_path: Path) -> None:
    """Ready means "can serve the API" (as k8s.io/apiserver servers behave): with Prometheus away, discovery answers
    an empty list, so the APIService stays Available (kubectl api-resources and namespace deletion keep working),
    and every metric request gets a 503 Status naming the URL and the error. A wrong --prometheus-url shows in one
    log line at start (not one per retry), in /readyz's text and in those 503s."""
    nowhere = f"http://127.0.0.1:{free_port()}/prom"  # nothing listens: series discovery cannot complete
    adapter = AdapterProcess(nowhere, str(tmp_path / "certs"), ["--prometheus-timeout", "1s"])
    try:
        assert adapter.get("/healthz").status_code == 200
        wait_until(lambda: (metric_value(adapter, "gpu_adapter_discovery_failures_total") or 0) >= 3,
                   what="three failed relists")
        ready = adapter.get("/readyz")
        assert ready.status_code == 200
        reason = (f"metrics discovery has not completed yet: cannot list series from Prometheus at {nowhere}: "
                  f"Prometheus unreachable: ")
        assert ready.text.startswith(f"ok: no metric is listed until Prometheus answers ({reason}")
        for version in ("v1beta1", "v1beta2"):
            listed = get_json(adapter, f"{BASE}/{version}")
            assert listed["kind"] == "APIResourceList" and listed["resources"] == []
        assert get_json(adapter, "/apis")["groups"][0]["name"] == "custom.metrics.k8s.io"
        body = get_json(adapter, f"{BASE}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL", 503)
        assert body["kind"] == "Status" and body["message"].startswith(reason)
    finally:
        log = adapter.stop()
    said = [line for line in log.splitlines() if f"cannot list series from Prometheus at {nowhere}" in line]
    assert len(said) == 1 and "is --prometheus-url right?" in said[0], log  # once, though retried


class HeldPrometheus(BaseHTTPRequestHandler):
    """A Prometheus that answers nothing until ``gate`` is set, then 503 to everything."""

    gate = threading.Event()

    def do_GET(self) -> None:
        self.gate.wait(60)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


def test_not_ready_until_the_first_relist_has_finished(tmp_path: Path) -> None:
    """A new replica in a rolling update must not answer "no such metric" for one that exists: it is unready
    until its first relist has finished (here Prometheus holds it, then fails it)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), HeldPrometheus)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    adapter = AdapterProcess(f"http://127.0.0.1:{server.server_address[1]}", str(tmp_path / "certs"),
                             ["--prometheus-timeout", "30s"], wait_ready=False)
    try:
        ready = adapter.get("/readyz")
        assert ready.status_code == 503
        assert ready.text == "metrics discovery has not completed yet (the first series list is in progress)"
        HeldPrometheus.gate.set()
        wait_until(lambda: adapter.get("/readyz").status_code == 200, what="ready once the first relist failed")
    finally:
        HeldPrometheus.gate.set()
        adapter.stop()
        server.shutdown()
        server.server_close()


def test_verbosity_6_logs_every_rendered_promql(stack: tuple) -> None:
    _, prom, tmp = stack
    adapter = AdapterProcess(prom.url, str(tmp / "certs"), ["--v", "6"])
    try:
        assert adapter.get(f"{BASE}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL").status_code == 200
    finally:
        log = adapter.stop()
    assert 'PromQL: avg by (pod) (DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="infer-0"})' in log
