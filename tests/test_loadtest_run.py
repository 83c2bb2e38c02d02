"""``gpu-loadtest run`` as a user runs it: against a local stand-in replica, watching an HPA on a (fake) Kubernetes
API, polling a custom-metrics path on the real adapter and range data from a real Prometheus."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml
from rich.console import Console

from loadtest.hpa.watch import ClusterReading
from loadtest.loadgen.open_loop import Arrivals
from loadtest.loadgen.profile import parse_profile
from loadtest.measure.progress import Progress
from loadtest.scenarios.outputs import Outputs
from loadtest.scenarios.run import RunOptions, run_load
from loadtest.standins.replica import READY_PREFIX
from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.support.fake_kube import FakeKube

pytestmark = pytest.mark.e2e

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@contextlib.contextmanager
def stand_in(*args: str) -> Iterator[str]:
    """A stand-in replica fast enough (5 ms per request) never to queue at these rates; yields its base URL."""
    process = subprocess.Popen([sys.executable, "-m", "loadtest", "replica", "--service-ms", "5", "--port", "0",
                                *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line.startswith(READY_PREFIX)
    try:
        yield f"http://{line.removeprefix(READY_PREFIX)}"
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture
def replica_url() -> Iterator[str]:
    with stand_in() as base:
        yield f"{base}/infer"


def gpu_loadtest(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "loadtest", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> tuple[str, str]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out, err


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_run_writes_the_timeline_plot_and_summary(replica_url: str, tmp_path: Path) -> None:
    out, _ = finish(gpu_loadtest("run", "--url", replica_url, "--profile", "2s:10,2s:20", "--arrivals", "uniform",
                                 "--csv", str(tmp_path / "t.csv"), "--plot", str(tmp_path / "t.png"),
                                 "--summary", str(tmp_path / "s.json")))
    rows = read_csv(tmp_path / "t.csv")
    assert [r["sent"] for r in rows[:4]] == ["10", "10", "20", "20"]
    assert [r["phase"] for r in rows[:4]] == ["baseline", "baseline", "hold", "hold"]
    assert sum(int(r["ok"]) for r in rows) == 60
    assert all(r["errors"] == "0" and r["dropped"] == "0" for r in rows)
    assert all(float(r["p50_ms"]) >= 5 for r in rows if r["p50_ms"])
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["requests"] == {"sent": 60, "ok": 60, "errors": 0, "dropped": 0}
    assert summary["latency_by_phase"]["hold"]["requests"] == 40
    assert summary["load_step_at"] == 2.0
    assert (tmp_path / "t.png").read_bytes().startswith(PNG_MAGIC)
    assert "requests" in out and "sent 60, ok 60" in out


def hpa(desired: int, current_value: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "infer", "namespace": "demo"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer"},
                 "minReplicas": 1, "maxReplicas": 8,
                 "metrics": [{"type": "Pods", "pods": {"metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                                                       "target": {"type": "AverageValue", "averageValue": "60"}}}]},
        "status": {"currentReplicas": desired, "desiredReplicas": desired, "currentMetrics": [
            {"type": "Pods", "pods": {"metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                                      "current": {"averageValue": current_value}}}]},
    }


COMPLETION = {"model": "qwen2.5-7b-instruct", "prompt": "Say hello", "max_tokens": 16, "temperature": 0}


def test_run_posts_a_json_completion_with_headers_and_the_stand_in_checks_them(tmp_path: Path) -> None:
    """An OpenAI-compatible /v1/completions request: the stand-in answers only a JSON body naming its model, with
    the API key and tenant headers it requires; the send times stay those of the profile."""
    (tmp_path / "body.json").write_text(json.dumps(COMPLETION))
    required = ["--model", "qwen2.5-7b-instruct", "--require-header", "Authorization: Bearer sk-test",
                "--require-header", "X-Tenant: team-a"]
    with stand_in(*required) as base:
        run = ["run", "--url", f"{base}/v1/completions", "--arrivals", "uniform", "--profile"]
        auth = ["-H", "Authorization: Bearer sk-test", "--header", "X-Tenant: team-a"]
        runs = [  # independent runs, side by side (each has its own summary; the stand-in counts them all)
            gpu_loadtest(*run, "2s:10", *auth, "--body", json.dumps(COMPLETION),
                         "--summary", str(tmp_path / "inline.json"), "--csv", str(tmp_path / "t.csv")),
            gpu_loadtest(*run, "2s:10", *auth, "--body-file", str(tmp_path / "body.json"), "--method", "post",
                         "--summary", str(tmp_path / "file.json")),
            # What the stand-in refuses: no API key; a body for another model; a body that is not JSON.
            gpu_loadtest(*run, "1s:5", *auth[2:], "--body", json.dumps(COMPLETION),
                         "--summary", str(tmp_path / "nokey.json")),
            gpu_loadtest(*run, "1s:5", *auth, "--body", json.dumps({**COMPLETION, "model": "llama"}),
                         "--summary", str(tmp_path / "model.json")),
            gpu_loadtest(*run, "1s:5", *auth, "--body", "prompt=hi",
                         "-H", "Content-Type: application/x-www-form-urlencoded",
                         "--summary", str(tmp_path / "form.json")),
        ]
        for process in runs:
            finish(process)
        stats = httpx.get(f"{base}/stats", timeout=5).json()
    for name in ("inline.json", "file.json"):
        summary = json.loads((tmp_path / name).read_text())
        assert summary["requests"] == {"sent": 20, "ok": 20, "errors": 0, "dropped": 0}, summary["error_kinds"]
        assert summary["method"] == "POST" and summary["header_names"][:2] == ["Authorization", "X-Tenant"]
        assert summary["body_bytes"] == len(json.dumps(COMPLETION))
    assert [r["sent"] for r in read_csv(tmp_path / "t.csv")[:2]] == ["10", "10"]  # open loop, as with GET
    refused = {name: json.loads((tmp_path / name).read_text())["error_kinds"]
               for name in ("nokey.json", "model.json", "form.json")}
    assert refused == {"nokey.json": {"HTTP 401": 5}, "model.json": {"HTTP 404": 5}, "form.json": {"HTTP 415": 5}}
    assert (stats["served"], stats["rejected"]) == (40, 15)


@pytest.mark.parametrize(("args", "message"), [
    (["--header", "Authorization"], "--header 'Authorization': expected 'Name: value'"),
    (["--body", "{}", "--body-file", "x.json"], "--body and --body-file exclude each other"),
    (["--body-file", "/nonexistent/body.json"], "--body-file /nonexistent/body.json: No such file or directory"),
])
def test_request_option_errors_are_one_line(args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "loadtest", "run", "--url", "http://127.0.0.1:9/v1/completions",
                             "--profile", "1", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"gpu-loadtest: error: {message}"


def test_run_watches_an_hpa_through_the_kubernetes_api(replica_url: str, tmp_path: Path,
                                                       fake_kube: FakeKube) -> None:
    fake_kube.register("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
    fake_kube.put("autoscaling", "v2", "horizontalpodautoscalers", hpa(1, "35"))
    kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    path = "/apis/autoscaling/v2/namespaces/demo/horizontalpodautoscalers/infer"
    run = gpu_loadtest("run", "--url", replica_url, "--profile", "5s:5", "--hpa", "infer", "-n", "demo",
                       "--kubeconfig", kubeconfig, "--watch-interval", "200ms", "--csv", str(tmp_path / "t.csv"),
                       "--summary", str(tmp_path / "s.json"), "--plot", str(tmp_path / "t.png"))
    # Polls are at least 200 ms apart, so the 10th read comes after the first second of load was recorded.
    wait_until(lambda: fake_kube.count("GET", path) >= 10)
    fake_kube.put("autoscaling", "v2", "horizontalpodautoscalers", hpa(3, "950m"))
    _, err = finish(run)

    rows = read_csv(tmp_path / "t.csv")
    desired = [int(r["desired_replicas"]) for r in rows if r["desired_replicas"]]
    assert desired[0] == 1 and desired[-1] == 3 and sorted(desired) == desired
    assert {r["hpa_metric"] for r in rows} <= {"35", "0.95"} and rows[-1]["hpa_metric"] == "0.95"
    assert {r["metric_target"] for r in rows} == {"60"}
    summary = json.loads((tmp_path / "s.json").read_text())
    assert (summary["initial_replicas"], summary["peak_replicas"]) == (1, 3)
    assert [(e["from"], e["to"]) for e in summary["scale_events"]] == [(1, 3)]
    assert "HPA desired 1 -> 3" in err
    assert all(r.headers.get("authorization") == "Bearer fake-token" for r in fake_kube.received)


GPU_SERIES = """\
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",namespace="demo",pod="infer-0",container="main"} 40
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",namespace="demo",pod="infer-1",container="main"} 80
"""


def test_run_polls_a_custom_metric_and_prometheus_range_data(replica_url: str, tmp_path: Path) -> None:
    endpoint = MetricsEndpoint(GPU_SERIES)
    prom = PrometheusServer([endpoint.address], honor_labels=True).start()
    adapter = None
    try:
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", lambda r: len(r) == 2)
        adapter = AdapterProcess(prom.url, str(tmp_path / "certs"), ["--disable-auth",
                                                                     "--metrics-relist-interval", "1s"])
        metric = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pods/*/DCGM_FI_DEV_GPU_UTIL"
        wait_until(lambda: adapter is not None and len(adapter.get(metric).json().get("items", [])) == 2)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "adapter",
            "clusters": [{"name": "adapter", "cluster": {
                "server": adapter.url, "certificate-authority": str(tmp_path / "certs" / "apiserver.crt")}}],
            "users": [{"name": "local", "user": {}}],
            "contexts": [{"name": "adapter", "context": {"cluster": "adapter", "user": "local"}}]}))
        _, err = finish(gpu_loadtest(
            "run", "--url", replica_url, "--profile", "3s:5", "--metric", metric, "--kubeconfig", str(kubeconfig),
            "--watch-interval", "500ms", "--prometheus-url", prom.url, "--query", "avg(DCGM_FI_DEV_GPU_UTIL)",
            "--csv", str(tmp_path / "t.csv")))
    finally:
        if adapter is not None:
            adapter.stop()
        prom.stop()
        endpoint.stop()
    rows = read_csv(tmp_path / "t.csv")
    assert len(rows) >= 3
    # (40 + 80) / 2, as the adapter served it over HTTPS, in every row (a drain second included)
    assert {r["metric_value"] for r in rows} == {"60"}, err
    assert {r["prom_value"] for r in rows} == {"60"}
    assert all(r["desired_replicas"] == "" for r in rows)  # no --hpa: nothing invented


class SteadyMetric:
    """A cluster watcher whose custom metric always reads 60."""

    def poll(self) -> ClusterReading:
        return ClusterReading(metric=60.0)

    def close(self) -> None:
        pass


class SecondsRecorded(Progress):
    """The run's progress display, quiet, with an event set once the run has recorded a second of the profile."""

    def __init__(self) -> None:
        super().__init__(Console(file=io.StringIO()))
        self.recorded = asyncio.Event()

    def update(self, s: Any) -> None:
        super().update(s)
        self.recorded.set()


def test_drain_seconds_carry_what_was_observed_in_them() -> None:
    """Requests sent in the profile's only second are answered in the next: that drain row (in the CSV and the
    plot) still holds the metric read while it lasted, not a gap."""

    async def scenario() -> list[Any]:
        progress = SecondsRecorded()

        async def answer_late(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await asyncio.wait_for(progress.recorded.wait(), 30)  # the profile's only second is over
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer_late, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        options = RunOptions(url=f"http://127.0.0.1:{port}/infer", profile=parse_profile("1s:4"),
                             arrivals=Arrivals.UNIFORM, watch_interval_s=0.1)
        try:
            result = await run_load(options, SteadyMetric(), Outputs(),  # type: ignore[arg-type]
                                    progress)
        finally:
            server.close()
        return result.rows

    rows = asyncio.run(scenario())
    assert [(r.phase, r.sent, r.ok) for r in rows] == [("hold", 4, 0), ("drain", 0, 4)]
    assert [r.metric_value for r in rows] == [60.0, 60.0]


@pytest.mark.parametrize(("args", "message"), [
    (["--url", "localhost:80", "--profile", "5"], "--url 'localhost:80': expected an http:// or https:// URL"),
    (["--url", "http://x", "--profile", "10s:lots"], "profile entry '10s:lots': bad rate 'lots'"),
    (["--url", "http://x", "--profile", "5", "--query", "up"], "--prometheus-url and --query go together"),
    (["--url", "http://x", "--profile", "5", "--hpa", "h", "--kubeconfig", "/nonexistent/kubeconfig"],
     "kubeconfig /nonexistent/kubeconfig"),
])
def test_usage_errors_are_one_line(args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "loadtest", "run", *args], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-loadtest: error: ") and message in lines[0], result.stderr
