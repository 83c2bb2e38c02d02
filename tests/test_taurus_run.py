"""``gpu-loadtest run --taurus`` against a local server that records what arrived: a table of Taurus files (the
guide's own shape shortened with ``-o``, a stepped ramp, a throughput cap, a request mix, concurrent executions),
each checked for what a user would check: the request mix, the concurrency the server saw, the rate under the cap,
and when requests came.

Timing tolerances are wide on purpose (2 shared CPU cores): each is stated where it is used.
"""

from __future__ import annotations

import csv
import itertools
import json
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from loadtest.cli.main import main
from tests.support.recording_http import RecordingServer
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.support.fake_kube import FakeKube

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]  # httpx at its floor: per-user clients, cookie jars, redirects


def run_file(tmp_path: Path, config: dict[str, Any], *args: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Run a Taurus file through the command line; its summary JSON and CSV rows."""
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    main(["run", "--taurus", str(path), "--summary", str(tmp_path / "s.json"), "--csv", str(tmp_path / "t.csv"),
          *args])
    with (tmp_path / "t.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    return json.loads((tmp_path / "s.json").read_text()), rows


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


# The guide's file (DevSecOpsSamples/eks-gpu-autoscaling vision-api-bzt.yaml, run by shared/reference/
# eks-gpu-hpa-guide.md "AutoScaling Test"): its shape, with an example host.
GUIDE = {"execution": [{"concurrency": 1, "ramp-up": "1s", "hold-for": "10m30s", "scenario": "vision-api"}],
         "scenarios": {"vision-api": {"think-time": 0.75,
                                      "requests": ["https://vision-api.example.com/gputest"]}}}


def test_the_guides_test_shortened_with_o(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One virtual user, from 0.5 s in, waiting 0.75 s before each GET, until 1 s + 3 s: sends at about 1.25, 2.0,
    2.8 and 3.6 s (answers take 20 ms). -o shortens the 10m30s hold and points the request at this server."""
    with RecordingServer(delay_s=0.02) as server:
        summary, rows = run_file(tmp_path, GUIDE, "-o", "execution.0.hold-for=3s",
                                 "-o", f"scenarios.vision-api.requests.0={server.url}/gputest",
                                 "--plot", str(tmp_path / "t.png"))
    out, err = capsys.readouterr()
    times = [a.at for a in server.arrivals]
    assert {(a.method, a.path) for a in server.arrivals} == {("GET", "/gputest")}
    assert 3 <= len(times) <= 4  # 4 unless the machine stalls a whole think time
    assert server.in_flight(0, float("inf")) == 1  # one user: never two requests at once
    # Each gap is the think time plus the previous answer (20 ms) and scheduling: 0.75 s to 0.75 + 0.3 s.
    assert all(0.75 <= g < 1.05 for g in gaps(times)), gaps(times)
    assert times[-1] - times[0] < 4.0 - 1.25  # nothing sent after the end (1 s ramp-up + 3 s hold)
    assert summary["requests"] == {"sent": len(times), "ok": len(times), "errors": 0, "dropped": 0}
    label = summary["labels"][f"{server.url}/gputest"]  # the label defaults to the URL as written
    assert (label["requests"], label["ok"], label["errors"]) == (len(times), len(times), 0)
    assert label["p50_ms"] >= 20
    assert [r["phase"] for r in rows[:4]] == ["ramp-up", "hold", "hold", "hold"]
    assert [r["users"] for r in rows[:4]] == ["1", "1", "1", "1"] and all(r["target_rps"] == "" for r in rows)
    assert summary["load"] == "closed loop" and "closed loop, concurrency 1, ramp-up 1s, hold-for 3s" in out
    assert "closed loop: each virtual user waits its think time" in err and "--profile's open loop" in err
    assert (tmp_path / "t.png").read_bytes().startswith(b"\x89PNG")


def test_a_stepped_ramp_adds_users_step_by_step(tmp_path: Path) -> None:
    """concurrency 4, ramp-up 2s in 2 steps: 2 users for the first second, then 4 (Concurrency Thread Group:
    round(4 / 2 * (floor(t / 1 s) + 1))). Answers take 0.2 s and there is no think time, so each user always has
    a request in flight and the server sees the planned concurrency."""
    config = {"execution": [{"concurrency": 4, "ramp-up": "2s", "steps": 2, "hold-for": "1s", "scenario": "s"}],
              "scenarios": {"s": {"requests": ["/work"]}}}
    with RecordingServer(delay_s=0.2) as server:
        run_file(tmp_path, config, "-o", f"scenarios.s.default-address={server.url}")
    # Each user has a connection of its own: when each connection sent first says when its user started. Two
    # start together, the other two a step (1 s) later; timed against each other, not against the first arrival,
    # which a slow start of the run moves (seen on a busy machine: the first request 0.3 s late, the step on time).
    first = sorted(min(a.at for a in server.arrivals if a.connection == c)
                   for c in {a.connection for a in server.arrivals})
    assert len(first) == 4, first
    assert first[1] - first[0] < 0.15 and first[3] - first[2] < 0.15, first
    assert 0.6 <= first[2] - first[0] <= 1.2, first  # the step at 1 s; the first pair may start late
    assert server.in_flight(first[1] + 0.05, first[2] - 0.05) == 2
    assert server.in_flight(first[3] + 0.05, first[3] + 0.8) == 4
    assert server.in_flight(0, float("inf")) == 4
    assert 2 * 5 + 4 * 10 - 8 <= len(server.arrivals) <= 2 * 5 + 4 * 10


def test_throughput_caps_the_rate_of_a_closed_loop(tmp_path: Path) -> None:
    """4 users with 10 ms answers could send hundreds a second; throughput 10 holds them to 10/s for the 3 s hold
    (Taurus' shaper: 10 rps for hold-for)."""
    config = {"execution": [{"concurrency": 4, "hold-for": "3s", "throughput": 10, "scenario": "s"}],
              "scenarios": {"s": {"requests": ["/capped"]}}}
    with RecordingServer(delay_s=0.01) as server:
        summary, rows = run_file(tmp_path, config, "-o", f"scenarios.s.default-address={server.url}")
    times = sorted(a.at for a in server.arrivals)
    assert 26 <= len(times) <= 31  # 30 slots, 1 per 100 ms; a slow start may lose a few
    assert times[-1] - times[0] < 3.0  # and none after the 3 s hold
    busiest = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    assert busiest <= 12  # a stalled loop may release 2 waiting slots at once
    assert [r["target_rps"] for r in rows[:3]] == ["10", "10", "10"]
    assert summary["requests"]["sent"] == len(times)


MIX = {
    "execution": [{"concurrency": 2, "iterations": 2, "scenario": "api"}],
    "scenarios": {"api": {
        "headers": {"Authorization": "Bearer sk-test", "X-Tenant": "team-a"},
        "requests": [
            "/login",
            {"url": "/v1/completions", "method": "POST", "label": "completion",
             "headers": {"Content-Type": "application/json", "X-Tenant": "team-b"},
             "body": {"model": "m", "prompt": "hi", "max_tokens": 8}},
            {"url": "/search", "body": {"q": "gpu util", "n": 2}},
            {"url": "/echo", "method": "PUT", "body": "raw text", "keepalive": False},
            {"url": "/form", "method": "POST", "body": {"a": "1", "b": "x y"}},
            "/redirect",
            {"url": "/fail", "label": "failing"},
        ]}},
}


def test_a_request_mix_with_methods_headers_bodies_and_cookies(tmp_path: Path) -> None:
    """2 users x 2 iterations of 7 requests: exactly 4 of each, in each user's order, sent as the file says."""
    with RecordingServer() as server:
        summary, _ = run_file(tmp_path, MIX, "-o", f"scenarios.api.default-address={server.url}")
    mix = Counter((a.method, a.path) for a in server.arrivals)
    assert mix == {("GET", "/login"): 4, ("POST", "/v1/completions"): 4, ("GET", "/search?q=gpu+util&n=2"): 4,
                   ("PUT", "/echo"): 4, ("POST", "/form"): 4, ("GET", "/redirect"): 4, ("GET", "/target"): 4,
                   ("GET", "/fail"): 4}
    assert server.in_flight(0, float("inf")) <= 2
    completion = server.seen("/v1/completions")[0]
    assert json.loads(completion.body) == {"model": "m", "prompt": "hi", "max_tokens": 8}
    assert (completion.headers["content-type"], completion.headers["x-tenant"]) == ("application/json", "team-b")
    assert all(a.headers["authorization"] == "Bearer sk-test" for a in server.arrivals)
    assert server.seen("/search")[0].headers["x-tenant"] == "team-a"
    assert {a.body for a in server.seen("/echo")} == {b"raw text"}
    assert {a.headers.get("connection") for a in server.seen("/echo")} == {"close"}
    form = server.seen("/form")[0]
    assert (form.body, form.headers["content-type"]) == (b"a=1&b=x+y", "application/x-www-form-urlencoded")
    # Each user keeps its own cookie jar: 4 logins (2 users x 2 iterations), each session on the 7 requests that
    # user sends after that login (the redirect's second request too), none on another user's.
    sessions = Counter(a.headers.get("cookie") for a in server.arrivals if a.path != "/login")
    assert sessions == {f"session={n}": 7 for n in (1, 2, 3, 4)}
    assert summary["labels"]["failing"] == {"requests": 4, "ok": 0, "errors": 4, "p50_ms": None, "p95_ms": None,
                                            "p99_ms": None}
    assert summary["labels"]["/redirect"]["errors"] == 0  # the redirect was followed to a 200
    assert summary["error_kinds"] == {"HTTP 503": 4}
    assert summary["requests"] == {"sent": 28, "ok": 24, "errors": 4, "dropped": 0}


def test_store_cookie_false_sends_no_cookie(tmp_path: Path) -> None:
    config = {"execution": [{"concurrency": 1, "iterations": 2, "scenario": "s"}],
              "scenarios": {"s": {"store-cookie": False, "requests": ["/login", "/after"]}}}
    with RecordingServer() as server:
        run_file(tmp_path, config, "-o", f"scenarios.s.default-address={server.url}")
    assert [a.headers.get("cookie") for a in server.seen("/after")] == [None, None]


def test_the_headers_a_server_sees_are_jmeters(tmp_path: Path) -> None:
    """JMeter's HttpClient 4 sends Host, Connection and User-Agent (and a body's Content-Length), no Accept and no
    Accept-Encoding (HTTPHC4Impl builds its client with content compression off), so a server answers as it would
    answer JMeter: uncompressed."""
    config = {"execution": [{"concurrency": 1, "iterations": 1, "scenario": "s"}],
              "scenarios": {"s": {"requests": ["/plain", {"url": "/posted", "method": "POST", "body": "x",
                                                          "keepalive": False}]}}}
    with RecordingServer() as server:
        run_file(tmp_path, config, "-o", f"scenarios.s.default-address={server.url}")
    plain, posted = server.seen("/plain")[0], server.seen("/posted")[0]
    assert set(plain.headers) == {"host", "connection", "user-agent"}, plain.headers
    assert plain.headers["connection"] == "keep-alive"
    assert set(posted.headers) == {"host", "connection", "user-agent", "content-length"}, posted.headers
    assert posted.headers["connection"] == "close"


CACHED = {"execution": [{"concurrency": 1, "iterations": 2, "scenario": "s"}],
          "scenarios": {"s": {"requests": ["/cached", "/cached", "/etag", "/etag"]}}}


def test_store_cache_keeps_jmeters_cache_for_each_pass(tmp_path: Path) -> None:
    """Taurus' default store-cache: true, JMeter's cache manager cleared at each pass
    (loadtest.loadgen.taurus.cache). In each of the 2 passes: the second /cached (max-age=60) is not sent, and not
    counted, as JMeter records no sample for it; the second /etag (no-cache) is sent with If-None-Match and answered
    304, a success."""
    with RecordingServer() as server:
        summary, _ = run_file(tmp_path, CACHED, "-o", f"scenarios.s.default-address={server.url}")
    assert len(server.seen("/cached")) == 2
    assert [a.headers.get("if-none-match") for a in server.seen("/etag")] == [None, '"v1"', None, '"v1"']
    assert summary["requests"] == {"sent": 6, "ok": 6, "errors": 0, "dropped": 0}
    assert (summary["labels"]["/cached"]["requests"], summary["labels"]["/etag"]["ok"]) == (2, 4)


def test_store_cache_false_sends_every_request_in_full(tmp_path: Path) -> None:
    with RecordingServer() as server:
        summary, _ = run_file(tmp_path, CACHED, "-o", f"scenarios.s.default-address={server.url}",
                              "-o", "scenarios.s.store-cache=false")
    assert len(server.seen("/cached")) == 4
    assert all("if-none-match" not in a.headers for a in server.arrivals)
    assert summary["requests"]["sent"] == 8


def test_several_executions_run_at_once(tmp_path: Path) -> None:
    """As Taurus runs its execution items in parallel (ExecutionSettings.md, "Startup Schedule"): the second,
    delayed 1 s, overlaps the first."""
    config = {"execution": [{"concurrency": 1, "hold-for": "2s", "scenario": "a"},
                            {"concurrency": 1, "hold-for": "1s", "delay": "1s", "scenario": "b"}],
              "scenarios": {"a": {"think-time": "100ms", "requests": ["/a"]},
                            "b": {"think-time": "100ms", "requests": ["/b"]}}}
    with RecordingServer() as server:
        summary, _ = run_file(tmp_path, config, "-o", f"scenarios.a.default-address={server.url}",
                              "-o", f"scenarios.b.default-address={server.url}")
    a, b = [a.at for a in server.seen("/a")], [a.at for a in server.seen("/b")]
    assert b[0] - a[0] >= 0.8  # the delay (minus a's own first think time... 0.1 s)
    assert any(t > b[0] for t in a)  # both ran at once
    assert 6 <= len(b) <= 10 and 12 <= len(a) <= 20  # ~9 and ~19 at 0.1 s think time plus scheduling
    assert set(summary["labels"]) == {"/a", "/b"}


def hpa(desired: int) -> dict[str, Any]:
    return {"metadata": {"name": "vision-api-gpu-hpa", "namespace": "default"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vision-api"},
                     "minReplicas": 2, "maxReplicas": 12, "metrics": [{"type": "Object", "object": {
                         "metric": {"name": "DCGM_FI_DEV_GPU_UTIL_AVG"},
                         "describedObject": {"kind": "Service", "name": "dcgm-exporter"},
                         "target": {"type": "Value", "value": "30"}}}]},
            "status": {"currentReplicas": desired, "desiredReplicas": desired, "currentMetrics": [
                {"type": "Object", "object": {"metric": {"name": "DCGM_FI_DEV_GPU_UTIL_AVG"},
                                              "current": {"value": "45"}}}]}}


def test_the_hpas_replicas_beside_the_closed_loop(tmp_path: Path, fake_kube: FakeKube) -> None:
    """The guide's HPA (vision-api-gpu-hpa) read through the Kubernetes API while its test runs, as with --profile."""
    fake_kube.register("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
    fake_kube.put("autoscaling", "v2", "horizontalpodautoscalers", hpa(2))
    kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    path = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers/vision-api-gpu-hpa"

    def scale_up() -> None:  # polls are at least 200 ms apart: the 10th comes after the first second was recorded
        wait_until(lambda: fake_kube.count("GET", path) >= 10, timeout=60)
        fake_kube.put("autoscaling", "v2", "horizontalpodautoscalers", hpa(3))

    later = threading.Thread(target=scale_up)
    later.start()
    with RecordingServer(delay_s=0.02) as server:
        summary, rows = run_file(tmp_path, GUIDE, "-o", "execution.0.hold-for=3s",
                                 "-o", f"scenarios.vision-api.requests.0={server.url}/gputest",
                                 "--hpa", "vision-api-gpu-hpa", "--kubeconfig", kubeconfig,
                                 "--watch-interval", "200ms")
    later.join()
    desired = [int(r["desired_replicas"]) for r in rows if r["desired_replicas"]]
    assert desired[0] == 2 and desired[-1] == 3
    assert [(e["from"], e["to"]) for e in summary["scale_events"]] == [(2, 3)]
    assert {r["users"] for r in rows[:4]} == {"1"}
