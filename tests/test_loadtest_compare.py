"""The demo's scaling choices (HPA spec per --metric) and --compare (its table, and its runs with a stand-in for
the demo run)."""

from __future__ import annotations

import asyncio
import io
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from loadtest.cli.main import main
from loadtest.hpa import MetricType, PolicyType, ScalingPolicy, TargetType
from loadtest.hpa.record import SyncRecord
from loadtest.hpa.scale_on import ScaleOn
from loadtest.measure.progress import Progress
from loadtest.measure.summary import PhaseLatency, Summary
from loadtest.measure.timeline import TimelineRow
from loadtest.scenarios.compare import (
    comparison_row,
    format_table,
    format_zero_table,
    run_comparison,
    run_zero_comparison,
    saving,
    zero_row,
)
from loadtest.scenarios.demo_settings import (
    DEFAULT_SETTINGS,
    QUICK_SETTINGS,
    ZERO_QUICK_SETTINGS,
    ZERO_SETTINGS,
    DemoSettings,
    with_overrides,
)
from loadtest.scenarios.describe import describe_metrics
from loadtest.scenarios.outputs import Outputs, RunResult

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("choice", "metrics"), [
    (ScaleOn.GPU, [("DCGM_FI_DEV_GPU_UTIL", 60_000)]),
    (ScaleOn.QUEUE, [("vllm:num_requests_waiting", 5_000)]),
    (ScaleOn.BOTH, [("DCGM_FI_DEV_GPU_UTIL", 60_000), ("vllm:num_requests_waiting", 5_000)]),
])
def test_each_choice_is_an_hpa_on_pods_metrics(choice: ScaleOn, metrics: list[tuple[str, int]]) -> None:
    spec = with_overrides(QUICK_SETTINGS, scale_on=choice).hpa_spec()
    assert [(m.name, m.target_milli) for m in spec.metrics] == metrics
    assert all(m.type is MetricType.PODS and m.target_type is TargetType.AVERAGE_VALUE for m in spec.metrics)
    assert spec.behavior is not None and spec.behavior.scale_down is not None


def test_needed_replicas_hold_the_gpu_target_at_the_peak_rate() -> None:
    # 55 requests/s x 40 ms = 2.2 GPUs busy; at 60 % that is 3.67 -> 4 replicas, in both profiles
    assert DEFAULT_SETTINGS.needed_replicas == QUICK_SETTINGS.needed_replicas == 4
    assert with_overrides(QUICK_SETTINGS, target=55.0).needed_replicas == 4
    assert with_overrides(QUICK_SETTINGS, target=50.0).needed_replicas == 5  # 2.2 / 0.5 = 4.4
    assert describe_metrics(with_overrides(QUICK_SETTINGS, scale_on=ScaleOn.BOTH, queue_target=3.0)) == (
        "DCGM_FI_DEV_GPU_UTIL (Pods, target 60) and vllm:num_requests_waiting (Pods, target 3)")


def summary(up: float | None, ups: int | None, peak: int, errors: int, dropped: int, p95: float | None) -> Summary:
    return Summary(initial_replicas=1, peak_replicas=peak, final_replicas=1, peak_desired_replicas=peak,
                   scale_up_seconds=up, peak_reached_seconds=None, scale_down_seconds=None,
                   back_to_initial_seconds=None, load_step_at=15.0, load_drop_at=85.0, duration_seconds=150.0,
                   requests={"sent": 4490, "ok": 4490 - errors, "errors": errors, "dropped": dropped},
                   latency_by_phase={"hold": PhaseLatency(3000, 45.0, p95)} if p95 is not None else {},
                   scale_events=[], needed_replicas=4, scale_ups_to_needed=ups)


def test_comparison_table() -> None:
    rows = [comparison_row(ScaleOn.GPU, summary(15.0, 2, 4, 800, 35, 1900.5)),
            comparison_row(ScaleOn.QUEUE, summary(15.0, 1, 8, 120, 0, None))]
    assert rows[0].failed == 835 and rows[1].hold_p95_ms is None
    assert format_table(rows).splitlines() == [
        "| HPA on | first scale-up | scale-ups to needed | peak replicas | requests failed | p95 in the hold |",
        "|--------|----------------|---------------------|---------------|-----------------|-----------------|",
        "| gpu    | 15 s           | 2 (to 4)            | 4             | 835 of 4490     | 1900.5 ms       |",
        "| queue  | 15 s           | 1 (to 4)            | 8             | 120 of 4490     | -               |",
    ]


def test_run_comparison_runs_each_choice_and_stops_after_a_failure(tmp_path: Path) -> None:
    """With a stand-in for the demo run: one run per choice with that choice's settings, the table and every
    run's summary in one JSON, one plot, a CSV path per run; a failed run ends the comparison."""
    seen: list[tuple[ScaleOn, Path | None]] = []

    async def runner(settings: DemoSettings, outputs: Outputs, progress: Progress) -> RunResult:
        seen.append((settings.scale_on, outputs.csv))
        rows = [TimelineRow(t=float(t), phase="hold", target_rps=55.0, sent=55, ok=50, errors=5, p95_ms=40.0,
                            current_replicas=1 + t, desired_replicas=2 + t) for t in range(3)]
        syncs = [SyncRecord(1.0, 1, 2, 99.0, "pods metric X above target")]
        error = "RuntimeError: adapter exited" if settings.scale_on is ScaleOn.QUEUE else None
        return RunResult(summary(1.0, 1, 3, 15, 0, 40.0), rows, syncs, error=error)

    def progress(choice: ScaleOn) -> Progress:
        return Progress(Console(file=io.StringIO()))

    results = asyncio.run(run_comparison(QUICK_SETTINGS, list(ScaleOn), plot=tmp_path / "c.png",
                                         summary=tmp_path / "c.json", csv=tmp_path / "t.csv", progress=progress,
                                         runner=runner))
    assert [c for c, _ in results] == [ScaleOn.GPU, ScaleOn.QUEUE]  # "both" never ran
    assert seen == [(ScaleOn.GPU, tmp_path / "t-gpu.csv"), (ScaleOn.QUEUE, tmp_path / "t-queue.csv")]
    document = json.loads((tmp_path / "c.json").read_text())
    assert [row["scale_on"] for row in document["table"]] == ["gpu", "queue"]
    assert document["table"][0]["failed"] == 15 and set(document["runs"]) == {"gpu", "queue"}
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")  # the finished run, plotted


def test_the_scale_to_zero_hpa_is_on_the_gateways_external_metrics() -> None:
    """minReplicas 0 on the gateway's queue (AverageValue, it wakes the replicas) and the pool's running requests
    (Value, they hold replicas while they serve), both selected by the InferencePool; scale-ups limited to
    wake_replicas per cold start and sync. The API server's check passes (HPAScaleToZero on by default)."""
    for settings in (ZERO_SETTINGS, ZERO_QUICK_SETTINGS):
        spec = settings.hpa_spec()
        spec.validate()
        assert spec.min_replicas == 0
        assert [(m.type, m.name, m.target_type, m.target_milli, m.selector) for m in spec.metrics] == [
            (MetricType.EXTERNAL, "llm_d_epp_flow_control_queue_size", TargetType.AVERAGE_VALUE, 5_000,
             "inference_pool=infer"),
            (MetricType.EXTERNAL, "llm_d_epp_average_running_requests", TargetType.VALUE, 600,
             "inference_pool=infer")]
        assert spec.behavior is not None and spec.behavior.scale_up is not None
        assert spec.behavior.scale_up.policies == (
            ScalingPolicy(PolicyType.PODS, 2, math.ceil(settings.cold_start_s + settings.sync_period_s)),)
    assert ZERO_SETTINGS.scale_up_period_s == 35 and ZERO_QUICK_SETTINGS.scale_up_period_s == 4
    # 10 requests/s x 40 ms = 0.4 running per replica: one replica at the 0.6 target
    assert ZERO_SETTINGS.needed_replicas == ZERO_QUICK_SETTINGS.needed_replicas == 1
    assert describe_metrics(ZERO_SETTINGS) == (
        "llm_d_epp_flow_control_queue_size (External, AverageValue 5) and llm_d_epp_average_running_requests "
        "(External, Value 0.6), inference_pool=infer")


def test_min_replicas_0_on_per_pod_metrics_is_refused_as_the_api_server_does() -> None:
    with pytest.raises(ValueError, match="must specify at least one Object or External metric"):
        with_overrides(QUICK_SETTINGS, min_replicas=0).hpa_spec()


@pytest.mark.parametrize(("args", "error"), [
    (["--min-replicas", "0", "--metric", "gpu"],
     "spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling to zero"),
    (["--min-replicas", "0", "--gateway-timeout", "0s"], "--gateway-timeout must be longer than 0 s"),
    (["--min-replicas", "9"], "--min-replicas 9 is above maxReplicas 8"),
])
def test_demo_flags_that_cannot_work_are_one_line_errors_before_anything_starts(
        args: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--quick", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-loadtest: error: ") and error in err and len(err.splitlines()) == 1


def zero_summary(gpu_seconds: float, at_zero: int, cold: dict[str, Any] | None, wakes: int) -> Summary:
    decisions = [{"t": 60.0, "from": 1, "to": 0}] * bool(wakes) + [{"t": 150.0, "from": 0, "to": 2}] * wakes
    base = summary(15.0, 1, 2, 0, 0, None)
    return replace(base, gpu_seconds=gpu_seconds, seconds_at_zero=at_zero, decisions=decisions,
                   extra={"cold_start": cold} if cold else {})


COLD = {"requests": 312, "wait_p50_seconds": 14.2, "wait_max_seconds": 31.05, "first_request_waits_seconds": [31.05]}


def test_zero_comparison_table_and_saving() -> None:
    rows = [zero_row(1, zero_summary(320.0, 0, {**COLD, "requests": 0, "first_request_waits_seconds": []}, 0)),
            zero_row(0, zero_summary(212.4, 95, COLD, 1))]
    assert format_zero_table(rows).splitlines() == [
        "| minReplicas | GPU-seconds | seconds at 0 | wake-ups | requests that found no replica | "
        "their wait p50 / max | first after idle | requests failed |",
        "|-------------|-------------|--------------|----------|--------------------------------|"
        "----------------------|------------------|-----------------|",
        "| 1           | 320         | 0            | 0        | 0                              | "
        "-                    | -                | 0 of 4490       |",
        "| 0           | 212.4       | 95           | 1        | 312                            | "
        "14.2 s / 31.05 s     | 31.05 s          | 0 of 4490       |",
    ]
    assert saving(rows) == "minReplicas 0 used 212.4 GPU-seconds where minReplicas 1 used 320: 34 % less"
    assert saving(rows[1:]) is None


def test_run_zero_comparison_runs_min_1_then_min_0_on_the_same_settings(tmp_path: Path) -> None:
    seen: list[tuple[int, ScaleOn, str, Path | None]] = []

    async def runner(settings: DemoSettings, outputs: Outputs, progress: Progress) -> RunResult:
        seen.append((settings.min_replicas, settings.scale_on, settings.profile.text(), outputs.csv))
        rows = [TimelineRow(t=float(t), phase="hold", target_rps=10.0, sent=10, ok=10, current_replicas=0,
                            desired_replicas=0, pods=0, gpu_seconds=0.0) for t in range(3)]
        gpu = 320.0 if settings.min_replicas else 212.4
        return RunResult(zero_summary(gpu, 0 if settings.min_replicas else 95, COLD, 1 - settings.min_replicas),
                          rows, [])

    def progress(min_replicas: int) -> Progress:
        return Progress(Console(file=io.StringIO()))

    results = asyncio.run(run_zero_comparison(ZERO_QUICK_SETTINGS, plot=tmp_path / "z.png",
                                              summary=tmp_path / "z.json", csv=tmp_path / "t.csv",
                                              progress=progress, runner=runner))
    assert [m for m, _ in results] == [1, 0]
    profile = ZERO_QUICK_SETTINGS.profile.text()
    assert seen == [(1, ScaleOn.GATEWAY, profile, tmp_path / "t-min-1.csv"),
                    (0, ScaleOn.GATEWAY, profile, tmp_path / "t-min-0.csv")]
    document = json.loads((tmp_path / "z.json").read_text())
    assert [row["min_replicas"] for row in document["table"]] == [1, 0]
    assert document["saving"].endswith("34 % less") and set(document["runs"]) == {"min-1", "min-0"}
    assert (tmp_path / "z.png").read_bytes().startswith(b"\x89PNG")
