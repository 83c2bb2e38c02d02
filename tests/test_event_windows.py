"""DCGM_EXP_XID_ERRORS_COUNT and DCGM_EXP_CLOCK_EVENTS_COUNT: dcgm-exporter's windowed counts, with the fake
backend injecting XIDs (``xid_events``) and clock-event reasons (``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.backends.fake import FakeBackend
from exporter.fields.counters import parse_counters
from exporter.fields.event_windows import CLOCK_EVENT_NAMES, EventWindow, clock_event_bits
from exporter.serving.collector import Collector, CollectorOptions
from tests.exporter_helpers import parse_metrics, series, value, write_state

pytestmark = pytest.mark.unit

CSV = """DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_FI_DRIVER_VERSION, label, Driver Version
DCGM_EXP_XID_ERRORS_COUNT, counter, reported XIDs during last window
DCGM_EXP_CLOCK_EVENTS_COUNT, counter, reported clock events
"""
XID = "DCGM_EXP_XID_ERRORS_COUNT"
CLOCK = "DCGM_EXP_CLOCK_EVENTS_COUNT"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, state: dict[str, Any], *, xid_ms: int = 60_000, clock_ms: int = 60_000,
         gpus: int = 2) -> tuple[Collector, Path, Clock]:
    path = tmp_path / "state.json"
    write_state(path, state)
    clock = Clock()
    backend = FakeBackend(gpus, str(path), clock=clock)
    backend.open()
    options = CollectorOptions(xid_count_window_ms=xid_ms, clock_events_count_window_ms=clock_ms)
    return Collector(backend, parse_counters(CSV, "exp.csv"), options, clock=clock), path, clock


def rows_of(collector: Collector) -> list[tuple[str, dict[str, str], float]]:
    collector.collect_once()
    return parse_metrics(collector.snapshot.body.decode())


def counts(rows: list, name: str, label: str, gpu: str) -> dict[str | None, float]:
    return {r[1].get(label): r[2] for r in series(rows, name, gpu=gpu)}


def test_window_counts_and_forgets() -> None:
    window = EventWindow(10_000)
    window.record(0, 100.0, [79, 79, 13])
    window.record(0, 105.0, [79])
    assert window.counts(0, 105.0) == {79: 3, 13: 1}
    assert window.counts(1, 105.0) == {}
    assert window.counts(0, 110.5) == {79: 1}  # the events at t=100 left the 10 s window
    assert window.counts(0, 115.0) == {}


def test_clock_event_bits_are_dcgm_reasons() -> None:
    # upstream internal/pkg/collector/clock_events_collector_test.go: one sample of SW_POWER_CAP | SW_THERMAL
    # counts once for each reason; HW_POWER_BRAKE | HW_THERMAL likewise
    assert [CLOCK_EVENT_NAMES[b] for b in clock_event_bits(0x04 | 0x20)] == ["power_cap", "sw_thermal"]
    assert [CLOCK_EVENT_NAMES[b] for b in clock_event_bits(0x80 | 0x40)] == ["hw_thermal", "hw_power_brake"]
    assert clock_event_bits(0x200) == []  # bits dcgm-exporter has no name for are not counted


def test_xid_counts_per_code_within_the_window(tmp_path: Path) -> None:
    collector, path, clock = make(tmp_path, {"gpus": {"0": {"xid_events": [79, 79, 13]}}})
    rows = rows_of(collector)
    assert counts(rows, XID, "xid", "0") == {"79": 2, "13": 1}
    labels = series(rows, XID, gpu="0", xid="79")[0][1]
    assert labels["window_size_in_ms"] == "60000"
    assert labels["DCGM_FI_DRIVER_VERSION"] == "550.54.15"  # label fields ride along, as on every series
    # a GPU without XIDs in the window: one series of 0 without an xid label
    assert [(r[1].get("xid"), r[2]) for r in series(rows, XID, gpu="1")] == [(None, 0)]
    assert value(rows, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 13  # the newest event is the last XID
    assert "# TYPE DCGM_EXP_XID_ERRORS_COUNT counter" in collector.snapshot.body.decode()

    clock.now += 30
    write_state(path, {"gpus": {"0": {"xid_events": [79, 79, 13, 79]}, "1": {"xid_events": [48]}}})
    rows = rows_of(collector)
    assert counts(rows, XID, "xid", "0") == {"79": 3, "13": 1}
    assert counts(rows, XID, "xid", "1") == {"48": 1}

    clock.now += 31  # the first three XIDs are now older than 60 s
    rows = rows_of(collector)
    assert counts(rows, XID, "xid", "0") == {"79": 1}
    clock.now += 60
    rows = rows_of(collector)
    assert counts(rows, XID, "xid", "0") == {None: 0}
    assert value(rows, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 79  # the last XID stays, as in DCGM


def test_clock_events_count_samples_per_reason(tmp_path: Path) -> None:
    reasons = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
    collector, path, clock = make(tmp_path, {"gpus": {"0": {reasons: 0x04 | 0x20}}}, clock_ms=2500)
    for _ in range(3):  # one sample per collection, as DCGM samples the field every collect interval
        rows = rows_of(collector)
        clock.now += 1
    assert counts(rows, CLOCK, "clock_event", "0") == {"power_cap": 3, "sw_thermal": 3}
    assert series(rows, CLOCK, gpu="0", clock_event="power_cap")[0][1]["window_size_in_ms"] == "2500"
    assert counts(rows, CLOCK, "clock_event", "1") == {"gpu_idle": 3}  # the fake's idle GPU drops its clocks

    write_state(path, {"gpus": {"0": {reasons: 0x80}}})
    rows = rows_of(collector)  # t=1003: samples at 1001, 1002 are in the 2.5 s window, 1000 is not
    assert counts(rows, CLOCK, "clock_event", "0") == {"power_cap": 2, "sw_thermal": 2, "hw_power_brake": 1}
    clock.now += 2  # t=1005: the two 0x80 samples (1003, 1005) remain
    rows = rows_of(collector)
    assert counts(rows, CLOCK, "clock_event", "0") == {"hw_power_brake": 2}


def test_every_mig_instance_carries_its_gpus_counts(tmp_path: Path) -> None:
    state = {"gpus": {"1": {"xid_events": [31], "mig": [{"gpu_instance_id": 1, "profile": "3g.40gb"},
                                                         {"gpu_instance_id": 2, "profile": "1g.10gb"}]}}}
    collector, _, _ = make(tmp_path, state)
    rows = rows_of(collector)
    assert sorted((r[1]["GPU_I_ID"], r[1]["xid"], r[2]) for r in series(rows, XID, gpu="1")) == [
        ("1", "31", 1), ("2", "31", 1)]


def test_not_configured_means_no_series(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_state(path, {"gpus": {"0": {"xid_events": [79]}}})
    backend = FakeBackend(1, str(path))
    backend.open()
    collector = Collector(backend, parse_counters("DCGM_FI_DEV_XID_ERRORS, gauge, x\n", "c.csv"), CollectorOptions())
    rows = rows_of(collector)
    assert not series(rows, XID) and not series(rows, CLOCK)
    assert value(rows, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 79


def test_a_gpu_without_clock_event_reasons_reports_zero(tmp_path: Path) -> None:
    collector, _, _ = make(tmp_path, {"gpus": {"0": {"unsupported": ["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]}}})
    rows = rows_of(collector)
    assert [(r[1].get("clock_event"), r[2]) for r in series(rows, CLOCK, gpu="0")] == [(None, 0)]
