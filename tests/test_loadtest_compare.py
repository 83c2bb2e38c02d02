"""The demo's scaling choices (HPA spec per --metric) and --compare (its table, and its runs with a stand-in for
the demo run)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from loadtest.compare import comparison_row, format_table, run_comparison
from loadtest.demo import (
    DEFAULT_SETTINGS,
    QUICK_SETTINGS,
    DemoOutputs,
    DemoResult,
    DemoSettings,
    ScaleOn,
    describe_metrics,
    with_overrides,
)
from loadtest.hpa import MetricType, TargetType
from loadtest.live import Progress
from loadtest.summary import PhaseLatency, Summary
from loadtest.timeline import SyncRecord, TimelineRow

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

    async def runner(settings: DemoSettings, outputs: DemoOutputs, progress: Progress) -> DemoResult:
        seen.append((settings.scale_on, outputs.csv))
        rows = [TimelineRow(t=float(t), phase="hold", target_rps=55.0, sent=55, ok=50, errors=5, p95_ms=40.0,
                            current_replicas=1 + t, desired_replicas=2 + t) for t in range(3)]
        syncs = [SyncRecord(1.0, 1, 2, 99.0, "pods metric X above target")]
        error = "RuntimeError: adapter exited" if settings.scale_on is ScaleOn.QUEUE else None
        return DemoResult(summary(1.0, 1, 3, 15, 0, 40.0), rows, syncs, error=error)

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
