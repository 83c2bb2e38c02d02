"""``gpu-exporter doctor`` without a GPU: the real command over the fake backend, against a stand-in nvidia-smi
(tests/support/nvidia_smi/nvidia-smi) that prints nvidia-smi's CSV for the rows a test gives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clikit.fake_gpus import fake_gpu_uuid
from exporter.cli.smi_compare import PAIRS, Pair, Status, judge, parse_rows
from tests.exporter_helpers import write_state

pytestmark = pytest.mark.e2e

STAND_IN = Path(__file__).parent / "support" / "nvidia_smi"


def idle_h100(index: int) -> dict[str, str]:
    """What nvidia-smi prints (nounits) for the fake backend's idle simulated H100 number ``index``."""
    return {
        "index": str(index), "uuid": fake_gpu_uuid("", index), "name": "NVIDIA H100 80GB HBM3",
        "pci.bus_id": f"00000000:{0x10 + index:02X}:00.0", "driver_version": "550.54.15",
        "vbios_version": "96.00.74.00.01", "serial": str(1650000000000 + index), "inforom.img": "G520.0200.00.05",
        "inforom.oem": "1.1", "inforom.ecc": "7.0", "inforom.pwr": "1.0",
        "utilization.gpu": "0", "utilization.memory": "0", "utilization.encoder": "0", "utilization.decoder": "0",
        "memory.total": "81559", "memory.reserved": "591", "memory.used": "0", "memory.free": "80968",
        "temperature.gpu": "31", "temperature.memory": "34", "power.draw": "71.50", "power.draw.instant": "71.50",
        "clocks.current.sm": "1980", "clocks.current.memory": "2619",
        "ecc.errors.corrected.volatile.total": "0", "ecc.errors.uncorrected.volatile.total": "0",
        "ecc.errors.corrected.aggregate.total": "0", "ecc.errors.uncorrected.aggregate.total": "0",
        "retired_pages.single_bit_ecc.count": "0", "retired_pages.double_bit.count": "0",
        "remapped_rows.correctable": "0", "remapped_rows.uncorrectable": "0",
    }


def doctor(tmp_path: Path, state: dict[str, Any], smi: dict[str, Any] | None, *extra: str,
           path: str | None = None) -> subprocess.CompletedProcess[str]:
    state_file = tmp_path / "state.json"
    write_state(state_file, state)
    env = {**os.environ, "PATH": path if path is not None else f"{STAND_IN}{os.pathsep}{os.environ['PATH']}"}
    if smi is not None:
        smi_file = tmp_path / "smi.json"
        smi_file.write_text(json.dumps(smi))
        env["FAKE_NVIDIA_SMI"] = str(smi_file)
    return subprocess.run([sys.executable, "-m", "exporter", "doctor", "--backend", "fake", "--fake-gpu-count", "2",
                           "--fake-state", str(state_file), "--sample-gap", "0", *extra],
                          capture_output=True, text=True, env=env, timeout=60)


def verdicts(report: dict[str, Any], index: int) -> dict[str, dict[str, Any]]:
    gpu = next(g for g in report["gpus"] if g["index"] == index)
    return {f["field"]: f for f in gpu["fields"]}


BUSY = {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 85, "DCGM_FI_DEV_FB_USED": 30000}}}


def busy_rows() -> list[dict[str, str]]:
    gpu0 = idle_h100(0) | {"utilization.gpu": "85", "memory.used": "30000", "memory.free": "50968"}
    return [gpu0, idle_h100(1)]


def test_every_shared_field_agrees_and_the_exit_status_is_0(tmp_path: Path) -> None:
    result = doctor(tmp_path, BUSY, {"gpus": busy_rows()}, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["disagreements"] == 0 and report["nvidia_smi_lacks"] == []
    assert [(g["index"], g["uuid"]) for g in report["gpus"]] == [(0, fake_gpu_uuid("", 0)), (1, fake_gpu_uuid("", 1))]
    gpu0 = verdicts(report, 0)
    assert gpu0["DCGM_FI_DEV_GPU_UTIL"] == {
        "field": "DCGM_FI_DEV_GPU_UTIL", "nvidia_smi": "utilization.gpu", "ours": 85.0,
        "nvidia_smi_values": ["85", "85"], "tolerance": "±10 %", "status": "agree", "note": None}
    assert gpu0["DCGM_FI_DEV_FB_USED"]["ours"] == 30000
    assert gpu0["DCGM_FI_DRIVER_VERSION"]["ours"] == "550.54.15"
    given = busy_rows()[0]
    assert {name: f["status"] for name, f in gpu0.items() if f["nvidia_smi"] in given} == {
        name: "agree" for name, f in gpu0.items() if f["nvidia_smi"] in given}
    # a field the exporter has but this nvidia-smi row leaves out ([N/A]) is shown, not failed
    assert {f["status"] for f in gpu0.values() if f["nvidia_smi"] not in given} <= {"nvidia-smi: n/a"}
    assert len([f for f in gpu0.values() if f["nvidia_smi"] in given]) == 31

    human = doctor(tmp_path, BUSY, {"gpus": busy_rows()})
    assert human.returncode == 0
    assert f"GPU 0  {fake_gpu_uuid('', 0)}  NVIDIA H100 80GB HBM3" in human.stdout
    assert "utilization.gpu" in human.stdout and "All values agree." in human.stdout
    assert "Not supported on this GPU: none" in human.stdout


def test_a_disagreement_beyond_the_tolerance_is_flagged_and_exits_1(tmp_path: Path) -> None:
    rows = busy_rows()
    rows[0] |= {"utilization.gpu": "20", "power.draw": "75.00"}  # power within ±5 W, utilisation 65 points off
    rows[1] |= {"serial": "1650000009999"}
    result = doctor(tmp_path, BUSY, {"gpus": rows}, "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["disagreements"] == 2
    gpu0, gpu1 = verdicts(report, 0), verdicts(report, 1)
    assert gpu0["DCGM_FI_DEV_GPU_UTIL"]["status"] == "DIFFERS"
    assert gpu0["DCGM_FI_DEV_GPU_UTIL"]["note"] == "off by 65 %"
    assert gpu0["DCGM_FI_DEV_POWER_USAGE"]["status"] == "agree"
    assert gpu1["DCGM_FI_DEV_SERIAL"] | {"note": None} == {
        "field": "DCGM_FI_DEV_SERIAL", "nvidia_smi": "serial", "ours": "1650000000001",
        "nvidia_smi_values": ["1650000009999"], "tolerance": "same text", "status": "DIFFERS", "note": None}
    human = doctor(tmp_path, BUSY, {"gpus": rows})
    assert human.returncode == 1 and "2 disagreement(s)" in human.stdout and "DIFFERS" in human.stdout


def test_fields_not_supported_on_a_gpu_are_listed(tmp_path: Path) -> None:
    state = {"gpus": {"1": {"unsupported": ["DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_ENC_UTIL"]}}}
    rows = [idle_h100(0), idle_h100(1) | {"temperature.memory": "[N/A]", "utilization.encoder": "0"}]
    result = doctor(tmp_path, state, {"gpus": rows}, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    gpu1 = next(g for g in report["gpus"] if g["index"] == 1)
    assert gpu1["not_supported"] == ["DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_MEMORY_TEMP"]
    fields = verdicts(report, 1)
    assert fields["DCGM_FI_DEV_MEMORY_TEMP"]["status"] == "not supported (both)"
    # nvidia-smi has a value we do not: shown, not counted as a disagreement
    assert fields["DCGM_FI_DEV_ENC_UTIL"]["status"] == "not supported by us"
    human = doctor(tmp_path, state, {"gpus": rows})
    assert "Not supported on this GPU: DCGM_FI_DEV_ENC_UTIL, DCGM_FI_DEV_MEMORY_TEMP" in human.stdout


def test_mig_gpus_order_and_matching_by_uuid(tmp_path: Path) -> None:
    state = {"gpus": {"1": {"mig": [{"gpu_instance_id": 1, "profile": "3g.40gb"}]}}}
    # MIG: nvidia-smi answers [N/A] for utilisation, as NVML does; rows come in another order than ours
    mig = idle_h100(1) | {p: "[N/A]" for p in ("utilization.gpu", "utilization.memory", "utilization.encoder",
                                                 "utilization.decoder")}
    result = doctor(tmp_path, state, {"gpus": [mig, idle_h100(0)]}, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert [g["index"] for g in report["gpus"]] == [0, 1]
    assert verdicts(report, 1)["DCGM_FI_DEV_GPU_UTIL"]["status"] == "not supported (both)"
    assert verdicts(report, 1)["DCGM_FI_DEV_FB_TOTAL"]["status"] == "agree"  # the whole GPU's framebuffer


def test_a_gpu_only_nvidia_smi_lists_is_a_disagreement(tmp_path: Path) -> None:
    stranger = idle_h100(0) | {"index": "2", "uuid": "GPU-00000000-0000-0000-0000-000000000002"}
    result = doctor(tmp_path, {}, {"gpus": [idle_h100(0), idle_h100(1), stranger]}, "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["gpus"][-1] | {"fields": []} == {
        "index": 2, "uuid": stranger["uuid"], "model": "", "problem": "only nvidia-smi lists this GPU",
        "not_supported": [], "fields": []}


def test_a_property_this_nvidia_smi_lacks_is_dropped_and_said(tmp_path: Path) -> None:
    result = doctor(tmp_path, {}, {"gpus": [idle_h100(0), idle_h100(1)], "reject": ["power.draw.instant"]},
                    "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["nvidia_smi_lacks"] == ["power.draw.instant"]
    assert verdicts(report, 0)["DCGM_FI_DEV_POWER_USAGE_INSTANT"]["status"] == "nvidia-smi lacks property"
    assert verdicts(report, 0)["DCGM_FI_DEV_POWER_USAGE"]["status"] == "agree"


def test_nvidia_smi_missing_is_one_clear_line(tmp_path: Path) -> None:
    result = doctor(tmp_path, {}, None, path=str(tmp_path))  # a PATH with no nvidia-smi on it
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("gpu-exporter doctor: error: nvidia-smi not found ('nvidia-smi' is not an "
                                    "executable on PATH)")
    assert len(result.stderr.strip().splitlines()) == 1


def test_nvidia_smi_failing_is_one_clear_line(tmp_path: Path) -> None:
    failure = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
               "latest NVIDIA driver is installed and running.")
    result = doctor(tmp_path, {}, {"fail": failure})
    assert result.returncode == 2
    assert result.stderr.strip() == f"gpu-exporter doctor: error: nvidia-smi failed: {failure}"


# -- the pure comparison -------------------------------------------------------------------------------------
PAIR = {p.ours: p for p in PAIRS}


@pytest.mark.parametrize(("pair", "ours", "supported", "cells", "status"), [
    (PAIR["DCGM_FI_DEV_GPU_UTIL"], 50.0, True, ["40", "60"], Status.AGREE),  # inside the span of the two readings
    (PAIR["DCGM_FI_DEV_GPU_UTIL"], 71.0, True, ["40", "60"], Status.DIFFER),  # 11 points above the span
    (PAIR["DCGM_FI_DEV_GPU_UTIL"], 70.0, True, ["40", "60"], Status.AGREE),  # 10 points: on the tolerance
    (PAIR["DCGM_FI_DEV_POWER_USAGE"], 300.0, True, ["272.00"], Status.AGREE),  # 10% of 300 W
    (PAIR["DCGM_FI_DEV_POWER_USAGE"], 300.0, True, ["265.00"], Status.DIFFER),
    (PAIR["DCGM_FI_DEV_SM_CLOCK"], 1980.0, True, ["1890"], Status.AGREE),  # 5%
    # sizes: one MiB apart agrees (an H200 with driver 580.159.04: ours 615 MiB reserved, truncated as DCGM
    # does, nvidia-smi 616), two do not
    (PAIR["DCGM_FI_DEV_FB_RESERVED"], 615.0, True, ["616"], Status.AGREE),
    (PAIR["DCGM_FI_DEV_FB_RESERVED"], 615.0, True, ["617"], Status.DIFFER),
    (PAIR["DCGM_FI_DEV_FB_TOTAL"], 81559.0, True, ["81557"], Status.DIFFER),
    (PAIR["pci_bus_id"], "00000000:17:00.0", True, ["00000000:17:00.0"], Status.AGREE),
    (PAIR["DCGM_FI_DEV_MEMORY_TEMP"], None, False, ["[N/A]"], Status.BOTH_UNSUPPORTED),
    (PAIR["DCGM_FI_DEV_MEMORY_TEMP"], None, False, ["[Not Supported]"], Status.BOTH_UNSUPPORTED),
    (PAIR["DCGM_FI_DEV_MEMORY_TEMP"], None, False, ["45"], Status.OURS_UNSUPPORTED),
    (PAIR["DCGM_FI_DEV_MEMORY_TEMP"], 45.0, True, ["[Unknown Error]"], Status.SMI_UNAVAILABLE),
    (PAIR["DCGM_FI_DEV_MEMORY_TEMP"], None, True, ["45"], Status.NO_VALUE),
    (PAIR["DCGM_FI_DEV_MEMORY_TEMP"], 45.0, True, [None], Status.SMI_LACKS),
    (PAIR["DCGM_FI_DEV_GPU_UTIL"], 50.0, True, ["50", "[N/A]"], Status.AGREE),  # one reading is enough
    (PAIR["DCGM_FI_DEV_PSTATE"], 0.0, True, ["P0"], Status.AGREE),
    (PAIR["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"], 1.0, True, ["garbage"], Status.DIFFER),
])
def test_judge(pair: Pair, ours: float | str | None, supported: bool, cells: list[str | None],
               status: Status) -> None:
    assert judge(pair, ours, supported, cells).status is status


def test_parse_rows_is_nvidia_smis_csv_layout() -> None:
    assert parse_rows("0, GPU-a, 85, [N/A]\n1, GPU-b, 0, 31\n", ["index", "uuid", "utilization.gpu",
                                                                   "temperature.memory"]) == [
        {"index": "0", "uuid": "GPU-a", "utilization.gpu": "85", "temperature.memory": "[N/A]"},
        {"index": "1", "uuid": "GPU-b", "utilization.gpu": "0", "temperature.memory": "31"}]
    with pytest.raises(ValueError, match="printed 2 values for 3 properties"):
        parse_rows("0, GPU-a\n", ["index", "uuid", "name"])


def test_each_pair_names_a_distinct_field_and_property() -> None:
    assert len({p.ours for p in PAIRS}) == len(PAIRS) and len({p.smi for p in PAIRS}) == len(PAIRS)
