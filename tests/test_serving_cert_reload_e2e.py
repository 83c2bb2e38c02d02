"""The serving certificate follows its files: a renewal (cert-manager rewriting the Secret, the kubelet swapping
the mounted files) is served to new connections while requests flow, with none failing; connections already open
keep theirs; a broken renewal keeps the previous pair; client certificates verify the same after a renewal."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from adapter.auth.stack import add_client_cas
from adapter.server.certreload import ServingCertificate
from adapter.server.serving import guarded_server, server_context
from tests.support.adapter_metrics import metric_value
from tests.support.adapter_process import AdapterProcess
from tests.support.certs import Issued, issue, make_ca
from tests.support.prometheus import PrometheusServer, free_port, scraping
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]

SERVING_CA = make_ca("serving-ca")
PROXY_CA = make_ca("front-proxy-ca")
NAME = "adapter.gpu-system.svc"
METRIC = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL"


class MountedSecret:
    """A directory laid out as the kubelet mounts a Secret: ``tls.crt -> ..data/tls.crt``, ``..data`` a link to a
    timestamped directory, replaced atomically on every update (pkg/volume/util/atomic_writer.go)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0
        root.mkdir()
        for key in ("tls.crt", "tls.key"):
            os.symlink(f"..data/{key}", root / key)

    @property
    def cert_file(self) -> str:
        return str(self.root / "tls.crt")

    @property
    def key_file(self) -> str:
        return str(self.root / "tls.key")

    def write(self, cert_pem: bytes, key_pem: bytes) -> None:
        self.version += 1
        directory = self.root / f"..{self.version:04d}"
        directory.mkdir()
        (directory / "tls.crt").write_bytes(cert_pem)
        (directory / "tls.key").write_bytes(key_pem)
        os.symlink(directory.name, self.root / "..data_tmp")
        os.replace(self.root / "..data_tmp", self.root / "..data")

    def put(self, issued: Issued) -> None:
        self.write(issued.cert_pem, issued.key_pem)


def serving_pair() -> Issued:
    return issue(SERVING_CA, NAME, client=False, server_names=(NAME, "127.0.0.1"))


def served_serial(port: int, context: ssl.SSLContext) -> int:
    """The serial number of the certificate a new connection is shown."""
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                             server_hostname=NAME) as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def trusting() -> ssl.SSLContext:
    return ssl.create_default_context(cadata=SERVING_CA.cert_pem.decode())


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    with scraping('DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="ml",pod="infer-0"} 50\n', "DCGM_FI_DEV_GPU_UTIL") as prom:
        yield prom


def test_a_renewal_while_requests_flow_fails_none(prometheus: PrometheusServer, tmp_path: Path) -> None:
    secret = MountedSecret(tmp_path / "serving-cert")
    first, renewed = serving_pair(), serving_pair()
    secret.put(first)
    adapter = AdapterProcess(prometheus.url, str(tmp_path / "certs"),
                             ["--tls-cert-file", secret.cert_file, "--tls-private-key-file", secret.key_file])
    failures: list[str] = []
    answered = [0]
    stop = threading.Event()

    def flow(client: httpx.Client) -> None:  # the HPA controller's requests, through the aggregator
        while not stop.is_set():
            try:
                response = client.get(f"https://127.0.0.1:{adapter.port}{METRIC}", extensions={"sni_hostname": NAME})
                if response.status_code != 200:
                    failures.append(f"{response.status_code} {response.text[:200]}")
                answered[0] += 1
            except httpx.HTTPError as exc:
                failures.append(repr(exc))

    fresh = httpx.Client(verify=trusting(), limits=httpx.Limits(max_keepalive_connections=0), timeout=10)
    kept = httpx.Client(verify=trusting(), timeout=10)
    flows = [threading.Thread(target=flow, args=(c,), daemon=True) for c in (fresh, kept)]
    try:
        assert served_serial(adapter.port, trusting()) == first.cert.serial_number
        for thread in flows:
            thread.start()
        wait_until(lambda: answered[0] >= 20, what="requests flowing")
        secret.put(renewed)
        wait_until(lambda: served_serial(adapter.port, trusting()) == renewed.cert.serial_number,
                   what="new connections shown the renewed certificate")
        before = answered[0]
        wait_until(lambda: answered[0] >= before + 20, what="requests flowing after the renewal")
        stop.set()
        for thread in flows:
            thread.join(20)
        assert failures == []
        assert metric_value(adapter, "gpu_adapter_serving_certificate_reloads_total", {"result": "applied"}) == 1
        assert metric_value(adapter, "gpu_adapter_serving_certificate_expiry_timestamp_seconds") == \
            renewed.cert.not_valid_after_utc.timestamp()

        # A renewal that cannot be used (the key of another certificate) keeps serving the previous pair.
        secret.write(serving_pair().cert_pem, first.key_pem)
        for _ in range(3):  # each new handshake checks the files; the broken pair is tried (and logged) once
            assert served_serial(adapter.port, trusting()) == renewed.cert.serial_number
        assert metric_value(adapter, "gpu_adapter_serving_certificate_reloads_total", {"result": "refused"}) == 1
    finally:
        stop.set()
        fresh.close()
        kept.close()
        log = adapter.stop()
    assert len([line for line in log.splitlines() if "changed but cannot be used" in line]) == 1, log
    assert "Traceback" not in log, log


async def echo_client_chain(scope, receive, send):  # type: ignore[no-untyped-def]
    tls = (scope.get("extensions") or {}).get("tls") or {}
    body = str(len(tls.get("client_cert_chain") or [])).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


def test_client_certificates_verify_the_same_after_a_renewal(tmp_path: Path) -> None:
    """The front-proxy CA the authenticator trusts (added after the context was made, as AuthStack does) is in
    every context built after a renewal too."""
    secret = MountedSecret(tmp_path / "serving-cert")
    secret.put(serving_pair())
    serving = ServingCertificate(secret.cert_file, secret.key_file,
                                 lambda c, k: server_context(c, k, None, request_client_certs=True))
    serving.configure(lambda ctx: add_client_cas(ctx, PROXY_CA.cert_pem))
    port = free_port()
    server = guarded_server(echo_client_chain, "127.0.0.1", port, serving.listening, lifespan="off")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 10, "uvicorn started", interval=0.02)
    client_ctx = trusting()
    client_ctx.load_cert_chain(*issue(PROXY_CA, "front-proxy-client").write(tmp_path, "client"))
    try:
        def chain_length() -> str:
            with httpx.Client(verify=client_ctx, timeout=10) as client:
                return client.get(f"https://127.0.0.1:{port}/", extensions={"sni_hostname": NAME}).text

        assert chain_length() == "1"
        renewed = serving_pair()
        secret.put(renewed)
        assert served_serial(port, client_ctx) == renewed.cert.serial_number
        assert chain_length() == "1"
    finally:
        server.should_exit = True
        thread.join(10)
