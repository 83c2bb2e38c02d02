"""Values never freeze: the real exporter with a fake GPU whose NVML calls hang, scraped over HTTP and by a real
Prometheus. The hung GPU's series leave /metrics once older than --max-value-age (Prometheus then marks them
stale), the other GPU keeps fresh values, /health says why, and everything comes back when the call returns."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from clikit.fake_gpus import fake_gpu_uuid
from exporter.backends.fake import FakeStateError, parse_state
from tests.exporter_helpers import parse_metrics, series, value, write_state
from tests.support.exporter_process import ExporterProcess
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.e2e

pytest_plugins = ["tests.support.prometheus"]

INTERVAL_MS = 200
MAX_AGE_MS = 1500
# A GPU whose call hangs is left behind after min(1 s, half the limit), and its values served until the limit: with
# 3 s, a test has 2 s to see it left behind with its values still served, even on a busy machine.
LEFT_BEHIND_MAX_AGE_MS = 3000


def start(state: Path, *extra: str, max_age_ms: int = MAX_AGE_MS) -> ExporterProcess:
    return ExporterProcess(["--backend", "fake", "--fake-gpu-count", "2", "--fake-state", str(state),
                            "--collect-interval", str(INTERVAL_MS), "--max-value-age", str(max_age_ms), *extra])


def gpus(util0: int, util1: int, hang: bool = False) -> dict:
    """A state with both GPUs' utilisation, GPU 1's calls hanging when ``hang``."""
    gpu1: dict = {"DCGM_FI_DEV_GPU_UTIL": util1, "hang": True} if hang else {"DCGM_FI_DEV_GPU_UTIL": util1}
    return {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": util0}, "1": gpu1}}


def util(exporter: ExporterProcess, gpu: str) -> list[float]:
    return [row[2] for row in series(parse_metrics(exporter.metrics()), "DCGM_FI_DEV_GPU_UTIL", gpu=gpu)]


def test_a_hung_gpu_leaves_metrics_after_the_limit_the_other_stays_fresh_and_it_comes_back(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    write_state(state, gpus(10, 70))
    exporter = start(state, max_age_ms=LEFT_BEHIND_MAX_AGE_MS)
    log = ""
    try:
        assert util(exporter, "0") == [10] and util(exporter, "1") == [70]
        write_state(state, gpus(10, 70, hang=True))
        hung_at = time.monotonic()

        def left_behind() -> list | None:
            rows = parse_metrics(exporter.metrics())
            return rows if value(rows, "gpu_exporter_gpu_up", gpu="1") == 0 else None

        # Once GPU 1 is left behind as hung, its last values are still served until the limit (a short stall
        # does not break series)...
        rows = wait_until(left_behind, what="GPU 1 left behind (gpu_exporter_gpu_up 0)")
        assert [r[2] for r in series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="1")] == [70]
        assert exporter.client.get("/health").status_code == 200
        # ...while the other GPU keeps being collected: its new value shows up although GPU 1 hangs.
        write_state(state, gpus(55, 70, hang=True))
        wait_until(lambda: util(exporter, "0") == [55])
        wait_until(lambda: util(exporter, "1") == [])
        assert time.monotonic() - hung_at >= LEFT_BEHIND_MAX_AGE_MS / 1000 - 0.1
        rows = parse_metrics(exporter.metrics())
        assert not [r for r in rows if r[0].startswith("DCGM_") and r[1].get("gpu") == "1"]
        assert value(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 55
        assert value(rows, "gpu_exporter_gpu_up", gpu="1") == 0 and value(rows, "gpu_exporter_gpu_up", gpu="0") == 1
        health = exporter.client.get("/health")
        assert health.status_code == 503
        assert health.text.startswith(f"GPU 1 ({fake_gpu_uuid('', 1)}): backend call read DCGM_FI_DEV_")
        assert "has not returned for" in health.text and "no longer served" in health.text

        # The call returns: the GPU is collected again, with its current values.
        write_state(state, gpus(55, 33))
        wait_until(lambda: util(exporter, "1") == [33])
        wait_until(lambda: exporter.client.get("/health").status_code == 200)
        assert value(parse_metrics(exporter.metrics()), "gpu_exporter_gpu_up", gpu="1") == 1
    finally:
        log = exporter.stop()
    assert "collecting the other GPUs without it" in log and "collecting it again" in log


def test_a_collector_stuck_as_a_whole_serves_no_gpu_values_after_the_limit(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    write_state(state, {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 10}}})
    exporter = start(state)
    try:
        assert util(exporter, "0") == [10] and util(exporter, "1") == [0]
        write_state(state, {"hang": True})  # every collection now blocks at its start: no GPU to leave behind
        hung_at = time.monotonic()
        wait_until(lambda: not [r for r in parse_metrics(exporter.metrics()) if r[0].startswith("DCGM_")])
        assert time.monotonic() - hung_at >= MAX_AGE_MS / 1000 - 0.1
        # the exporter's own metrics still answer, frozen where the collector stopped
        assert value(parse_metrics(exporter.metrics()), "gpu_exporter_backend_up", backend="fake") == 1
        health = exporter.client.get("/health")
        assert health.status_code == 503
        assert health.text.strip().startswith("no successful collection in the last 1.5s: backend call "
                                              "begin_collection has not returned for ")
        write_state(state, {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 20}}})
        wait_until(lambda: util(exporter, "0") == [20])
        assert exporter.client.get("/health").status_code == 200
    finally:
        exporter.stop()


def test_max_value_age_below_two_intervals_is_refused(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "exporter", "--backend", "fake", "--collect-interval", "1000",
                             "--max-value-age", "1500"], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "--max-value-age 1500: must be at least twice --collect-interval (1000 ms)" in result.stderr
    assert "Traceback" not in result.stderr


def test_prometheus_marks_the_hung_gpus_series_stale(tmp_path: Path,
                                                     prometheus_factory: Callable[..., PrometheusServer]) -> None:
    state = tmp_path / "state.json"
    write_state(state, gpus(10, 70))
    exporter = start(state)
    try:
        prom = prometheus_factory([exporter.address], job="dcgm-exporter", honor_labels=True)
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{gpu="1"}', timeout=30)
        assert prom.query('DCGM_FI_DEV_GPU_UTIL{gpu="1"}')[0]["value"][1] == "70"
        write_state(state, gpus(55, 70, hang=True))
        # Once the exporter stops serving GPU 1, Prometheus' next scrape writes a staleness marker: an instant
        # query (what an HPA's adapter runs) has no value instead of the frozen 70 for the 5 min lookback.
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{gpu="1"}', lambda result: result == [], timeout=15)
        assert prom.query('DCGM_FI_DEV_GPU_UTIL{gpu="0"}')[0]["value"][1] == "55"
        assert prom.query('last_over_time(DCGM_FI_DEV_GPU_UTIL{gpu="1"}[5m])')[0]["value"][1] == "70"
        assert prom.query('up{job="dcgm-exporter"}')[0]["value"][1] == "1"  # the target itself is fine
        write_state(state, gpus(55, 33))
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{gpu="1"}', lambda result: result and result[0]["value"][1] == "33",
                      timeout=15)
    finally:
        exporter.stop()


def test_sigterm_while_nvml_hangs_still_stops_the_exporter_promptly(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    write_state(state, {"hang": True, "gpus": {"1": {"hang": True}}})
    exporter = start(state)  # starts serving although the first collection never finishes
    health = exporter.client.get("/health")
    assert health.status_code == 503
    assert health.text.startswith("no collection yet: backend call begin_collection has not returned for ")
    log = exporter.stop()
    assert exporter.proc.returncode == 0, log  # it stopped by itself, before stop()'s SIGKILL after 10 s
    assert "shutting down" in log


def test_fake_hang_switches_are_validated() -> None:
    assert parse_state({"hang": True, "gpus": {"1": {"hang": True}}}, "s.json", 2).gpus[1].hang
    with pytest.raises(FakeStateError, match=r"^s\.json: hang: must be bool, got 'yes'$"):
        parse_state({"hang": "yes"}, "s.json", 2)
    with pytest.raises(FakeStateError, match=r"^s\.json: gpus\.0\.hang: must be bool, got 1$"):
        parse_state({"gpus": {"0": {"hang": 1}}}, "s.json", 2)
