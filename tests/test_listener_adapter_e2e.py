"""The adapter's HTTPS port against clients that misbehave before they are authenticated: each limit refuses what it
should (kube-apiserver's limits, k8s.io/apiserver pkg/server/secure_serving.go, and its max-in-flight filter,
pkg/server/filters/maxinflight.go) and lets normal traffic through: a head just under the limit, a slow but
legitimate client inside the timeout, the aggregator's long-lived connection reused across requests.

One adapter (short timeouts so the test is quick) in front of a real Prometheus, through a proxy that can hold the
adapter's queries so that requests stay in flight as long as a test needs."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from listener.limits import HEAD_SLOP_BYTES
from tests.support.adapter_metrics import scrape, value
from tests.support.adapter_process import AdapterProcess
from tests.support.counting_proxy import CountingProxy
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.raw_http import connect, get, is_open, read_answer, request, seconds_until_closed
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

READ_HEADER_S, IDLE_S, REQUEST_TIMEOUT_S, MAX_WAITING, MAX_IN_FLIGHT = 2.0, 3.0, 2.0, 30, 4
MIB = 1 << 20
POD = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL"
RULES = """\
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
"""


class Served:
    def __init__(self, adapter: AdapterProcess, proxy: CountingProxy, rules: Path) -> None:
        self.adapter, self.proxy, self.rules = adapter, proxy, rules
        self.port = adapter.port

    def closed(self, reason: str) -> float:
        return value(scrape(self.adapter), "gpu_adapter_connections_closed_total", reason=reason) or 0.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("listener")
    (tmp / "rules.yaml").write_text(RULES)
    endpoint = MetricsEndpoint('DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="ml",pod="infer-0"} 50\n')
    prom = PrometheusServer([endpoint.address], honor_labels=True, scrape_interval="1s").start()
    proxy = CountingProxy(prom.url)
    adapter = None
    try:
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="infer-0"}', lambda r: len(r) == 1, timeout=30)
        adapter = AdapterProcess(proxy.url, str(tmp / "certs"), [
            "--config", str(tmp / "rules.yaml"), "--query-cache-ttl", "0", "--prometheus-timeout", "20s",
            "--read-header-timeout", f"{READ_HEADER_S:g}s", "--idle-timeout", f"{IDLE_S:g}s",
            "--request-timeout", f"{REQUEST_TIMEOUT_S:g}s", "--max-waiting-connections", str(MAX_WAITING),
            "--max-requests-inflight", str(MAX_IN_FLIGHT)])
        yield Served(adapter, proxy, tmp / "rules.yaml")
    finally:
        if adapter is not None:
            log = adapter.stop()
            # A client that misbehaves costs at most a line (rate-limited), never a traceback.
            assert "Traceback" not in log, log
        proxy.stop()
        prom.stop()
        endpoint.stop()


def padded_get(size: int) -> bytes:
    """A GET /healthz whose head (request line, fields and the blank line) is exactly ``size`` bytes."""
    start, end = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ", b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def test_a_head_at_the_limit_is_served_and_one_byte_more_is_431(served: Served) -> None:
    limit = MIB + HEAD_SLOP_BYTES  # Go reads MaxHeaderBytes + 4096 (net/http server.go initialReadLimitSize)
    assert request(served.port, padded_get(limit)).status == 200
    refused = request(served.port, padded_get(limit + 1))
    assert refused.status == 431
    assert refused.headers["connection"] == "close"
    assert refused.json()["kind"] == "Status" and refused.json()["code"] == 431


def test_an_oversized_head_is_refused_without_the_rest_being_read(served: Served) -> None:
    pid = served.adapter.proc.pid
    before = psutil.Process(pid).memory_info().rss
    sent = 0
    with contextlib.closing(connect(served.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        chunk = b"a" * (256 << 10)
        with contextlib.suppress(ConnectionResetError, BrokenPipeError, OSError):
            while sent < 200 * MIB:  # the 200 MB header line of the issue, if the server kept reading
                sock.sendall(chunk)
                sent += len(chunk)
        assert sent < 32 * MIB, f"the server read {sent} bytes of a head limited to 1 MiB"
    growth = psutil.Process(pid).memory_info().rss - before
    assert growth < 40 * MIB, f"RSS grew by {growth / MIB:.0f} MiB for one oversized request"


def test_a_request_line_over_64_kib_is_414(served: Served) -> None:
    answer = request(served.port, get("/healthz?" + "a" * 70000))
    assert answer.status == 414 and answer.json()["code"] == 414
    assert request(served.port, get("/healthz?" + "a" * 60000)).status == 200


@pytest.mark.parametrize("framing", [b"Content-Length: 5\r\n", b"Transfer-Encoding: chunked\r\n"],
                         ids=["content-length", "chunked"])
def test_a_request_body_is_refused_unread(served: Served, framing: bytes) -> None:
    answer = request(served.port, get(POD, framing) + b"hello")
    assert answer.status == 413 and answer.headers["connection"] == "close"
    assert request(served.port, get("/healthz", b"Content-Length: 0\r\n")).status == 200  # an empty body is none


def test_no_server_header_names_the_software(served: Served) -> None:
    answer = request(served.port, get("/healthz"))
    assert answer.status == 200 and "server" not in answer.headers


def test_a_slow_but_legitimate_client_inside_the_timeout_is_served(served: Served) -> None:
    head = get("/healthz", b"User-Agent: slow-but-fine\r\n")
    with contextlib.closing(connect(served.port)) as sock:
        for i in range(4):  # four pieces over 1.2 s, inside the 2 s read-header timeout
            sock.sendall(head[i * len(head) // 4:(i + 1) * len(head) // 4])
            time.sleep(0.4)
        assert read_answer(sock).status == 200


def test_a_head_that_never_ends_is_closed_at_the_read_header_timeout(served: Served) -> None:
    before = served.closed("header_timeout")
    with contextlib.closing(connect(served.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        stop = threading.Event()

        def trickle() -> None:  # a header every 0.5 s, as the attacker sends one every 5 s
            while not stop.wait(0.5):
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-A: b\r\n")

        threading.Thread(target=trickle, daemon=True).start()
        try:
            took = seconds_until_closed(sock)
        finally:
            stop.set()
    assert READ_HEADER_S - 0.2 <= took <= READ_HEADER_S + 1.5
    assert served.closed("header_timeout") == before + 1


def test_a_stalled_tls_handshake_is_closed_at_the_read_header_timeout(served: Served) -> None:
    before = served.closed("handshake_timeout")
    with contextlib.closing(socket.create_connection(("127.0.0.1", served.port))) as raw:
        took = seconds_until_closed(raw)
    assert READ_HEADER_S - 0.2 <= took <= READ_HEADER_S + 1.5
    wait_until(lambda: served.closed("handshake_timeout") == before + 1, 5, "a handshake timeout counted")


def test_the_aggregators_connection_is_reused_and_closed_when_idle(served: Served) -> None:
    with contextlib.closing(connect(served.port)) as sock:
        local = sock.getsockname()
        for _ in range(3):  # one connection, a request every second (the HPA controller's pace, shortened)
            sock.sendall(get("/healthz"))
            assert read_answer(sock).status == 200
            time.sleep(1.0)
        assert sock.getsockname() == local and is_open(sock)
        took = seconds_until_closed(sock)
    assert IDLE_S - 1.2 <= took <= IDLE_S + 1.5  # 1 s of the idle time had passed already


def test_past_the_waiting_budget_the_longest_waiting_connection_is_closed(served: Served,
                                                                            tmp_path: Path) -> None:
    # An adapter of its own with a long read-header timeout: here only the budget closes connections.
    adapter = AdapterProcess(served.proxy.url, str(tmp_path / "certs"), [
        "--config", str(served.rules), "--read-header-timeout", "60s", "--max-waiting-connections", str(MAX_WAITING)])
    slow = []
    try:
        for _ in range(MAX_WAITING + 5):
            sock = connect(adapter.port)
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # a head begun, never finished
            slow.append(sock)
        # A normal client still gets through, and the first ones waiting made room.
        assert request(adapter.port, get("/healthz")).status == 200
        wait_until(lambda: not is_open(slow[5]), 5, "the oldest waiting connections closed")
        assert [is_open(s) for s in slow[:6]] == [False] * 6
        assert [is_open(s) for s in slow[-10:]] == [True] * 10
        assert value(scrape(adapter), "gpu_adapter_connections_closed_total", reason="evicted") >= 6
    finally:
        for sock in slow:
            sock.close()
        adapter.stop()


def test_requests_past_the_in_flight_limit_get_429_with_retry_after(served: Served) -> None:
    served.proxy.hold()
    try:
        with httpx.Client(base_url=served.adapter.url, verify=False, timeout=30.0,
                          limits=httpx.Limits(max_connections=20)) as client, ThreadPoolExecutor(MAX_IN_FLIGHT) as pool:
            held = [pool.submit(client.get, POD) for _ in range(MAX_IN_FLIGHT)]
            wait_until(lambda: served.proxy.instant_queries() >= 1, 10, "the held requests inside the adapter")
            time.sleep(0.3)
            refused = client.get(POD)
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            status = refused.json()
            assert (status["reason"], status["message"]) == ("TooManyRequests",
                                                             "Too many requests, please try again later.")
            assert client.get("/readyz").status_code == 200  # probes are not counted
            served.proxy.release()
            assert [f.result().status_code for f in held] == [200] * MAX_IN_FLIGHT
        assert value(scrape(served.adapter), "gpu_adapter_requests_throttled_total") >= 1
    finally:
        served.proxy.release()


def test_past_the_limit_seats_go_round_the_client_addresses(served: Served, tmp_path: Path) -> None:
    """A pod flooding the port from its own address waits its turn: the aggregator's request, arriving after ten of
    the flood's, is seated second (API Priority and Fairness' fair queuing, one flow per address)."""
    adapter = AdapterProcess(served.proxy.url, str(tmp_path / "certs"), [
        "--config", str(served.rules), "--query-cache-ttl", "0", "--max-requests-inflight", "2",
        "--request-timeout", "60s", "--prometheus-timeout", "20s"])
    finished: list[str] = []
    lock = threading.Lock()

    def ask(source: str, name: str) -> int:
        transport = httpx.HTTPTransport(verify=False, local_address=source)
        with httpx.Client(transport=transport, base_url=adapter.url, timeout=60.0) as client:
            status = client.get(POD).status_code
        with lock:
            finished.append(name)
        return status

    served.proxy.hold()
    try:
        with ThreadPoolExecutor(12) as pool:
            flood = [pool.submit(ask, "127.0.0.2", f"flood-{i}") for i in range(10)]
            wait_until(lambda: value(scrape(adapter), "gpu_adapter_requests_in_flight") == 2, 10, "2 in flight")
            time.sleep(0.5)  # the other 8 are queued behind them
            hpa = pool.submit(ask, "127.0.0.1", "aggregator")
            time.sleep(0.5)
            served.proxy.release()
            assert hpa.result() == 200 and [f.result() for f in flood] == [200] * 10
    finally:
        served.proxy.release()
        adapter.stop()
    # Two in flight finish first; the first seat freed goes to the flood's turn, the second to the aggregator.
    assert finished.index("aggregator") <= 3, finished


def test_a_request_not_answered_within_the_request_timeout_gets_504(served: Served) -> None:
    served.proxy.hold()
    try:
        start = time.monotonic()
        answer = httpx.get(served.adapter.url + POD, verify=False, timeout=30.0)
        took = time.monotonic() - start
        assert answer.status_code == 504
        assert answer.json()["message"] == "request did not complete within the allotted timeout"
        assert REQUEST_TIMEOUT_S - 0.2 <= took <= REQUEST_TIMEOUT_S + 1.5
    finally:
        served.proxy.release()
    assert httpx.get(served.adapter.url + POD, verify=False, timeout=30.0).status_code == 200


def test_the_log_names_refusals_once_per_kind(served: Served) -> None:
    for _ in range(20):
        assert request(served.port, get("/healthz?" + "a" * 70000)).status == 414
    wait_until(lambda: "answered 414" in served.adapter.output.text, 5, "a line about the 414s")
    assert served.adapter.output.text.count("answered 414") == 1
