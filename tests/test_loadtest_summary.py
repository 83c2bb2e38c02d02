"""The summary figures, the per-second rows and the CSV, from synthetic timelines."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from loadtest.hpa.record import SyncRecord
from loadtest.loadgen.open_loop import SecondStats
from loadtest.loadgen.profile import parse_profile
from loadtest.measure.summary import PhaseLatency, summarize
from loadtest.measure.timeline import TimelineRow, build_rows, write_csv

pytestmark = pytest.mark.unit

PHASES = ["baseline"] * 2 + ["hold"] * 6 + ["cool-down"] * 6


def rows_with(current: list[int], latencies: dict[str, list[float]] | None = None) -> list[TimelineRow]:
    rows = []
    for t, count in enumerate(current):
        phase = PHASES[t]
        rows.append(TimelineRow(t=float(t), phase=phase, target_rps=10.0, sent=10, ok=9, errors=1,
                                current_replicas=count, desired_replicas=count))
    for phase, values in (latencies or {}).items():
        next(r for r in rows if r.phase == phase).latencies_s.extend(values)
    return rows


def test_scale_up_and_down_times_are_measured_from_the_load_step_and_drop() -> None:
    #          t: 0  1  2  3  4  5  6  7  8  9 10 11 12 13
    current = [1, 1, 1, 1, 2, 2, 4, 4, 4, 4, 4, 2, 1, 1]
    syncs = [
        SyncRecord(0.0, 1, 1, 20.0),
        SyncRecord(1.5, 2, 3, 95.0, "too early: before the step"),  # not counted: the load had not stepped
        SyncRecord(3.5, 1, 2, 99.0, "pods metric X above target"),
        SyncRecord(5.5, 2, 4, 90.0, "pods metric X above target"),
        SyncRecord(7.0, 4, 3, 40.0, "All metrics below target"),  # before the drop: not the scale-down figure
        SyncRecord(10.5, 4, 2, 10.0, "All metrics below target"),
        SyncRecord(11.5, 2, 1, 10.0, "All metrics below target"),
    ]
    summary = summarize(rows_with(current), syncs, load_step_at=2.0, load_drop_at=8.0)
    assert (summary.initial_replicas, summary.peak_replicas, summary.final_replicas) == (1, 4, 1)
    assert summary.peak_desired_replicas == 4
    assert summary.scale_up_seconds == 1.5
    assert summary.peak_reached_seconds == 4.0
    assert summary.scale_down_seconds == 2.5
    assert summary.back_to_initial_seconds == 4.0
    assert summary.requests == {"sent": 140, "ok": 126, "errors": 14, "dropped": 0}
    assert [(e["t"], e["from"], e["to"]) for e in summary.scale_events] == [
        (1.5, 2, 3), (3.5, 1, 2), (5.5, 2, 4), (7.0, 4, 3), (10.5, 4, 2), (11.5, 2, 1)]


def test_no_scaling_leaves_the_times_empty() -> None:
    summary = summarize(rows_with([1] * 14), [SyncRecord(3.0, 1, 1, 20.0)], load_step_at=2.0, load_drop_at=8.0)
    assert (summary.initial_replicas, summary.peak_replicas, summary.final_replicas) == (1, 1, 1)
    assert summary.scale_up_seconds is None
    assert summary.scale_down_seconds is None
    assert summary.back_to_initial_seconds is None
    assert summary.peak_reached_seconds is None


def test_latency_percentiles_per_phase_and_json_shape() -> None:
    rows = rows_with([1] * 14, {"baseline": [0.040] * 19 + [0.100], "hold": [0.5, 1.0, 1.5, 2.0]})
    summary = summarize(rows, [], load_step_at=2.0, load_drop_at=8.0, extra={"plot": "demo.png", "child_pids": [7]})
    assert summary.latency_by_phase["baseline"] == PhaseLatency(20, 40.0, 40.0)
    assert summary.latency_by_phase["hold"] == PhaseLatency(4, 1000.0, 2000.0)
    assert summary.latency_by_phase["cool-down"] == PhaseLatency(0, None, None)
    doc = summary.to_json()
    for key in ("initial_replicas", "peak_replicas", "final_replicas", "scale_up_seconds", "scale_down_seconds"):
        assert key in doc
    assert doc["plot"] == "demo.png" and doc["child_pids"] == [7]
    assert doc["latency_by_phase"]["hold"] == {"requests": 4, "p50_ms": 1000.0, "p95_ms": 2000.0}


def test_rows_follow_the_profile_then_drain() -> None:
    profile = parse_profile("2s:10,2s:10..30")
    seconds = [SecondStats(sent=10, ok=10, latencies=[0.05] * 10), SecondStats(sent=10, ok=9, errors=1),
               SecondStats(sent=15), SecondStats(sent=25, ok=20), SecondStats(ok=20, latencies=[0.5, 0.7])]
    rows = build_rows(profile, seconds, {0: {"current_replicas": 1}, 3: {"current_replicas": 2}})
    assert [r.phase for r in rows] == ["baseline", "baseline", "ramp-up", "ramp-up", "drain"]
    assert [r.target_rps for r in rows] == [10, 10, 15, 25, 0]
    assert [r.current_replicas for r in rows] == [1, None, None, 2, None]
    assert rows[0].p50_ms == 50.0
    assert rows[4].p95_ms == 700.0 and rows[4].ok == 20


def test_csv_has_one_line_per_second_and_no_raw_latencies(tmp_path: Path) -> None:
    rows = rows_with([1, 2], {"baseline": [0.01]})
    rows[0].gpu_util = 42.123456789
    path = tmp_path / "timeline.csv"
    write_csv(rows, path)
    with path.open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 2
    assert "latencies_s" not in table[0]
    assert table[0]["gpu_util"] == "42.1235"
    assert table[1]["current_replicas"] == "2"
    assert table[1]["hpa_metric"] == ""
    assert float(table[0]["target_rps"]) == pytest.approx(10)


@pytest.mark.parametrize(("needed", "expected"), [(4, 2), (2, 1), (5, None)])
def test_scale_ups_to_needed_counts_decisions_after_the_step(needed: int, expected: int | None) -> None:
    current = [1, 1, 1, 1, 2, 2, 4, 4, 4, 4, 4, 2, 1, 1]
    syncs = [SyncRecord(1.5, 2, 3, 95.0, "before the step"), SyncRecord(2.5, 1, 1, 50.0),
             SyncRecord(3.5, 1, 2, 99.0, "up", readings={"a": 99.0, "b": None}),
             SyncRecord(5.5, 2, 4, 90.0, "up", error="invalid metrics (1 invalid out of 2), first error is: x")]
    summary = summarize(rows_with(current), syncs, load_step_at=2.0, load_drop_at=8.0, needed_replicas=needed)
    assert (summary.needed_replicas, summary.scale_ups_to_needed) == (needed, expected)
    # every sync, scaling or not, with what each metric read
    assert [(d["t"], d["from"], d["to"]) for d in summary.decisions] == [(1.5, 2, 3), (2.5, 1, 1), (3.5, 1, 2),
                                                                          (5.5, 2, 4)]
    assert summary.decisions[2]["readings"] == {"a": 99.0, "b": None}
    assert summary.decisions[3]["error"].startswith("invalid metrics")
    assert summary.failed == 14
    assert summary.to_json()["scale_ups_to_needed"] == expected


def test_gpu_seconds_and_time_at_zero_come_from_the_profiles_seconds() -> None:
    """GPU-seconds: the cumulative figure at the profile's last second (drain seconds, when requests sent during
    the profile still finish, do not count); seconds at zero: profile seconds that ended with no replica."""
    pods = [1, 1, 0, 0, 0, 2, 2, 0]
    used = [1.0, 2.0, 2.4, 2.4, 2.4, 3.9, 5.9, 6.5]
    rows = [TimelineRow(t=float(t), phase="hold", target_rps=1.0, pods=p, gpu_seconds=g)
            for t, (p, g) in enumerate(zip(pods, used, strict=True))]
    rows.append(TimelineRow(t=8.0, phase="drain", target_rps=0.0, pods=1, gpu_seconds=7.5))
    summary = summarize(rows, [], None, None)
    assert (summary.gpu_seconds, summary.seconds_at_zero) == (6.5, 4)
    assert summary.to_json()["gpu_seconds"] == 6.5
    plain = summarize(rows_with([1, 1]), [], None, None)  # a run that records neither
    assert (plain.gpu_seconds, plain.seconds_at_zero) == (None, None)
