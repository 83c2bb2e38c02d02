"""bench/nvml_fields.py (every field through the NVML backend, for real GPUs) over the simulated library."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pynvml
import pytest

from exporter.fields.table import FIELDS
from tests import fakenvml
from tests.fakenvml import FakeNvml
from tests.support.scripts import load_script

pytestmark = pytest.mark.unit

fake_nvml = fakenvml.fake_nvml
SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "nvml_fields.py"


def load_bench() -> ModuleType:
    return load_script("bench/nvml_fields.py", "nvml_fields_bench")


def test_every_field_of_every_gpu_is_read_and_its_outcome_said(fake_nvml: FakeNvml, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    fake_nvml.gpus[1].gpu_temp_c = 61
    fake_nvml.fail("nvmlDeviceGetPcieReplayCounter", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=0)
    out = tmp_path / "fields.json"
    assert load_bench().main(["--rounds", "2", "--gap-s", "0", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    reads = {(r["entity"], r["field"]): r for r in doc["reads"]}
    assert len(reads) == 2 * len(FIELDS)
    assert reads[("gpu1", "DCGM_FI_DEV_GPU_TEMP")]["outcome"] == "value"
    assert reads[("gpu1", "DCGM_FI_DEV_GPU_TEMP")]["value"] == 61
    assert reads[("gpu0", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")]["outcome"] == "not supported"
    assert reads[("gpu1", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")]["outcome"] == "value"
    assert all(r["ms"] >= 0 for r in doc["reads"])
    assert [e["uuid"] for e in doc["entities"]] == [g.uuid for g in fake_nvml.gpus]
    printed = capsys.readouterr().out
    assert "gpu0 DCGM_FI_DEV_PCIE_REPLAY_COUNTER: not supported" in printed
    assert "2 entities" in printed


def test_without_nvml_it_says_so_in_one_line(fake_nvml: FakeNvml, capsys: pytest.CaptureFixture[str]) -> None:
    fake_nvml.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert load_bench().main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nvml_fields: NVML library libnvidia-ml.so.1 not found") and err.count("\n") == 1
    assert "Traceback" not in err

