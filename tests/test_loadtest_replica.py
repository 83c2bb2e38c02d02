"""The inference stand-in replica as a real process: one request at a time on its GPU, busy fraction, abandoned
requests skipped, graceful SIGTERM."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadtest.standins.replica import READY_PREFIX
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


@dataclass
class Replica:
    process: subprocess.Popen[str]
    url: str

    def stats(self) -> dict[str, float]:
        return dict(httpx.get(f"{self.url}/stats", timeout=5).json())


def start(service_ms: int) -> Replica:
    process = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "replica", "--name", "infer-3", "--gpu", "3", "--service-ms",
         str(service_ms), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line.startswith(READY_PREFIX), process.stderr.read() if process.stderr else line
    return Replica(process, f"http://{line.removeprefix(READY_PREFIX)}")


@pytest.fixture
def replica() -> Iterator[Replica]:
    r = start(service_ms=100)
    yield r
    r.process.kill()
    r.process.communicate()


def test_requests_take_the_gpu_one_at_a_time(replica: Replica) -> None:
    assert httpx.get(f"{replica.url}/healthz").text == "ok"
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: httpx.post(f"{replica.url}/infer", timeout=10).json(), range(4)))
    assert {a["replica"] for a in answers} == {"infer-3"} and {a["gpu"] for a in answers} == {3}
    intervals = sorted((a["started"], a["finished"]) for a in answers)
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(intervals))
    assert all(a["service_ms"] >= 100 for a in answers)
    stats = replica.stats()
    assert stats["served"] == 4 and stats["in_flight"] == 0
    assert 0 < stats["busy"] <= 1
    assert httpx.get(f"{replica.url}/nope").status_code == 404
    assert httpx.put(f"{replica.url}/infer").status_code == 405


def test_a_request_whose_client_left_is_skipped() -> None:
    replica = start(service_ms=2000)
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(httpx.get, f"{replica.url}/infer", timeout=30)
            wait_until(lambda: replica.stats()["in_flight"] == 1, what="the first request on the GPU")
            with pytest.raises(httpx.TimeoutException):  # gives up while queued behind the first
                httpx.get(f"{replica.url}/infer", timeout=0.3)
            assert first.result().status_code == 200
        wait_until(lambda: replica.stats()["in_flight"] == 0)
        stats = replica.stats()
        assert (stats["served"], stats["abandoned"]) == (1, 1)
    finally:
        replica.process.kill()
        replica.process.communicate()


def test_sigterm_finishes_queued_requests_then_exits() -> None:
    # 1 s per request: all three are at the replica (two queued) for a whole second, however slowly they arrive
    replica = start(service_ms=1000)
    with ThreadPoolExecutor(3) as pool:
        pending = [pool.submit(httpx.get, f"{replica.url}/infer", timeout=30) for _ in range(3)]
        wait_until(lambda: replica.stats()["in_flight"] == 3, what="three requests at the replica, two queued")
        replica.process.terminate()
        assert [f.result().status_code for f in pending] == [200, 200, 200]
    _, err = replica.process.communicate(timeout=30)
    assert replica.process.returncode == 0
    assert "infer-3: served 3" in err


def test_metrics_are_vllm_shaped_and_follow_the_requests_in_flight() -> None:
    replica = start(service_ms=3000)
    with ThreadPoolExecutor(3) as pool:
        try:
            for _ in range(3):
                pool.submit(httpx.get, f"{replica.url}/infer", timeout=30)
            wait_until(lambda: replica.stats()["in_flight"] == 3)
            response = httpx.get(f"{replica.url}/metrics", timeout=5)
        finally:  # the requests still queued fail at once
            replica.process.kill()
            replica.process.communicate()
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    values = {name: (f.type, f.samples[0].labels, f.samples[0].value) for name, f in families.items()
              if f.type == "gauge"}
    labels = {"model_name": "demo-model", "engine": "0"}
    # one request on the GPU, two queued behind it; the KV cache (8 requests' worth) is 3/8 full
    assert values == {"vllm:num_requests_running": ("gauge", labels, 1.0),
                      "vllm:num_requests_waiting": ("gauge", labels, 2.0),
                      "vllm:kv_cache_usage_perc": ("gauge", labels, 0.375)}
    # nothing has finished yet: vLLM's V1 counter of finished requests, by reason, at 0
    finished = families["vllm:request_success"]
    assert finished.type == "counter" and {(s.name, s.labels["finished_reason"], s.value) for s in finished.samples
                                           if s.name.endswith("_total")} == {
        ("vllm:request_success_total", "stop", 0.0), ("vllm:request_success_total", "abort", 0.0)}


def test_finished_requests_are_counted_by_reason() -> None:
    """What the capacity-headroom preset reads the arrival rate from: served requests count as stop."""
    replica = start(service_ms=1)
    try:
        for _ in range(3):
            assert httpx.get(f"{replica.url}/infer", timeout=10).status_code == 200
        text = httpx.get(f"{replica.url}/metrics", timeout=5).text
    finally:
        replica.process.kill()
        replica.process.communicate()
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "vllm:request_success"]
    counts = {s.labels["finished_reason"]: s.value for s in family.samples if s.name.endswith("_total")}
    assert counts == {"stop": 3.0, "abort": 0.0}


def test_a_cold_start_keeps_the_replica_unready_until_its_model_is_loaded() -> None:
    """503 on /healthz and on inference while the model loads (a readiness probe fails), then ready; /stats says
    so throughout."""
    process = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "replica", "--cold-start", "3s", "--port", "0"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = f"http://{process.stdout.readline().strip().removeprefix(READY_PREFIX)}"  # the load starts here
        loading = httpx.get(f"{url}/healthz", timeout=5)
        assert (loading.status_code, loading.text) == (503, "loading the model")
        assert httpx.get(f"{url}/stats", timeout=5).json()["loading"] is True
        assert httpx.get(f"{url}/infer", timeout=5).status_code == 503
        wait_until(lambda: httpx.get(f"{url}/healthz", timeout=5).status_code == 200)
        assert httpx.get(f"{url}/stats", timeout=5).json()["loading"] is False
        assert httpx.get(f"{url}/infer", timeout=5).status_code == 200
    finally:
        process.kill()
        process.communicate()
