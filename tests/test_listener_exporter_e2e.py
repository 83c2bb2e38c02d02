"""The exporter's /metrics port against clients that misbehave, plain and with TLS from its web config: the limits
Go's net/http gives dcgm-exporter (internal/pkg/server/server.go sets ReadTimeout and WriteTimeout; ReadHeaderTimeout,
IdleTimeout and the TLS handshake fall back to them, net/http server.go; MaxHeaderBytes 1 MiB), the cap on waiting
connections and on requests in flight, and a scrape that still gets through while they are tested."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import pytest
import yaml

from listener.limits import HEAD_SLOP_BYTES
from tests.support.certs import issue, make_ca
from tests.support.exporter_process import ExporterProcess
from tests.support.raw_http import connect, get, is_open, read_answer, request, seconds_until_closed
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

READ_S, MAX_WAITING = 2.0, 10


@pytest.fixture(scope="module", params=["plain", "tls"])
def exporter(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, bool]]:
    tls = request.param == "tls"
    args = ["--backend", "fake", f"--web-read-timeout={READ_S:g}s", "--web-max-waiting-connections", str(MAX_WAITING)]
    client: dict[str, Any] = {}
    if tls:
        d = tmp_path_factory.mktemp("exporter-tls")
        ca = make_ca("exporter listener CA")
        issue(ca, "gpu-exporter", client=False, server_names=("127.0.0.1",)).write(d, "server")
        (d / "web.yaml").write_text(yaml.safe_dump({"tls_server_config": {"cert_file": "server.crt",
                                                                         "key_file": "server.key"}}))
        args += ["--web-config-file", str(d / "web.yaml")]
        client = {"verify": False}
    exp = ExporterProcess(args, scheme="https" if tls else "http", client=client)
    try:
        yield exp, tls
    finally:
        log = exp.stop()
        assert "Traceback" not in log, log


def scrape_ok(exp: ExporterProcess) -> bool:
    answer = exp.client.get("/metrics")
    return answer.status_code == 200 and "DCGM_FI_DEV_GPU_UTIL{" in answer.text


def padded(size: int) -> bytes:
    start, end = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ", b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def test_head_limits(exporter: tuple[ExporterProcess, bool]) -> None:
    exp, tls = exporter
    limit = (1 << 20) + HEAD_SLOP_BYTES
    assert request(exp.port, padded(limit), tls=tls).status == 200
    too_large = request(exp.port, padded(limit + 1), tls=tls)
    assert too_large.status == 431 and too_large.body.startswith(b"431 Request Header Fields Too Large")
    assert request(exp.port, get("/metrics?" + "a" * 70000), tls=tls).status == 414
    assert request(exp.port, get("/metrics", b"Content-Length: 3\r\n") + b"abc", tls=tls).status == 413
    assert "server" not in request(exp.port, get("/health"), tls=tls).headers


def test_a_slow_client_is_closed_at_the_read_timeout_while_scrapes_go_on(
        exporter: tuple[ExporterProcess, bool]) -> None:
    exp, tls = exporter
    with contextlib.closing(connect(exp.port, tls=tls)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(0.5):
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-A: b\r\n")

        threading.Thread(target=trickle, daemon=True).start()
        try:
            assert scrape_ok(exp)
            took = seconds_until_closed(sock)
        finally:
            stop.set()
    assert READ_S - 0.2 <= took <= READ_S + 1.5
    wait_until(lambda: 'gpu_exporter_connections_closed_total{reason="header_timeout"}' in exp.metrics(), 5,
               "the closed connection counted in the exporter's own metrics")


def test_a_kept_alive_scrape_connection_is_reused_then_closed_at_the_read_timeout(
        exporter: tuple[ExporterProcess, bool]) -> None:
    exp, tls = exporter
    with contextlib.closing(connect(exp.port, tls=tls)) as sock:
        for _ in range(3):
            sock.sendall(get("/metrics"))
            assert read_answer(sock).status == 200
            time.sleep(0.5)
        took = seconds_until_closed(sock)
    assert READ_S - 0.7 <= took <= READ_S + 1.5  # Go's IdleTimeout falls back to ReadTimeout


def test_stalled_connections_past_the_budget_do_not_keep_prometheus_out(exporter: tuple[ExporterProcess, bool]) -> None:
    exp, tls = exporter
    # From another address, as a flooding pod's: Prometheus' kept-alive connection (exp.client's, idle since the
    # tests before) is not the one that makes room.
    stalled = [socket.create_connection(("127.0.0.1", exp.port), source_address=("127.0.0.2", 0))
               for _ in range(MAX_WAITING + 5)]
    try:
        assert scrape_ok(exp)  # a new connection: the oldest stalled one makes room
        wait_until(lambda: not is_open(stalled[0]), 5, "the oldest stalled connection closed")
        if tls:  # a handshake that never starts ends at the read timeout (Go's tlsHandshakeTimeout)
            assert seconds_until_closed(stalled[-1]) <= READ_S + 1.5
    finally:
        for sock in stalled:
            sock.close()


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()


@pytest.fixture
def authenticated(tmp_path: Path) -> Iterator[ExporterProcess]:
    (tmp_path / "web.yaml").write_text(yaml.safe_dump({"basic_auth_users": {"prometheus": _hash("right")}}))
    exp = ExporterProcess(["--backend", "fake", "--web-config-file", str(tmp_path / "web.yaml"),
                           "--web-max-requests-inflight", "2"], client={"auth": ("prometheus", "right")})
    try:
        yield exp
    finally:
        exp.stop()


def test_wrong_passwords_in_flood_get_429_past_the_limit_and_scrapes_still_pass(authenticated: ExporterProcess) -> None:
    exp = authenticated
    assert scrape_ok(exp)  # the right password is checked once (bcrypt) and then cached

    def wrong(i: int) -> httpx.Response:
        return httpx.get(exp.url + "/metrics", auth=("prometheus", f"guess-{i}"), timeout=30.0)

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(wrong, range(40)))  # each a bcrypt check, in a worker thread
    codes = {a.status_code for a in answers}
    assert codes <= {401, 429} and 429 in codes
    assert all(a.headers["retry-after"] == "1" for a in answers if a.status_code == 429)
    assert scrape_ok(exp)
