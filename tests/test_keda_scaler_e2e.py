"""The KEDA external scaler (``gpu-adapter serve --keda-scaler-port``) called over gRPC the way KEDA calls it
(``tests/support/keda.py``, read from kedacore/keda ``pkg/scalers/external_scaler.go``), against a real Prometheus
scraping vLLM, dcgm-exporter and endpoint-picker expositions and a rules-file metric: metric specs, values equal
to the HTTP APIs' answers, activation both ways, a StreamIsActive stream following a queue, mutual TLS as KEDA
dials it, and clear statuses (never a made-up value) for bad metadata, missing, NaN and stale values and a
Prometheus that is down."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from adapter.keda.externalscaler import externalscaler_pb2 as pb
from loadtest.hpa.spec import milli
from tests.support.adapter_metrics import metric_value
from tests.support.adapter_process import AdapterProcess
from tests.support.certs import Issued, issue, make_ca
from tests.support.keda import KedaClient, Trigger
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

GATEWAY = Path(__file__).parent / "data" / "gateway"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"

RULES = """\
include: [gpu-presets, vllm, inference-gateway]
rules:
- seriesQuery: 'batch_jobs_pending{namespace!="",deployment!=""}'
  resources: {overrides: {namespace: {resource: namespace}, deployment: {group: apps, resource: deployment}}}
  metricsQuery: 'sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
"""
OBJECTS = {"pods": [{"namespace": "ml", "name": "vllm-0", "labels": {"app": "vllm"}},
                    {"namespace": "ml", "name": "vllm-1", "labels": {"app": "vllm"}},
                    {"namespace": "ml", "name": "other-0", "labels": {"app": "other"}}]}
# dcgm-exporter's series for the GPUs the vLLM pods hold (the exporter's own pod/namespace labels, as with
# honorLabels): vllm-0 two GPUs at 80 and 60 (its value: 70), vllm-1 one at 30.
DCGM = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "".join(
    f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-{uuid}",device="nvidia{gpu}",modelName="NVIDIA H100",'
    f'Hostname="{node}",container="vllm",namespace="ml",pod="{pod}"}} {value}\n'
    for gpu, uuid, node, pod, value in (("0", "a", "node-1", "vllm-0", 80), ("1", "b", "node-1", "vllm-0", 60),
                                        ("0", "c", "node-2", "vllm-1", 30)))


def vllm(waiting: float, running: float) -> str:
    return ("# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {waiting}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {running}\n')


def epp_labels(namespace: str, pod: str) -> dict[str, str]:
    return {"namespace": namespace, "pod": pod, "container": "epp", "endpoint": "metrics"}


class Stack:
    """Prometheus scraping the expositions, and the adapter serving the scaler over it. As a context manager it is
    stopped on leaving, and a block that ends without an error also checks the adapter logged no traceback."""

    def __init__(self, tmp: Path, scaler_args: list[str], with_stale_target: bool = False) -> None:
        self.endpoints: dict[str, MetricsEndpoint] = {
            "vllm-0": MetricsEndpoint(vllm(2, 5)), "vllm-1": MetricsEndpoint(vllm(4, 7)),
            "dcgm": MetricsEndpoint(DCGM),
            "llama-epp-0": MetricsEndpoint((GATEWAY / "llm-d-router-llama-0.prom").read_text()),
            "llama-epp-1": MetricsEndpoint((GATEWAY / "llm-d-router-llama-1.prom").read_text()),
            "gemma-epp": MetricsEndpoint((GATEWAY / "llm-d-router-gemma-waiting.prom").read_text()),
            "batch": MetricsEndpoint('batch_jobs_pending{deployment="worker"} 12\n'
                                     'batch_jobs_pending{deployment="broken"} NaN\n'),
        }
        if with_stale_target:
            self.endpoints["retired"] = MetricsEndpoint('batch_jobs_pending{deployment="retired"} 4\n')
        labels = {"vllm-0": {"namespace": "ml", "pod": "vllm-0", "container": "vllm"},
                  "vllm-1": {"namespace": "ml", "pod": "vllm-1", "container": "vllm"},
                  "dcgm": {}, "batch": {"namespace": "ml"}, "retired": {"namespace": "ml"},
                  "llama-epp-0": epp_labels("llm", "llama-epp-7c9d8-0"),
                  "llama-epp-1": epp_labels("llm", "llama-epp-7c9d8-1"),
                  "gemma-epp": epp_labels("llm", "gemma-epp-5b6a4-0")}
        (tmp / "rules.yaml").write_text(RULES)
        (tmp / "objects.json").write_text(json.dumps(OBJECTS))
        self.prometheus = PrometheusServer([(e.address, labels[n]) for n, e in self.endpoints.items()]).start()
        self.adapter: AdapterProcess | None = None
        self.scaler_port = free_port()
        try:
            self.prometheus.wait_for(f"count(up == 1) == {len(self.endpoints)}", timeout=40)
            self.adapter = AdapterProcess(self.prometheus.url, str(tmp / "certs"), [
                "--config", str(tmp / "rules.yaml"), "--metrics-relist-interval", "1s",
                "--standalone-objects", str(tmp / "objects.json"), "--keda-scaler-port", str(self.scaler_port),
                "--keda-scaler-stream-interval", "200ms", *scaler_args])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> str:
        log = self.adapter.stop() if self.adapter is not None else ""
        self.prometheus.stop()
        for endpoint in self.endpoints.values():
            endpoint.stop()
        return log

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        log = self.stop()
        if exc_type is None:
            assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack(tmp_path_factory.mktemp("keda"), ["--keda-scaler-insecure"], with_stale_target=True) as running:
        yield running


@pytest.fixture(scope="module")
def keda(stack: Stack) -> Iterator[KedaClient]:
    client = KedaClient(f"127.0.0.1:{stack.scaler_port}")  # no enableTLS, no caCert: KEDA dials plain text
    yield client
    client.close()


def served(trigger: Trigger, timeout: float = 30) -> float:
    """The trigger's value once the adapter's discovery lists the metric (its first relists run after start)."""
    def attempt() -> float | None:
        try:
            return trigger.value()
        except grpc.RpcError as exc:
            assert exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE), exc.details()
            return None
    return wait_until(lambda: (v := attempt()) is not None and (v,), timeout, "a value")[0]


def status_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), caught.value.details()


def http_items(stack: Stack, path: str, **params: str) -> list[dict[str, Any]]:
    assert stack.adapter is not None
    response = stack.adapter.get(path, **params)
    assert response.status_code == 200, response.text
    return response.json()["items"]


# Triggers, as a ScaledObject in namespace ml (or llm, where the gateway runs) would write them.
GPU = {"scalerAddress": "gpu-autoscaler-keda.gpu-system.svc:9443", "metric": "DCGM_FI_DEV_GPU_UTIL",
       "resource": "pods", "labelSelector": "app=vllm", "targetValue": "60", "activationThreshold": "5"}
VLLM_QUEUE = {"metric": "vllm:num_requests_waiting", "resource": "pods", "labelSelector": "app=vllm",
              "targetValue": "5"}
WORKER = {"metric": "batch_jobs_pending", "resource": "deployments.apps", "name": "worker", "targetValue": "10"}
GATEWAY_QUEUE = {"metric": "llm_d_epp_flow_control_queue_size", "metricSelector": "inference_pool=llama",
                 "targetValue": "4"}


def test_metric_spec_as_keda_writes_it_into_the_hpa(keda: KedaClient) -> None:
    gpu = keda.trigger("vllm", "ml", GPU, index=0)
    queue = keda.trigger("vllm", "ml", VLLM_QUEUE, index=1, metric_type="Value")
    # KEDA's HPA metric: s<trigger index>-<our name>, where the name has KEDA's own replacements (: -> -).
    [spec] = gpu.metric_spec()
    assert (spec.name, spec.target_type, spec.target) == ("s0-DCGM_FI_DEV_GPU_UTIL", "AverageValue", 60)
    [spec] = queue.metric_spec()
    assert (spec.name, spec.target_type, spec.target) == ("s1-vllm-num_requests_waiting", "Value", 5)
    fractional = keda.trigger("vllm", "ml", {**GPU, "targetValue": "0.8"})
    assert fractional.metric_spec()[0].target == 0.8  # targetSizeFloat carries it


def test_preset_values_equal_the_custom_metrics_api(stack: Stack, keda: KedaClient) -> None:
    # GPU utilisation: per pod averaged over its GPUs (70, 30), then summed over the selected pods for KEDA's
    # AverageValue target (the HPA asks for ceil(100 / 60) = 2 replicas, as a Pods metric would).
    gpu = keda.trigger("vllm", "ml", GPU)
    assert served(gpu) == 100
    items = http_items(stack, f"{CUSTOM}/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL", labelSelector="app=vllm")
    assert sum(milli(i["value"]) for i in items) / 1000 == 100
    for aggregation, expected in (("avg", 50), ("max", 70), ("min", 30), ("sum", 100)):
        assert keda.trigger("vllm", "ml", {**GPU, "aggregation": aggregation}).value() == expected, aggregation
    # vLLM's queue (inference-server preset): 2 + 4 waiting.
    assert served(keda.trigger("vllm", "ml", VLLM_QUEUE)) == 6
    assert served(keda.trigger("vllm", "ml", {**VLLM_QUEUE, "metric": "vllm:num_requests_running"})) == 12


def test_a_rules_file_metric_of_the_scale_target(stack: Stack, keda: KedaClient) -> None:
    # The ScaledObject's target is Deployment worker: an Object metric from the user's own rule.
    assert served(keda.trigger("worker", "ml", WORKER)) == 12
    [item] = http_items(stack, f"{CUSTOM}/namespaces/ml/deployments.apps/worker/batch_jobs_pending")
    assert milli(item["value"]) == 12000


def test_an_external_metric_with_its_label_selector(stack: Stack, keda: KedaClient) -> None:
    # The gateway queue of pool llama (two EPP replicas holding 5 and 4 requests), in the gateway's namespace.
    assert served(keda.trigger("llama", "llm", GATEWAY_QUEUE)) == 9
    [item] = http_items(stack, f"{EXTERNAL}/namespaces/llm/llm_d_epp_flow_control_queue_size",
                        labelSelector="inference_pool=llama")
    assert milli(item["value"]) == 9000
    # The ScaledObject's namespace bounds what it sees: the same pool asked from another namespace has no value.
    code, message = status_of(keda.trigger("llama", "ml", GATEWAY_QUEUE).is_active)
    assert code == grpc.StatusCode.NOT_FOUND and "llm_d_epp_flow_control_queue_size" in message


@pytest.mark.parametrize(("threshold", "active"), [("0", True), ("8.5", True), ("9", False), ("100", False)])
def test_activation_is_the_value_above_activation_threshold(keda: KedaClient, threshold: str, active: bool) -> None:
    trigger = keda.trigger("llama", "llm", {**GATEWAY_QUEUE, "activationThreshold": threshold})
    served(trigger)
    [spec] = trigger.metric_spec()
    values, is_active = trigger.metrics_and_activity(spec.name)
    assert (values, is_active) == ([9.0], active)


def test_from_env_keys_are_read_as_keda_resolves_them(keda: KedaClient) -> None:
    # KEDA resolves <key>FromEnv from the target's container env and forwards it under the same key.
    trigger = keda.trigger("llama", "llm", {"metricFromEnv": "QUEUE_METRIC", "targetValue": "4",
                                            "metricSelector": "inference_pool=llama"},
                           env={"QUEUE_METRIC": "llm_d_epp_flow_control_queue_size"})
    assert served(trigger) == 9


def test_a_stream_follows_the_gateway_queue(stack: Stack, keda: KedaClient) -> None:
    """external-push: the stream says true while requests wait at the gateway, false when they drain, true again
    when one arrives (what wakes a Deployment at zero), each on its own, read as KEDA reads the stream."""
    gemma = {**GATEWAY_QUEUE, "metricSelector": "inference_pool=gemma"}
    trigger = keda.trigger("gemma", "llm", gemma)
    assert served(trigger) == 3
    stream = keda.stub.StreamIsActive(trigger.ref, timeout=60)
    try:
        assert next(stream).result is True
        stack.endpoints["gemma-epp"].text = (GATEWAY / "llm-d-router-gemma-idle.prom").read_text()
        assert next(stream).result is False
        stack.endpoints["gemma-epp"].text = (GATEWAY / "llm-d-router-gemma-waiting.prom").read_text()
        assert next(stream).result is True
    finally:
        stream.cancel()


def test_no_value_is_an_error_never_a_zero(stack: Stack, keda: KedaClient) -> None:
    # KEDA's Prometheus scaler on the same PromQL reads 0 for an empty result and for NaN (ignoreNullValues
    # defaults to true): prometheus_scaler.go, ExecutePromQuery. Here the trigger fails and KEDA keeps the scale.
    assert stack.adapter is not None
    served(keda.trigger("worker", "ml", WORKER))
    nan = httpx.get(f"{stack.prometheus.url}/api/v1/query",
                    params={"query": 'sum by (deployment) (batch_jobs_pending{namespace="ml",deployment="broken"})'})
    assert nan.json()["data"]["result"][0]["value"][1] == "NaN"
    cases = {
        "NaN": keda.trigger("broken", "ml", {**WORKER, "name": "broken"}),
        "no such object": keda.trigger("gone", "ml", {**WORKER, "name": "gone"}),
        "pool nobody reports": keda.trigger("x", "llm", {**GATEWAY_QUEUE, "metricSelector": "inference_pool=ghost"}),
        "selector matches no pod": keda.trigger("x", "ml", {**GPU, "labelSelector": "app=nothing"}),
        "unknown metric": keda.trigger("x", "ml", {**GPU, "metric": "DCGM_FI_DEV_NOPE"}),
    }
    for what, trigger in cases.items():
        for call in (trigger.is_active, lambda t=trigger: t.metrics_and_activity(t.metric_spec()[0].name)):
            code, message = status_of(call)
            assert code == grpc.StatusCode.NOT_FOUND, (what, code, message)
            assert "could not find" in message, (what, message)


def test_zero_when_none_selected_is_for_no_object_only(keda: KedaClient) -> None:
    # The opt-in for a trigger that holds replicas: at zero replicas no pod matches, and the value is 0 (inactive)
    # rather than an error; a pod that exists without series is still no value.
    running = {**VLLM_QUEUE, "metric": "vllm:num_requests_running", "zeroWhenNoneSelected": "true"}
    assert served(keda.trigger("vllm", "ml", running)) == 12
    at_zero = keda.trigger("vllm", "ml", {**running, "labelSelector": "app=nothing"})
    [spec] = at_zero.metric_spec()
    assert at_zero.metrics_and_activity(spec.name) == ([0.0], False)
    code, _ = status_of(keda.trigger("other", "ml", {**running, "labelSelector": "app=other"}).is_active)
    assert code == grpc.StatusCode.NOT_FOUND


def test_a_stale_series_is_no_value(stack: Stack, keda: KedaClient) -> None:
    # The target stops answering: Prometheus marks its series stale at the next failed scrape. KEDA's Prometheus
    # scaler would read the empty result as 0; the scaler answers NOT_FOUND.
    retired = keda.trigger("retired", "ml", {**WORKER, "name": "retired"})
    assert served(retired) == 4
    stack.endpoints["retired"].stop()

    def gone() -> bool:
        try:
            retired.is_active()
        except grpc.RpcError as exc:
            return exc.code() == grpc.StatusCode.NOT_FOUND
        return False
    wait_until(gone, 20, "NOT_FOUND once the series is stale")


BAD_METADATA = [
    # (what, metadata, the key the status names)
    ("no metric", {"targetValue": "5"}, "metric"),
    ("no target", {"metric": "DCGM_FI_DEV_GPU_UTIL", "resource": "pods", "labelSelector": "app=vllm"},
     "targetValue"),
    ("target not a number", {**GPU, "targetValue": "sixty"}, "targetValue"),
    ("target 0", {**GPU, "targetValue": "0"}, "targetValue"),
    ("activation NaN", {**GPU, "activationThreshold": "NaN"}, "activationThreshold"),
    ("misspelt key", {**GPU, "activationTreshold": "5"}, "activationTreshold"),
    ("Prometheus scaler key", {**GPU, "threshold": "5"}, "threshold"),
    ("bad selector", {**GPU, "labelSelector": "app in (vllm"}, "labelSelector"),
    ("bad metric selector", {**GATEWAY_QUEUE, "metricSelector": "inference_pool in (llama"}, "metricSelector"),
    ("name and selector", {**GPU, "name": "vllm-0"}, "labelSelector"),
    ("pods without a selector", {**VLLM_QUEUE, "labelSelector": ""}, "labelSelector"),
    ("selector on an external metric", {**GATEWAY_QUEUE, "labelSelector": "app=x"}, "labelSelector"),
    ("bad resource", {**GPU, "resource": "Pods/x"}, "resource"),
    ("bad aggregation", {**GPU, "aggregation": "mean"}, "aggregation"),
    ("key twice", {**GPU, "metricFromEnv": "GPU_METRIC"}, "metricFromEnv"),
    ("zero without a selector", {**WORKER, "zeroWhenNoneSelected": "true"}, "zeroWhenNoneSelected"),
]


@pytest.mark.parametrize(("metadata", "key"), [(m, k) for _, m, k in BAD_METADATA],
                         ids=[what for what, _, _ in BAD_METADATA])
def test_bad_metadata_is_invalid_argument_naming_the_key(keda: KedaClient, metadata: dict[str, str],
                                                         key: str) -> None:
    trigger = keda.trigger("vllm", "ml", metadata, env={"GPU_METRIC": "DCGM_FI_DEV_GPU_UTIL"})
    calls = {
        "GetMetricSpec": lambda: keda.stub.GetMetricSpec(trigger.ref, timeout=10),
        "GetMetrics": lambda: keda.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=trigger.ref, metricName="DCGM_FI_DEV_GPU_UTIL"), timeout=10),
        "IsActive": lambda: keda.stub.IsActive(trigger.ref, timeout=10),
        "StreamIsActive": lambda: next(keda.stub.StreamIsActive(trigger.ref, timeout=10)),
    }
    for method, call in calls.items():
        code, message = status_of(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, code, message)
        assert message.startswith(f"scalerMetadata.{key}: "), (method, message)


def test_calls_share_the_engine_cache_and_are_counted(stack: Stack, keda: KedaClient) -> None:
    """Twenty KEDA calls at once for one trigger: the engine's coalescing cache answers most without asking
    Prometheus again; each call is counted by method and status code."""
    assert stack.adapter is not None
    trigger = keda.trigger("vllm", "ml", GPU)
    served(trigger)
    counted = {"result": "miss"}

    def misses() -> float:
        return metric_value(stack.adapter, "gpu_adapter_query_cache_requests_total", counted) or 0.0  # type: ignore[arg-type]

    def calls() -> float:
        return metric_value(stack.adapter, "gpu_adapter_keda_request_duration_seconds_count",  # type: ignore[arg-type]
                            {"method": "IsActive", "code": "OK"}) or 0.0
    before_misses, before_calls = misses(), calls()
    futures = [keda.stub.IsActive.future(trigger.ref, timeout=10) for _ in range(20)]
    assert all(f.result().result for f in futures)
    assert calls() - before_calls == 20
    # One query per call without sharing (of the preset's two rules only the pod-label one has series here): 20.
    assert misses() - before_misses < 10


# ---------------------------------------------------------------------------------------- TLS, as KEDA dials it


@pytest.fixture(scope="module")
def pki() -> dict[str, Issued]:
    server_ca, client_ca, other_ca = make_ca("scaler-ca"), make_ca("keda-clients"), make_ca("someone-else")
    return {"server_ca": server_ca, "client_ca": client_ca,
            "server": issue(server_ca, "localhost", client=False, server_names=("localhost",)),
            "keda": issue(client_ca, "keda-operator"), "stranger": issue(other_ca, "keda-operator")}


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory, pki: dict[str, Issued]) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("keda-tls")
    cert, key = pki["server"].write(tmp, "scaler")
    (tmp / "clients.crt").write_bytes(pki["client_ca"].cert_pem)
    with Stack(tmp, ["--keda-scaler-tls-cert-file", cert, "--keda-scaler-tls-private-key-file", key,
                     "--keda-scaler-client-ca-file", str(tmp / "clients.crt")]) as running:
        yield running


def test_mutual_tls_as_keda_dials_it(tls_stack: Stack, pki: dict[str, Issued]) -> None:
    # TriggerAuthentication caCert + tlsClientCert/tlsClientKey: KEDA verifies the scaler's name (the host of
    # scalerAddress) against caCert and presents its client certificate.
    address = f"localhost:{tls_stack.scaler_port}"
    ca = pki["server_ca"].cert_pem
    good = KedaClient(address, ca_cert=ca, client_cert=pki["keda"].cert_pem, client_key=pki["keda"].key_pem)
    try:
        assert served(good.trigger("llama", "llm", GATEWAY_QUEUE)) == 9
    finally:
        good.close()
    refused = {
        "no client certificate (enableTLS only)": KedaClient(address, enable_tls=True, ca_cert=ca, timeout=5),
        "client certificate of another CA": KedaClient(address, ca_cert=ca, client_cert=pki["stranger"].cert_pem,
                                                       client_key=pki["stranger"].key_pem, timeout=5),
        "plain text": KedaClient(address, timeout=5),
        "a name the certificate does not hold": KedaClient(
            f"127.0.0.1:{tls_stack.scaler_port}", ca_cert=ca, client_cert=pki["keda"].cert_pem,
            client_key=pki["keda"].key_pem, timeout=5),
    }
    for what, client in refused.items():
        try:
            code, _ = status_of(client.trigger("llama", "llm", GATEWAY_QUEUE).is_active)
            assert code == grpc.StatusCode.UNAVAILABLE, what
        finally:
            client.close()


def test_prometheus_down_is_unavailable(tmp_path: Path) -> None:
    with Stack(tmp_path, ["--keda-scaler-insecure"]) as running:
        client = KedaClient(f"127.0.0.1:{running.scaler_port}")
        try:
            trigger = client.trigger("llama", "llm", GATEWAY_QUEUE)
            assert served(trigger) == 9
            running.prometheus.stop()

            def unavailable() -> str | None:
                try:
                    trigger.is_active()
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc.details()
                    return exc.details()
                return None
            assert "unable to fetch metrics" in wait_until(unavailable, 20, "UNAVAILABLE")
        finally:
            client.close()


def test_shutdown_drains_the_scaler_streams_end_ok_and_keda_is_sent_away(tmp_path: Path) -> None:
    """SIGTERM with a delay: calls and streams are served through the delay; then gRPC's GOAWAY, and an open
    StreamIsActive ends with status OK (KEDA's io.EOF: it reconnects after 2 s, without an error and without a
    growing back-off), the process exits 0."""
    with Stack(tmp_path, ["--keda-scaler-insecure", "--shutdown-delay-duration", "2s"]) as running:
        assert running.adapter is not None
        client = KedaClient(f"127.0.0.1:{running.scaler_port}")
        trigger = client.trigger("llama", "llm", GATEWAY_QUEUE)
        ended: dict[str, Any] = {}
        try:
            assert served(trigger) == 9
            stream = client.stub.StreamIsActive(trigger.ref, timeout=60)
            assert next(stream).result is True

            def read_to_the_end() -> None:
                try:
                    ended["extra"] = list(stream)
                    ended["code"] = stream.code()
                except grpc.RpcError as exc:
                    ended["code"] = exc.code()

            reader = threading.Thread(target=read_to_the_end, daemon=True)
            reader.start()
            running.adapter.proc.send_signal(signal.SIGTERM)
            running.adapter.output.wait_for("shutdown initiated")
            assert trigger.value() == 9  # the delay: still served
            assert reader.is_alive()
            running.adapter.output.wait_for("KEDA external scaler draining")
            reader.join(20)
            assert ended == {"extra": [], "code": grpc.StatusCode.OK}
            code, _ = status_of(trigger.is_active)  # no new call once drained
            assert code == grpc.StatusCode.UNAVAILABLE
            assert running.adapter.proc.wait(30) == 0
        finally:
            client.close()
