"""The real exporter process over HTTP, scraped by a real Prometheus, with a real PodResources gRPC server."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from clikit.fake_gpus import fake_gpu_uuid
from tests.exporter_helpers import parse_metrics, series, value, write_state
from tests.support.exporter_process import ExporterProcess
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.podresources_server import FakePodResourcesServer
    from tests.support.prometheus import PrometheusServer

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]


def test_http_contract(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    write_state(state, {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 42}}})
    exporter = ExporterProcess(["--backend", "fake", "--fake-gpu-count", "2", "--fake-state", str(state),
                                "--collect-interval", "200"])
    try:
        c = exporter.client
        # Prometheus asks for OpenMetrics first; dcgm-exporter (and we) always answer the 0.0.4 text format.
        r = c.get("/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
                                       "Accept-Encoding": "identity"})
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert value(parse_metrics(r.text), "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 42
        raw = c.get("/metrics", headers={"Accept-Encoding": "gzip"})
        assert raw.headers["content-encoding"] == "gzip"
        assert "DCGM_FI_DEV_GPU_UTIL{" in raw.text  # httpx decoded it; the body was valid gzip
        assert c.get("/health").status_code == 200
        assert c.get("/").status_code == 200
        assert c.get("/nope").status_code == 404

        # values follow the state file within a couple of collection intervals
        write_state(state, {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 97}}})
        wait_until(lambda: value(parse_metrics(exporter.metrics()), "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 97)

        # NVML down: /health says why with 503, /metrics carries no GPU values
        write_state(state, {"nvml_error": "Driver/library version mismatch"})
        wait_until(lambda: c.get("/health").status_code == 503)
        assert c.get("/health").text.strip() == "Driver/library version mismatch"
        assert not [row for row in parse_metrics(exporter.metrics()) if row[0].startswith("DCGM_")]
        write_state(state, {})
        wait_until(lambda: c.get("/health").status_code == 200)
    finally:
        log = exporter.stop()
    assert exporter.proc.returncode == 0, log
    assert "Traceback" not in log


def test_gzip_body_matches_plain(tmp_path: Path) -> None:
    exporter = ExporterProcess(["--backend", "fake", "--collect-interval", "60000"])
    try:
        with exporter.client.stream("GET", "/metrics", headers={"Accept-Encoding": "gzip"}) as response:
            assert response.headers["content-encoding"] == "gzip"
            compressed = b"".join(response.iter_raw())
        assert gzip.decompress(compressed).decode() == exporter.metrics()
    finally:
        exporter.stop()


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize(("args", "needle"), [
    (["--no-such-flag"], "flag provided but not defined: --no-such-flag"),
    (["--backend", "fake", "-c", "soon"], "invalid value 'soon' for -c (--collect-interval): expected an integer"),
    (["--backend", "fake", "-f", "/missing/counters.csv"], "/missing/counters.csv: cannot read counters file"),
    (["--backend", "fake", "--fake-state", "/missing/state.json"], "/missing/state.json: cannot read fake state"),
    (["--backend", "fake", "-a", "localhost"], "invalid listen address 'localhost'"),
    (["--backend", "fake", "-d", "g:0-3"], "--devices 'g:0-3'"),
    (["--backend", "nvml"], "NVML library libnvidia-ml.so.1 not found"),
])
def test_bad_input_is_one_line_naming_it(args: list[str], needle: str) -> None:
    result = run_cli(*args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-exporter: error: ")
    assert needle in lines[0]


def test_bad_counters_and_state_files_are_named(tmp_path: Path) -> None:
    csv = tmp_path / "counters.csv"
    csv.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, ok\nDCGM_FI_DEV_MADE_UP, gauge, nope\n")
    result = run_cli("--backend", "fake", "-f", str(csv))
    assert result.stderr.strip() == f"gpu-exporter: error: {csv}:2: unknown field 'DCGM_FI_DEV_MADE_UP' " \
                                    "(not a DCGM field nor a dcgm-exporter counter)"
    state = tmp_path / "state.json"
    state.write_text('{"gpus": {"0": {"DCGM_FI_DEV_GPU_UTL": 5}}}')
    result = run_cli("--backend", "fake", "--fake-state", str(state))
    assert f"{state}: gpus.0.DCGM_FI_DEV_GPU_UTL: unknown key" in result.stderr
    assert "Traceback" not in result.stderr


def test_dcgm_exporter_environment_variables(tmp_path: Path) -> None:
    csv = tmp_path / "counters.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
    exporter = ExporterProcess(["--backend", "fake"], env={
        "DCGM_EXPORTER_COLLECTORS": str(csv), "DCGM_EXPORTER_INTERVAL": "250", "NODE_NAME": "gpu-node-7",
        "GPU_EXPORTER_HOSTNAME_LABEL": "hostname"})
    try:
        rows = parse_metrics(exporter.metrics())
        assert {r[0] for r in rows if r[0].startswith("DCGM_")} == {"DCGM_FI_DEV_GPU_TEMP"}
        assert series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0][1]["hostname"] == "gpu-node-7"
        first = value(rows, "gpu_exporter_collections_total")
        wait_until(lambda: value(parse_metrics(exporter.metrics()), "gpu_exporter_collections_total") >= first + 3,
                   what="three more collections")
    finally:
        log = exporter.stop()
    assert "every 250 ms" in log  # DCGM_EXPORTER_INTERVAL, as the exporter took it


def test_kubernetes_mode_without_socket_serves_metrics_and_says_so(tmp_path: Path) -> None:
    exporter = ExporterProcess(["--backend", "fake", "-k", "--pod-resources-kubelet-socket",
                                str(tmp_path / "absent.sock")])
    try:
        rows = parse_metrics(exporter.metrics())
        assert series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
        assert not [r for r in rows if "pod" in r[1]]
        assert value(rows, "gpu_exporter_pod_resources_up") == 0
    finally:
        exporter.stop()


def test_scraped_by_prometheus_with_pod_labels_and_dashboard_queries(
        tmp_path: Path, podresources_server: FakePodResourcesServer,
        prometheus_factory: Callable[..., PrometheusServer]) -> None:
    uuid0, uuid1 = fake_gpu_uuid("", 0), fake_gpu_uuid("", 1)
    podresources_server.set_pods([("infer-0", "ml", [("server", [("nvidia.com/gpu", [uuid0])])])])
    state = tmp_path / "state.json"
    write_state(state, {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 85, "DCGM_FI_DEV_POWER_USAGE": 300.0,
                                       "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.42},
                                 "1": {"DCGM_FI_DEV_GPU_UTIL": 15, "DCGM_FI_DEV_POWER_USAGE": 100.0}}})
    exporter = ExporterProcess(["--backend", "fake", "--fake-state", str(state), "-k",
                                "--pod-resources-kubelet-socket", podresources_server.socket_path,
                                "--pod-resources-refresh-interval", "200", "-c", "250"])
    try:
        prom = prometheus_factory([exporter.address], job="dcgm-exporter", honor_labels=True)
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", timeout=30)

        def scalar(q: str) -> float:
            result = prom.wait_for(q, timeout=15)
            assert len(result) == 1, result
            return float(result[0]["value"][1])

        # Grafana dashboard 12239 variables and panels, unchanged
        assert {r["metric"]["instance"] for r in prom.query("count by (instance) (DCGM_FI_DEV_GPU_TEMP)")} == {
            exporter.address}
        assert {r["metric"]["gpu"] for r in prom.query("count by (gpu) (DCGM_FI_DEV_GPU_TEMP)")} == {"0", "1"}
        assert scalar("avg(DCGM_FI_DEV_GPU_TEMP)") == 31
        assert scalar("sum(DCGM_FI_DEV_POWER_USAGE)") == 400.0
        assert scalar('DCGM_FI_DEV_SM_CLOCK{gpu="0"} * 1000000') == 1980e6
        assert scalar('DCGM_FI_DEV_FB_USED{gpu="1"}') == 0
        assert scalar('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0"}') == 0.42
        # the EKS guide's recording rule source and an HPA-style per-pod query
        assert scalar("avg(DCGM_FI_DEV_GPU_UTIL)") == 50
        assert scalar('avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{namespace="ml", pod="infer-0"})') == 85
        labels = prom.query('DCGM_FI_DEV_GPU_UTIL{gpu="0"}')[0]["metric"]
        assert (labels["pod"], labels["namespace"], labels["container"], labels["UUID"]) == (
            "infer-0", "ml", "server", uuid0)
        # counters keep their names in Prometheus too
        assert scalar('DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1"}') > 0

        # the pod moves to the other GPU: labels follow without a restart
        podresources_server.set_pods([("infer-0", "ml", [("server", [("nvidia.com/gpu", [uuid1])])])])
        wait_until(lambda: series(parse_metrics(exporter.metrics()), "DCGM_FI_DEV_GPU_UTIL", pod="infer-0")[0][1][
            "gpu"] == "1", timeout=10)
    finally:
        exporter.stop()


def test_scrapes_during_collection_always_see_a_whole_snapshot(tmp_path: Path) -> None:
    """64 GPUs re-collected every 100 ms while four clients scrape: no scrape sees a partial collection."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    exporter = ExporterProcess(["--backend", "fake", "--fake-gpu-count", "64", "-c", "100"])

    def scrape_many(_: int) -> list[tuple[int, int]]:
        seen = []
        with httpx.Client(base_url=exporter.url, timeout=5) as client:
            for _ in range(60):
                text = client.get("/metrics", headers={"Accept-Encoding": "identity"}).text
                lines = text.splitlines()
                assert text.endswith("\n") and lines[-1].startswith("process_")  # self-metrics come last
                seen.append((sum(ln.startswith("DCGM_FI_DEV_GPU_TEMP{") for ln in lines),
                             sum(ln.startswith("DCGM_FI_DEV_FB_FREE{") for ln in lines)))
        return seen

    try:
        with ThreadPoolExecutor(4) as pool:
            results = [pair for chunk in pool.map(scrape_many, range(4)) for pair in chunk]
        rows = parse_metrics(exporter.metrics())  # the 64-GPU body is valid exposition text
        collections = value(rows, "gpu_exporter_collections_total")
    finally:
        exporter.stop()
    assert set(results) == {(64, 64)}
    assert collections > 5  # collections really ran while we scraped


def test_sigterm_as_soon_as_the_port_listens_is_a_clean_shutdown() -> None:
    """The kubelet may stop a pod at any moment: once the exporter accepts connections, SIGTERM must run its
    shutdown (exit 0, logged), never the default action that ends it at once with its log unwritten."""
    import os
    import signal
    import socket

    from tests.support.processes import terminate
    from tests.support.prometheus import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "--backend", "fake", "-a", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        def accepts() -> bool:
            assert proc.poll() is None, "the exporter exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        # the first moment a connection is accepted, not the first answered /health
        wait_until(accepts, 20, "the exporter listening", interval=0.002)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    finally:
        log = terminate(proc)
    assert proc.returncode == 0, log
    assert "shutting down" in log


def test_sigterm_taken_by_a_worker_thread_still_shuts_down_at_once() -> None:
    """SIGTERM is sent to the process and the kernel may hand it to any of its threads; the exporter must shut down
    at once whichever took it (one that waited an hour for the main thread to wake was seen under load)."""
    import ctypes
    import os
    import signal
    import time

    tgkill = ctypes.CDLL(None, use_errno=True).tgkill  # glibc's wrapper: a signal to one thread of a process
    exporter = ExporterProcess(["--backend", "fake"])
    pid = exporter.proc.pid
    workers = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid)
    assert workers, "the exporter runs its server and collector on threads"
    assert tgkill(pid, workers[0], signal.SIGTERM) == 0, os.strerror(ctypes.get_errno())
    began = time.monotonic()
    try:
        exporter.proc.wait(timeout=10)
    finally:
        log = exporter.stop()
    assert exporter.proc.returncode == 0, log
    assert "shutting down" in log
    assert time.monotonic() - began < 5, log
