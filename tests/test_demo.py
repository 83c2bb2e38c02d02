"""``gpu-loadtest demo --quick --nodes none`` end to end, the pod-only loop (replicas start at once): replicas rise
under load and fall after it, the queue asks for what is needed in fewer decisions than GPU utilisation, and no
process the demo started outlives it (also when the default demo, with GPU nodes as CI runs it, is interrupted).
tests/test_demo_capacity.py runs the default lane with nodes."""

from __future__ import annotations

import csv
import json
import math
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from loadtest.standins.processes import MARKER_ENV

pytestmark = [pytest.mark.demo, pytest.mark.e2e, pytest.mark.tools]


def marked_processes(run_id: str) -> list[psutil.Process]:
    """Every live process carrying the demo's marker (started by it, or by its children)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARKER_ENV) == run_id and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def assert_all_gone(summary: dict[str, Any]) -> None:
    assert summary["child_pids"], "the demo recorded no child processes"
    assert not [pid for pid in summary["child_pids"] if psutil.pid_exists(pid)
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not marked_processes(summary["run_id"])


@dataclass
class QuickRun:
    result: subprocess.CompletedProcess[str]
    summary: dict[str, Any]
    plot: Path
    timeline: Path


def quick_run(directory: Path, *args: str) -> QuickRun:
    summary_path, plot, timeline = directory / "summary.json", directory / "demo.png", directory / "demo.csv"
    result = subprocess.run(
        [sys.executable, "-m", "loadtest", "demo", "--quick", "--summary", str(summary_path), "--plot", str(plot),
         "--csv", str(timeline), *args], capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-4000:]
    return QuickRun(result, json.loads(summary_path.read_text()), plot, timeline)


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    return quick_run(tmp_path_factory.mktemp("demo-gpu"), "--nodes", "none")


def test_quick_demo_scales_up_under_load_and_back_down(gpu_run: QuickRun) -> None:
    result, summary, plot, timeline = gpu_run.result, gpu_run.summary, gpu_run.plot, gpu_run.timeline

    assert summary["initial_replicas"] == 1
    assert summary["peak_replicas"] > summary["initial_replicas"]
    assert summary["final_replicas"] < summary["peak_replicas"]
    up = summary["scale_up_seconds"]
    assert isinstance(up, int | float) and math.isfinite(up) and up > 0
    assert summary["scale_down_seconds"] is not None and summary["scale_down_seconds"] > 0
    assert summary["scale_events"][0]["reason"] == "pods metric DCGM_FI_DEV_GPU_UTIL above target"
    assert summary["requests"]["ok"] > 0
    assert summary["interrupted"] is False and summary["error"] is None
    assert_all_gone(summary)

    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    with timeline.open() as fh:
        rows = list(csv.DictReader(fh))
    assert max(int(r["current_replicas"]) for r in rows if r["current_replicas"]) == summary["peak_replicas"]
    # The replicas' own queue is recorded too (scraped by the same Prometheus), though this HPA ignores it.
    assert max(float(r["waiting"]) for r in rows if r["waiting"]) > 0
    assert all(r["hpa_waiting"] == "" and r["waiting_target"] == "" for r in rows)
    # Not a terminal: plain progress lines, and each decision as it happens.
    assert "scale 1 -> " in result.stderr
    assert "load step -> first scale-up decision" in result.stdout


def test_scaling_on_the_queue_reaches_the_needed_replicas_in_fewer_decisions(gpu_run: QuickRun,
                                                                           tmp_path: Path) -> None:
    """GPU utilisation saturates at 100 %: from one overloaded replica its first decision can only ask for
    ceil(100 / 60) = 2. Requests waiting keep growing, so one decision asks for all the replicas needed."""
    queue, gpu = quick_run(tmp_path, "--nodes", "none", "--metric", "queue").summary, gpu_run.summary
    assert queue["hpa_metrics"] == ["vllm:num_requests_waiting"] and gpu["hpa_metrics"] == ["DCGM_FI_DEV_GPU_UTIL"]
    needed = queue["needed_replicas"]
    # On the queue, the fewest replicas whose queue does not grow: a replica's whole 25 requests/s (55 -> 3); on GPU
    # utilisation, the fewest at the 60 % target: 15 requests/s each (55 -> 4).
    assert (needed, gpu["needed_replicas"]) == (3, 4)
    first_up = next(d for d in queue["decisions"] if d["to"] > d["from"])
    assert first_up["reason"] == "pods metric vllm:num_requests_waiting above target"
    assert first_up["readings"]["vllm:num_requests_waiting"] > queue["queue_target_average_value"]
    gpu_first_up = next(d for d in gpu["decisions"] if d["to"] > d["from"])
    assert gpu_first_up["to"] < needed
    assert queue["scale_ups_to_needed"] is not None
    assert queue["scale_ups_to_needed"] < (gpu["scale_ups_to_needed"] or math.inf)
    assert queue["interrupted"] is False and queue["error"] is None
    assert_all_gone(queue)


def test_interrupted_demo_stops_everything_and_reports_what_it_has(tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    demo = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "demo", "--quick", "--summary", str(summary_path), "--plot",
         str(tmp_path / "demo.png")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert demo.stderr is not None
    seen = []
    for line in demo.stderr:  # until the load has started
        seen.append(line)
        if line.startswith("ready after"):
            break
    else:
        pytest.fail("the demo ended before its load started:\n" + "".join(seen))
    demo.send_signal(signal.SIGINT)  # what Ctrl-C delivers
    out, _ = demo.communicate(timeout=120)
    assert demo.returncode == 130
    assert "interrupted: partial summary" in out
    summary = json.loads(summary_path.read_text())
    assert summary["interrupted"] is True
    assert_all_gone(summary)
