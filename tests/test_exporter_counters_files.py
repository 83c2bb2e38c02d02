"""The exporter process started with dcgm-exporter's own counters files and the GPU Operator's, as users pass them:
every field a file names is served, or reported ``gpu_exporter_field_supported 0`` after one warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.exporter_helpers import parse_metrics, series, write_state
from tests.support.exporter_process import ExporterProcess
from tests.support.reference import every_line_enabled, listed_fields, reference_file

pytestmark = pytest.mark.e2e


def check_every_field_accounted_for(text: str, metrics: str, log: str, gpus: int) -> set[str]:
    """Assert each field of the file is a family, a label on the GPU series, or unsupported on every GPU; return the
    unsupported ones."""
    rows = parse_metrics(metrics)
    families = {r[0] for r in rows}
    gpu_series = series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
    label_names = set(gpu_series[0][1]) if gpu_series else set()
    unsupported = set()
    for name, kind in listed_fields(text):
        served = name in label_names if kind == "label" else name in families
        zeros = series(rows, "gpu_exporter_field_supported", field=name)
        if served:
            assert all(z[2] == 1 for z in zeros), (name, zeros)
            continue
        assert len(zeros) == gpus and all(z[2] == 0 for z in zeros), f"{name} neither served nor unsupported"
        assert log.count(f" {name} is not produced by this exporter (") == 1, name  # warned once, with why
        unsupported.add(name)
    return unsupported


@pytest.mark.parametrize("name", ["default-counters.csv", "dcp-metrics-included.csv"])
def test_reference_files_as_shipped(tmp_path: Path, name: str) -> None:
    path = reference_file(name)
    state = tmp_path / "state.json"
    write_state(state, {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 61, "xid_events": [13]}}})  # XIDs: no series before one
    # the chart passes -f; the GPU Operator sets DCGM_EXPORTER_COLLECTORS=/etc/dcgm-exporter/dcp-metrics-included.csv
    args = ["--backend", "fake", "--fake-state", str(state), "-c", "200"]
    env = {}
    if name == "dcp-metrics-included.csv":
        env["DCGM_EXPORTER_COLLECTORS"] = str(path)
    else:
        args += ["-f", str(path)]
    exporter = ExporterProcess(args, env=env)
    try:
        metrics = exporter.metrics()
    finally:
        log = exporter.stop()
    assert exporter.proc.returncode == 0, log
    unsupported = check_every_field_accounted_for(path.read_text(), metrics, log, gpus=2)
    assert unsupported == set()  # the fake backend simulates every field the shipped files enable
    assert "Traceback" not in log


@pytest.mark.parametrize("name", ["default-counters.csv", "dcp-metrics-included.csv"])
def test_reference_files_with_every_line_enabled(tmp_path: Path, name: str) -> None:
    text = every_line_enabled(reference_file(name).read_text())
    csv = tmp_path / name
    csv.write_text(text)
    state = tmp_path / "state.json"
    write_state(state, {"gpus": {"0": {"xid_events": [79, 79], "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x4}}})
    exporter = ExporterProcess(["--backend", "fake", "--fake-state", str(state), "-c", "200", "-f", str(csv),
                                "-x", "60000"],
                               env={"DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE": "45000"})
    try:
        metrics = exporter.metrics()
    finally:
        log = exporter.stop()
    assert exporter.proc.returncode == 0, log
    unsupported = check_every_field_accounted_for(text, metrics, log, gpus=2)
    # only DCGM's health and P2P counters (default-counters.csv) need DCGM itself
    assert unsupported == {n for n, _ in listed_fields(text)} & {"DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS"}
    rows = parse_metrics(metrics)
    if "DCGM_EXP_XID_ERRORS_COUNT" in text:
        xid = series(rows, "DCGM_EXP_XID_ERRORS_COUNT", gpu="0", xid="79")
        assert [(r[1]["window_size_in_ms"], r[2]) for r in xid] == [("60000", 2)]
        clock = series(rows, "DCGM_EXP_CLOCK_EVENTS_COUNT", gpu="0", clock_event="power_cap")
        assert clock and clock[0][1]["window_size_in_ms"] == "45000" and clock[0][2] >= 1
