"""The adapter's shutdown with a real server, Prometheus and clients: SIGTERM fails /readyz at once while requests
are still served (with ``Connection: close``) for --shutdown-delay-duration; then the listener closes, requests in
flight finish and the process exits 0 inside --shutdown-drain-timeout; --shutdown-send-retry-after answers 429
instead; a second SIGTERM exits at once. These are also the uvicorn behaviours adapter/server/lifecycle.py relies on
(its Server's signal handler and tick, Config.timeout_graceful_shutdown, Connection: close at its shutdown)."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.adapter_metrics import metric_value
from tests.support.adapter_process import AdapterProcess
from tests.support.counting_proxy import CountingProxy
from tests.support.prometheus import PrometheusServer, scraping
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]

EXPOSITION = ('# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n'
              'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="node-a",namespace="ml",pod="infer-0"} 50\n')
METRIC = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL"
UNVERIFIED = ssl._create_unverified_context()  # the adapter's self-signed certificate


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    with scraping(EXPOSITION, "DCGM_FI_DEV_GPU_UTIL") as prom:
        yield prom


@pytest.fixture
def proxy(prometheus: PrometheusServer) -> Iterator[CountingProxy]:
    """Prometheus behind a proxy that can hold instant queries (a request kept in flight on purpose)."""
    held = CountingProxy(prometheus.url)
    yield held
    held.stop()


class Connection:
    """One kept-alive HTTPS connection, as the aggregator's transport keeps them."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=UNVERIFIED, timeout=30)

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        self.conn.request("GET", path, headers=headers or {})
        response = self.conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()

    def close(self) -> None:
        self.conn.close()


def in_background(path: str, port: int) -> tuple[threading.Thread, dict]:
    """A request on a connection of its own, answered in a thread; its (status, headers, body) land in the dict."""
    result: dict = {}

    def run() -> None:
        conn = Connection(port)
        try:
            result["answer"] = conn.get(path)
        except OSError as exc:
            result["error"] = exc
        finally:
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def start(proxy: CountingProxy, tmp_path: Path, *args: str) -> AdapterProcess:
    """The adapter, answering the metric (no query reuse: each request asks Prometheus, where it can be held)."""
    adapter = AdapterProcess(proxy.url, str(tmp_path / "certs"), ["--query-cache-ttl", "0", *args])
    wait_until(lambda: adapter.get(METRIC).status_code == 200, what="the metric served")
    return adapter


def test_sigterm_keeps_serving_through_the_delay_then_drains_and_exits_0(proxy: CountingProxy,
                                                                           tmp_path: Path) -> None:
    adapter = start(proxy, tmp_path, "--shutdown-delay-duration", "3s", "--shutdown-drain-timeout", "20s")
    kept = Connection(adapter.port)
    try:
        status, headers, _ = kept.get("/readyz")
        assert status == 200 and "close" not in headers.get("connection", "")
        proxy.hold()
        held, answer = in_background(METRIC, adapter.port)
        wait_until(lambda: proxy.instant_queries() >= 2, what="the metric's query held at Prometheus")
        signalled = time.monotonic()
        adapter.proc.send_signal(signal.SIGTERM)
        adapter.output.wait_for("shutdown initiated")
        # The delay: /readyz fails at once; everything else is served, telling kept-alive clients to reconnect.
        status, headers, body = kept.get("/readyz")
        assert (status, body) == (503, b"shutting down") and headers["connection"] == "close"
        kept.close()
        fresh = Connection(adapter.port)
        status, headers, body = fresh.get("/apis/custom.metrics.k8s.io/v1beta1")
        assert status == 200 and headers["connection"] == "close"
        fresh.close()
        # After the delay: the listener is closed, the request in flight still finishes.
        adapter.output.wait_for("shutdown delay over")
        assert time.monotonic() - signalled >= 3.0
        assert refused(adapter.port)
        assert held.is_alive()
        proxy.release()
        held.join(30)
        status, headers, body = answer["answer"]
        assert status == 200 and headers["connection"] == "close"
        assert json.loads(body)["items"][0]["value"] == "50"
        assert adapter.proc.wait(30) == 0
    finally:
        proxy.release()
        log = adapter.stop()
    assert "[graceful-termination] drained" in log and "Traceback" not in log, log


def test_send_retry_after_answers_429_while_draining_but_serves_probes_and_metrics(proxy: CountingProxy,
                                                                                   tmp_path: Path) -> None:
    adapter = start(proxy, tmp_path, "--shutdown-delay-duration", "1s", "--shutdown-send-retry-after",
                    "--shutdown-drain-timeout", "20s")
    try:
        proxy.hold()
        held, answer = in_background(METRIC, adapter.port)
        wait_until(lambda: proxy.instant_queries() >= 2, what="the metric's query held at Prometheus")
        adapter.proc.send_signal(signal.SIGTERM)
        adapter.output.wait_for("shutdown delay over")
        conn = Connection(adapter.port)  # the listener stays open while the request in flight drains
        status, headers, body = conn.get(METRIC)
        assert status == 429 and headers["retry-after"] == "5" and headers["connection"] == "close"
        assert json.loads(body) == {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the adapter is shutting down, please try again later", "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": 5}, "code": 429}
        conn.close()
        exempt = [("/readyz", {}, 503), ("/livez", {}, 200), ("/metrics", {}, 200),
                  ("/apis", {"User-Agent": "kube-apiserver/v1.33.0 (linux/amd64) kubernetes/abc"}, 200)]
        for path, headers, code in exempt:  # upstream's exemptions: probes, /metrics, kube-apiserver's loopback
            conn = Connection(adapter.port)
            assert conn.get(path, headers)[0] == code, path
            conn.close()
        assert metric_value(adapter, "gpu_adapter_shutdown_rejected_requests_total") == 1
        assert metric_value(adapter, "gpu_adapter_shutdown_phase", {"phase": "draining"}) == 1
        assert metric_value(adapter, "gpu_adapter_requests_in_flight") == 1
        proxy.release()
        held.join(30)
        assert answer["answer"][0] == 200
        adapter.output.wait_for("in-flight requests drained")
        assert adapter.proc.wait(30) == 0
    finally:
        proxy.release()
        log = adapter.stop()
    assert "Traceback" not in log, log


def test_the_drain_timeout_bounds_the_exit(proxy: CountingProxy, tmp_path: Path) -> None:
    """A request that never finishes does not keep the pod past its grace period."""
    adapter = start(proxy, tmp_path, "--shutdown-drain-timeout", "2s")
    try:
        proxy.hold()
        held, answer = in_background(METRIC, adapter.port)
        wait_until(lambda: proxy.instant_queries() >= 2, what="the metric's query held at Prometheus")
        signalled = time.monotonic()
        adapter.proc.send_signal(signal.SIGTERM)
        assert adapter.proc.wait(30) == 0
        assert 2.0 <= time.monotonic() - signalled < 8.0
        held.join(30)
        assert "error" in answer or answer["answer"][0] != 200  # cut off, never a made-up answer
    finally:
        proxy.release()
        adapter.stop()


def test_a_second_sigterm_exits_at_once_with_status_1(proxy: CountingProxy, tmp_path: Path) -> None:
    adapter = start(proxy, tmp_path, "--shutdown-delay-duration", "60s")
    try:
        adapter.proc.send_signal(signal.SIGTERM)
        adapter.output.wait_for("shutdown initiated")
        assert adapter.get("/readyz").status_code == 503
        signalled = time.monotonic()
        adapter.proc.send_signal(signal.SIGTERM)
        assert adapter.proc.wait(30) == 1
        assert time.monotonic() - signalled < 5.0
    finally:
        log = adapter.stop()
    assert "SIGTERM again: exiting now" in log and "Traceback" not in log, log
