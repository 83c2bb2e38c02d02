"""charts/gpu-autoscaler's KEDA external scaler switch (``adapter.kedaScaler``), with the real helm: off by default,
valid on every supported Kubernetes version and against KEDA's published CRD when on, and the rendered Deployment
serving the scaler with the rendered certificates to a client that dials as KEDA does with the rendered
ClusterTriggerAuthentication's Secret."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from adapter.cli.flags import KEDA
from tests.support.k8s_validation import KUBE_VERSIONS, REPO, find, load_documents, one, run, tool, validate_all
from tests.support.keda import KedaClient
from tests.support.processes import terminate
from tests.support.prometheus import free_port

pytestmark = pytest.mark.tools

CHART = REPO / "charts" / "gpu-autoscaler"
VALUES = CHART / "ci" / "keda-scaler-values.yaml"
NAMESPACE, RELEASE = "gpu-system", "gpu"
SCALER = f"{RELEASE}-gpu-autoscaler-keda-scaler"


def render(*sets: str, values: Path | None = VALUES, kube_version: str = "1.33.0",
           check: bool = True) -> subprocess.CompletedProcess[str]:
    args = [tool("helm"), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version]
    if values is not None:
        args += ["-f", str(values)]
    for item in sets:
        args += ["--set", item]
    return run(args, check=check)


def docs(*sets: str, values: Path | None = VALUES) -> list[dict[str, Any]]:
    return load_documents(render(*sets, values=values).stdout)


def adapter_container(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    return one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def test_off_by_default() -> None:
    rendered = docs(values=None)
    assert not [d for d in rendered if "keda" in d["metadata"]["name"]]
    assert not find(rendered, "ClusterTriggerAuthentication")
    container = adapter_container(rendered)
    assert not [a for a in container["args"] if a.startswith("--keda")]
    assert [p["name"] for p in container["ports"]] == ["https"]


def test_lint() -> None:
    proc = run([tool("helm"), "lint", str(CHART), "--strict", "--namespace", NAMESPACE, "-f", str(VALUES)],
               check=False)
    assert proc.returncode == 0 and "0 chart(s) failed" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("sets", [(), ("adapter.kedaScaler.tls.mode=insecure",),
                                  ("adapter.kedaScaler.clusterTriggerAuthentication.enabled=false",)],
                         ids=["generated", "insecure", "no-cluster-trigger-authentication"])
def test_rendered_objects_are_valid(kube_version: str, sets: tuple[str, ...]) -> None:
    rendered = load_documents(render(*sets, kube_version=f"{kube_version}.0").stdout)
    assert validate_all(rendered, [kube_version]) == []


def test_what_the_switch_adds() -> None:
    rendered = docs()
    service = one(rendered, "Service", SCALER)
    assert service["spec"]["ports"] == [{"name": "grpc", "port": 9443, "targetPort": "keda-grpc", "protocol": "TCP"}]
    assert service["spec"]["selector"] == one(rendered, "Service", f"{RELEASE}-gpu-autoscaler-adapter")["spec"][
        "selector"]
    server = one(rendered, "Secret", f"{SCALER}-tls")
    client = one(rendered, "Secret", f"{SCALER}-client")
    assert server["metadata"]["namespace"] == NAMESPACE and client["metadata"]["namespace"] == "keda-system"
    assert server["data"]["ca.crt"] == client["data"]["ca.crt"]
    auth = one(rendered, "ClusterTriggerAuthentication", SCALER)
    assert {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]} == {
        "caCert": (f"{SCALER}-client", "ca.crt"), "tlsClientCert": (f"{SCALER}-client", "tls.crt"),
        "tlsClientKey": (f"{SCALER}-client", "tls.key")}
    container = adapter_container(rendered)
    assert {"name": "keda-grpc", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    assert "--keda-scaler-stream-interval=2s" in container["args"]
    # The limits (adapter.kedaScaler.limits), each passed as its flag with the flag's own default.
    assert limit_args(container) == {flag.name: str(flag.default) for flag in KEDA if flag.name in LIMIT_FLAGS}
    # The CLI accepts the rendered command line.
    proc = subprocess.run([sys.executable, "-m", "adapter", *container["args"], "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


LIMIT_FLAGS = {f"--keda-scaler-{name}" for name in (
    "max-requests-inflight", "max-streams", "max-connections", "handshake-timeout", "max-connection-idle",
    "max-connection-age", "max-connection-age-grace", "keepalive-min-time")}


def limit_args(container: dict[str, Any]) -> dict[str, str]:
    pairs = [arg.split("=", 1) for arg in container["args"] if arg.split("=", 1)[0] in LIMIT_FLAGS]
    return dict((name, value) for name, value in pairs)


def test_limits_are_tuned_from_values() -> None:
    container = adapter_container(docs("adapter.kedaScaler.limits.maxRequestsInflight=200",
                                       "adapter.kedaScaler.limits.maxConnections=0",
                                       "adapter.kedaScaler.limits.maxConnectionAge=0",
                                       "adapter.kedaScaler.limits.handshakeTimeout=30s"))
    args = limit_args(container)
    names = ("max-requests-inflight", "max-connections", "max-connection-age", "handshake-timeout")
    assert [args[f"--keda-scaler-{name}"] for name in names] == ["200", "0", "0", "30s"]


def test_insecure_mode_and_without_cluster_trigger_authentication() -> None:
    insecure = docs("adapter.kedaScaler.tls.mode=insecure")
    assert "--keda-scaler-insecure" in adapter_container(insecure)["args"]
    assert not [d for d in insecure if d["kind"] in ("Secret", "ClusterTriggerAuthentication")
                and "keda" in d["metadata"]["name"]]
    own = docs("adapter.kedaScaler.clusterTriggerAuthentication.enabled=false")
    assert not find(own, "ClusterTriggerAuthentication")
    assert one(own, "Secret", f"{SCALER}-client")["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize(("sets", "message"), [
    (["adapter.kedaScaler.tls.mode=cert-manager"], "mode"),
    (["adapter.kedaScaler.streamInterval=soon"], "streamInterval"),
    (["adapter.kedaScaler.enable=true"], "enable"),
    (["adapter.kedaScaler.limits.maxRequestsInflight=0"], "maxRequestsInflight"),
    (["adapter.kedaScaler.limits.maxConnections=-1"], "maxConnections"),
    (["adapter.kedaScaler.limits.handshakeTimeout=0"], "handshakeTimeout"),
    (["adapter.kedaScaler.limits.maxConnectionAge=soon"], "maxConnectionAge"),
    (["adapter.kedaScaler.limits.maxStreamsPerConnection=5"], "maxStreamsPerConnection"),
])
def test_values_schema_rejects_bad_values(sets: list[str], message: str) -> None:
    proc = render(*sets, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


@pytest.mark.e2e
def test_the_deployment_serves_the_scaler_to_keda_with_the_chart_certificates(tmp_path: Path) -> None:
    """The adapter run with the Deployment's arguments and the scaler Secret mounted; a client dialling as KEDA does
    with the ClusterTriggerAuthentication's Secret (caCert, tlsClientCert, tlsClientKey) and the Service's name as
    scalerAddress gets answers; without the client certificate, or for another name, the handshake fails."""
    rendered = docs()
    container = adapter_container(rendered)
    server = one(rendered, "Secret", f"{SCALER}-tls")["data"]
    client = {k: base64.b64decode(v) for k, v in one(rendered, "Secret", f"{SCALER}-client")["data"].items()}
    certs = tmp_path / "keda-cert"
    certs.mkdir()
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (certs / key).write_bytes(base64.b64decode(server[key]))
    port, https = free_port(), free_port()
    args = []
    for arg in container["args"]:
        arg = arg.replace("/var/run/keda-scaler-cert", str(certs))
        if arg.startswith("--keda-scaler-port="):
            arg = f"--keda-scaler-port={port}"
        elif arg.startswith("--secure-port="):
            arg = f"--secure-port={https}"
        elif arg.startswith("--prometheus-url="):
            arg = f"--prometheus-url=http://127.0.0.1:{free_port()}"  # nothing listens: GetMetricSpec needs none
        elif arg.startswith(("--config=", "--tls-cert-file=", "--tls-private-key-file=")):
            continue  # the rules and the HTTPS pair are test_chart.py's concern: presets and a self-signed pair
        args.append(arg)
    proc = subprocess.Popen([sys.executable, "-m", "adapter", *args, "--bind-address=127.0.0.1", "--disable-auth",
                             f"--cert-dir={tmp_path / 'https'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    host = f"{SCALER}.{NAMESPACE}.svc"
    metadata = {"scalerAddress": f"{host}:9443", "metric": "llm_d_epp_flow_control_queue_size",
                "metricSelector": "inference_pool=vllm", "targetValue": "4"}
    keda = KedaClient(f"127.0.0.1:{port}", ca_cert=client["ca.crt"], client_cert=client["tls.crt"],
                      client_key=client["tls.key"], server_name=host, timeout=30)
    try:
        trigger = keda.trigger("vllm", "default", metadata)
        [spec] = keda.stub.GetMetricSpec(trigger.ref, timeout=30, wait_for_ready=True).metricSpecs
        assert (spec.metricName, spec.targetSizeFloat) == ("llm_d_epp_flow_control_queue_size", 4.0)
        for what, other in {
            "no client certificate": KedaClient(f"127.0.0.1:{port}", ca_cert=client["ca.crt"], server_name=host,
                                                timeout=5),
            "another name": KedaClient(f"127.0.0.1:{port}", ca_cert=client["ca.crt"], client_cert=client["tls.crt"],
                                       client_key=client["tls.key"], server_name="other.gpu-system.svc", timeout=5),
        }.items():
            try:
                with pytest.raises(grpc.RpcError) as caught:
                    other.stub.GetMetricSpec(trigger.ref, timeout=5)
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, what
            finally:
                other.close()
    finally:
        keda.close()
        log = terminate(proc)
    assert "Traceback" not in log, log
