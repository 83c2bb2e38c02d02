"""``--web-config-file`` end to end: a test CA, TLS, a required client certificate, bcrypt basic auth, and a real
Prometheus scraping the exporter with the matching ``tls_config``/``basic_auth``.

Semantics from prometheus/exporter-toolkit web/handler.go (401 + ``WWW-Authenticate: Basic``) and
web/tls_config.go (client_auth_type names, client CA without a policy, relative paths, strict keys)."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import bcrypt
import httpx
import pytest
import yaml

from tests.support.certs import issue, make_ca
from tests.support.exporter_process import ExporterProcess
from tests.support.waiting import wait_until
from tests.test_exporter_e2e import run_cli

if TYPE_CHECKING:
    from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.e2e

PASSWORD = "s3cret-scrape"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("pki")
    ca, other_ca = make_ca("exporter test CA"), make_ca("someone else's CA")
    server = issue(ca, "gpu-exporter", client=False, server_names=("127.0.0.1", "localhost"))
    client, stranger = issue(ca, "prometheus"), issue(other_ca, "prometheus")
    (d / "ca.crt").write_bytes(ca.cert_pem)
    files: dict[str, Any] = {"dir": d, "ca": str(d / "ca.crt")}
    for name, cert in (("server", server), ("client", client), ("stranger", stranger)):
        files[name] = cert.write(d, name)
    return files


def tls(ca: str, client: tuple[str, str] | None = None) -> ssl.SSLContext:
    """A client TLS context trusting ``ca``, presenting ``client`` (cert, key) when given."""
    ctx = ssl.create_default_context(cafile=ca)
    if client is not None:
        ctx.load_cert_chain(*client)
    return ctx


def _web_config(directory: Path, doc: dict[str, Any]) -> str:
    path = directory / "web-config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _hash(password: str) -> str:
    # htpasswd -B writes $2y$; exporter-toolkit (Go's bcrypt) accepts it, and so must we.
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode().replace("$2b$", "$2y$", 1)


def test_tls_client_certificate_and_basic_auth(pki: dict[str, Any], tmp_path: Path) -> None:
    config = _web_config(pki["dir"], {  # relative names: relative to the config file's directory
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                              "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "ca.crt"},
        "basic_auth_users": {"prometheus": _hash(PASSWORD)},
        "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
    })
    good = {"verify": tls(pki["ca"], pki["client"]), "auth": ("prometheus", PASSWORD)}
    exporter = ExporterProcess(["--backend", "fake", "--web-config-file", config], scheme="https", client=good)
    try:
        ok = exporter.client.get("/metrics")
        assert ok.status_code == 200 and "DCGM_FI_DEV_GPU_UTIL{" in ok.text
        assert ok.headers["x-frame-options"] == "deny"
        url = exporter.url + "/metrics"
        wrong = httpx.get(url, verify=tls(pki["ca"], pki["client"]), auth=("prometheus", "guess"))
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Basic"
        assert "DCGM" not in wrong.text
        nobody = httpx.get(url, verify=tls(pki["ca"], pki["client"]), auth=("root", PASSWORD))
        assert nobody.status_code == 401
        assert httpx.get(exporter.url + "/health", verify=tls(pki["ca"], pki["client"])).status_code == 401
        for cert in (None, pki["stranger"]):  # no client certificate, or one from another CA: no TLS session
            with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                httpx.get(url, verify=tls(pki["ca"], cert), auth=("prometheus", PASSWORD)).raise_for_status()
        with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port gets no metrics
            httpx.get(f"http://{exporter.address}/metrics").raise_for_status()
    finally:
        exporter.stop()


def test_basic_auth_without_tls(tmp_path: Path) -> None:
    config = _web_config(tmp_path, {"basic_auth_users": {"scraper": _hash(PASSWORD)}})
    exporter = ExporterProcess(["--backend", "fake"], {"DCGM_EXPORTER_WEB_CONFIG_FILE": config},
                               client={"auth": ("scraper", PASSWORD)})
    try:
        assert exporter.client.get("/metrics").status_code == 200
        assert httpx.get(exporter.url + "/metrics").status_code == 401
    finally:
        exporter.stop()


def test_changed_users_apply_without_restart_and_a_broken_change_keeps_the_last_good(tmp_path: Path) -> None:
    config = Path(_web_config(tmp_path, {"basic_auth_users": {"scraper": _hash("first")}}))
    exporter = ExporterProcess(["--backend", "fake", "--web-config-file", str(config)])
    try:
        assert httpx.get(exporter.url + "/metrics", auth=("scraper", "first")).status_code == 200
        _web_config(tmp_path, {"basic_auth_users": {"scraper": _hash("second")}})
        wait_until(lambda: httpx.get(exporter.url + "/metrics", auth=("scraper", "second")).status_code == 200,
                   what="the new password applied")
        assert httpx.get(exporter.url + "/metrics", auth=("scraper", "first")).status_code == 401
        config.write_text("basic_auth_users: [not, a, mapping]\n")

        def refused_while_serving() -> list[str]:  # requests run the check; each is answered meanwhile
            assert httpx.get(exporter.url + "/metrics", auth=("scraper", "second")).status_code == 200
            return exporter.output.lines_with("web config not reloaded")

        [refused] = wait_until(refused_while_serving, what="the broken web config checked and refused")
        assert "the previous one stays in force" in refused and "basic_auth_users" in refused
        assert httpx.get(exporter.url + "/metrics", auth=("scraper", "second")).status_code == 200
    finally:
        log = exporter.stop()
    assert len([line for line in log.splitlines() if "web config not reloaded" in line]) == 1, log


def _served_serial(port: int, ca: str) -> int:
    from cryptography import x509

    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            tls(ca).wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_a_rotated_server_certificate_is_served_without_restart(tmp_path: Path) -> None:
    ca = make_ca("rotation CA")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    first = issue(ca, "gpu-exporter", client=False, server_names=("127.0.0.1",))
    first.write(tmp_path, "server")
    config = _web_config(tmp_path, {"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"}})
    exporter = ExporterProcess(["--backend", "fake", "--web-config-file", config], scheme="https",
                               client={"verify": tls(str(tmp_path / "ca.crt"))})
    try:
        assert _served_serial(exporter.port, str(tmp_path / "ca.crt")) == first.cert.serial_number
        second = issue(ca, "gpu-exporter", client=False, server_names=("127.0.0.1",))
        second.write(tmp_path, "server")  # as cert-manager rewrites a mounted Secret
        wait_until(lambda: _served_serial(exporter.port, str(tmp_path / "ca.crt")) == second.cert.serial_number,
                   what="the rotated certificate served")
        assert exporter.client.get("/metrics").status_code == 200
    finally:
        exporter.stop()


def test_minimum_tls_version_is_enforced(pki: dict[str, Any], tmp_path: Path) -> None:
    server_cert, server_key = pki["server"]
    config = _web_config(tmp_path, {"tls_server_config": {"cert_file": server_cert, "key_file": server_key,
                                                          "min_version": "TLS13"}})
    exporter = ExporterProcess(["--backend", "fake", "--web-config-file", config], scheme="https",
                               client={"verify": tls(pki["ca"])})
    try:
        assert exporter.client.get("/metrics").status_code == 200
        tls12 = ssl.create_default_context(cafile=pki["ca"])
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(httpx.ConnectError):
            httpx.get(exporter.url + "/metrics", verify=tls12)
    finally:
        exporter.stop()


def test_real_prometheus_scrapes_with_tls_config_and_basic_auth(
        pki: dict[str, Any], prometheus_factory: Callable[..., PrometheusServer]) -> None:
    config = _web_config(pki["dir"], {
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                              "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "ca.crt"},
        "basic_auth_users": {"prometheus": _hash(PASSWORD)},
    })
    client = {"verify": tls(pki["ca"], pki["client"]), "auth": ("prometheus", PASSWORD)}
    exporter = ExporterProcess(["--backend", "fake", "-c", "200", "--web-config-file", config], scheme="https",
                               client=client)
    try:
        cert, key = pki["client"]
        prom = prometheus_factory([exporter.address], job="dcgm-exporter", scrape_options={
            "scheme": "https",
            "tls_config": {"ca_file": pki["ca"], "cert_file": cert, "key_file": key},
            "basic_auth": {"username": "prometheus", "password": PASSWORD},
        })
        up = prom.wait_for('up{job="dcgm-exporter"} == 1', timeout=30)
        assert len(up) == 1
        gpus = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"}', lambda r: len(r) == 2, timeout=30)
        assert {r["metric"]["gpu"] for r in gpus} == {"0", "1"}
    finally:
        exporter.stop()


def test_wrong_password_in_prometheus_is_a_down_target(
        pki: dict[str, Any], tmp_path: Path, prometheus_factory: Callable[..., PrometheusServer]) -> None:
    config = _web_config(tmp_path, {"basic_auth_users": {"prometheus": _hash(PASSWORD)}})
    exporter = ExporterProcess(["--backend", "fake", "--web-config-file", config],
                               client={"auth": ("prometheus", PASSWORD)})
    try:
        prom = prometheus_factory([exporter.address], job="dcgm-exporter",
                                  scrape_options={"basic_auth": {"username": "prometheus", "password": "old"}})
        prom.wait_for('up{job="dcgm-exporter"} == 0', timeout=30)
        target = prom.targets()[0]
        assert "401" in target["lastError"], target
    finally:
        exporter.stop()


def test_web_read_timeout_closes_a_client_that_never_finishes_its_request() -> None:
    exporter = ExporterProcess(["--backend", "fake", "--web-read-timeout=1s"])
    try:
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=10) as slow:
            slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
            started = time.monotonic()
            assert slow.recv(1024) == b""  # closed by the server
            assert time.monotonic() - started < 8
        assert exporter.client.get("/health").status_code == 200  # others are still served
    finally:
        exporter.stop()


@pytest.mark.parametrize(("doc", "message"), [
    ({"tls_server_config": {"cert_file": "s.crt", "key_file": "s.key", "client_auth": "x"}},
     "tls_server_config: unknown field 'client_auth'"),
    ({"basic_auth_user": {}}, "web-config.yaml: unknown field 'basic_auth_user'"),
    ({"basic_auth_users": {"alice": "plaintext"}}, "basic_auth_users.alice: not a bcrypt hash"),
    ({"tls_server_config": {"cert_file": "s.crt", "key_file": "s.key", "client_ca_file": "ca.crt"}},
     "client CA's have been configured without a Client Auth Policy"),
    ({"tls_server_config": {"cert_file": "s.crt", "key_file": "s.key", "client_auth_type": "RequireAnyClientCert",
                            "client_ca_file": "ca.crt"}}, "client_auth_type: RequireAnyClientCert"),
    ({"tls_server_config": {"cert_file": "s.crt", "key_file": "s.key", "client_auth_type": "Maybe"}},
     "client_auth_type: invalid 'Maybe'"),
    ({"tls_server_config": {"cert_file": "s.crt", "key_file": "s.key", "min_version": "TLS9"}},
     "min_version: unknown TLS version 'TLS9'"),
    ({"tls_server_config": {"key_file": "s.key"}}, "missing one of cert or cert_file"),
    ({"tls_server_config": {"cert_file": "missing.crt", "key_file": "s.key"}}, "cannot load cert_file/key_file"),
    ({"http_server_config": {"headers": {"X-Frame-Options": "allow"}}},
     "headers.X-Frame-Options: expected one of deny, sameorigin"),
])
def test_bad_web_config_is_one_line_naming_file_and_field(tmp_path: Path, pki: dict[str, Any],
                                                          doc: dict[str, Any], message: str) -> None:
    cert, key = pki["server"]
    (tmp_path / "s.crt").write_bytes(Path(cert).read_bytes())
    (tmp_path / "s.key").write_bytes(Path(key).read_bytes())
    (tmp_path / "ca.crt").write_bytes(Path(pki["ca"]).read_bytes())
    result = run_cli("--backend", "fake", "--web-config-file", _web_config(tmp_path, doc))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "web-config.yaml" in lines[0] and message in lines[0], result.stderr
