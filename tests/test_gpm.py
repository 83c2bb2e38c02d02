"""DCGM_FI_PROF_* from NVML's GPM API, through the real pynvml over recorded sample pairs (tests/fakenvml.py)."""

from __future__ import annotations

import math

import pynvml
import pytest

from exporter.backends.gpm import pick_baseline
from exporter.backends.nvml import NvmlBackend
from exporter.fields.counters import parse_counters
from exporter.fields.table import FIELDS, FIELDS_BY_NAME
from exporter.serving.collector import Collector, CollectorOptions
from tests import fakenvml
from tests.exporter_helpers import parse_metrics, series, value
from tests.fakenvml import FakeGpu, FakeNvml

pytestmark = pytest.mark.unit

fake_nvml = fakenvml.fake_nvml

PROF = [f for f in FIELDS if f.name.startswith("DCGM_FI_PROF_")]
CSV = "\n".join(f"{f.name}, {f.kind}, {f.help}" for f in [*PROF, FIELDS_BY_NAME["DCGM_FI_DEV_GPU_TEMP"]])
M = pynvml
BUSY = {  # percent, or MiB/s for the PCIe bandwidths
    M.NVML_GPM_METRIC_GRAPHICS_UTIL: 62.5, M.NVML_GPM_METRIC_SM_UTIL: 40.0, M.NVML_GPM_METRIC_SM_OCCUPANCY: 25.0,
    M.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 12.5, M.NVML_GPM_METRIC_FP64_UTIL: 1.0, M.NVML_GPM_METRIC_FP32_UTIL: 30.0,
    M.NVML_GPM_METRIC_FP16_UTIL: 7.5, M.NVML_GPM_METRIC_DRAM_BW_UTIL: 55.0,
    M.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 1200.0, M.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 300.5,
}
EXPECTED = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.625, "DCGM_FI_PROF_SM_ACTIVE": 0.40, "DCGM_FI_PROF_SM_OCCUPANCY": 0.25,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.125, "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.01,
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 0.30, "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 0.075, "DCGM_FI_PROF_DRAM_ACTIVE": 0.55,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1200 * 1024 * 1024, "DCGM_FI_PROF_PCIE_RX_BYTES": int(300.5 * 1024 * 1024),
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def hopper(gpu: FakeGpu) -> None:
    gpu.gpm_supported = True
    gpu.gpm_counters = dict.fromkeys(BUSY, 0.0)


def start_backend(fake: FakeNvml, interval_s: float = 1.0) -> tuple[Collector, NvmlBackend, Clock]:
    clock = Clock()
    fake.clock = clock
    backend = NvmlBackend(pynvml, gpm_min_gap_s=interval_s, clock=clock)
    backend.open()
    return Collector(backend, parse_counters(CSV, "prof.csv"), CollectorOptions()), backend, clock


def scrape(collector: Collector) -> list:
    collector.collect_once()
    return parse_metrics(collector.snapshot.body.decode())


def run(gpu: FakeGpu | fakenvml.FakeMigDevice, clock: Clock, seconds: float, rates: dict[int, float]) -> None:
    gpu.gpm_run(seconds, rates)
    clock.now += seconds


def test_pick_baseline() -> None:
    assert pick_baseline([], 1.0) is None
    assert pick_baseline([5.0], 1.0) is None
    assert pick_baseline([5.0, 5.9], 1.0) is None  # too close
    assert pick_baseline([5.0, 6.0], 1.0) == 0
    assert pick_baseline([5.0, 5.5, 6.0, 6.9], 1.0) == 1  # the newest that is old enough


def test_every_profiling_field_from_one_sample_pair(fake_nvml: FakeNvml) -> None:
    hopper(fake_nvml.gpus[0])
    collector, backend, clock = start_backend(fake_nvml)
    try:
        rows = scrape(collector)
        # one sample is no pair: no value yet, and not "unsupported" either
        assert not [r for r in rows if r[0].startswith("DCGM_FI_PROF_")]
        assert value(rows, "gpu_exporter_field_supported", gpu="0", field="DCGM_FI_PROF_GR_ENGINE_ACTIVE") == 1
        run(fake_nvml.gpus[0], clock, 1.0, BUSY)
        rows = scrape(collector)
    finally:
        backend.close()
    for name, expected in EXPECTED.items():
        assert value(rows, name, gpu="0") == pytest.approx(expected), name
    assert isinstance(value(rows, "DCGM_FI_PROF_PCIE_TX_BYTES", gpu="0"), float)  # parsed; written as an integer
    assert "DCGM_FI_PROF_PCIE_TX_BYTES{" in collector.snapshot.body.decode()
    # GPU 1 has no GPM (pre-Hopper): omitted, reported unsupported, and never sampled
    assert not series(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="1")
    assert value(rows, "gpu_exporter_field_supported", gpu="1", field="DCGM_FI_PROF_SM_ACTIVE") == 0
    assert fake_nvml.gpu_calls[("nvmlGpmSampleGet", 1)] == 0
    assert fake_nvml.gpu_calls[("nvmlGpmQueryDeviceSupport", 1)] == 1
    # one sample and one metrics call per collection serve all ten fields
    assert fake_nvml.gpu_calls[("nvmlGpmSampleGet", 0)] == 2
    assert fake_nvml.calls["nvmlGpmMetricsGet"] == 1
    assert fake_nvml.gpm_samples_allocated == 0  # freed on close


def test_pairs_are_at_least_one_interval_apart(fake_nvml: FakeNvml) -> None:
    gpu = fake_nvml.gpus[0]
    hopper(gpu)
    util = M.NVML_GPM_METRIC_GRAPHICS_UTIL
    collector, backend, clock = start_backend(fake_nvml, interval_s=1.0)
    try:
        scrape(collector)  # t=0
        run(gpu, clock, 0.5, {util: 20.0})
        assert not series(scrape(collector), "DCGM_FI_PROF_GR_ENGINE_ACTIVE")  # t=0.5: only half an interval
        run(gpu, clock, 0.5, {util: 60.0})
        rows = scrape(collector)  # t=1.0: the pair (0, 1.0)
        assert value(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0") == pytest.approx(0.40)
        run(gpu, clock, 0.5, {util: 100.0})
        rows = scrape(collector)  # t=1.5: the newest sample old enough is t=0.5 -> window (0.5, 1.5)
        assert value(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0") == pytest.approx(0.80)
    finally:
        backend.close()


def test_nan_and_per_metric_errors(fake_nvml: FakeNvml) -> None:
    gpu = fake_nvml.gpus[0]
    hopper(gpu)
    del gpu.gpm_counters[M.NVML_GPM_METRIC_FP64_UTIL]  # this GPU lacks one metric
    collector, backend, clock = start_backend(fake_nvml)
    try:
        scrape(collector)
        gpu.gpm_counters[M.NVML_GPM_METRIC_DRAM_BW_UTIL] = math.nan
        run(gpu, clock, 1.0, BUSY)
        rows = scrape(collector)
        assert value(rows, "DCGM_FI_PROF_SM_ACTIVE", gpu="0") == pytest.approx(0.40)
        assert not series(rows, "DCGM_FI_PROF_DRAM_ACTIVE")  # NaN: blank this time, as DCGM does
        assert value(rows, "gpu_exporter_field_supported", gpu="0", field="DCGM_FI_PROF_DRAM_ACTIVE") == 1
        assert not series(rows, "DCGM_FI_PROF_PIPE_FP64_ACTIVE")
        assert value(rows, "gpu_exporter_field_supported", gpu="0", field="DCGM_FI_PROF_PIPE_FP64_ACTIVE") == 0
        gpu.gpm_counters[M.NVML_GPM_METRIC_DRAM_BW_UTIL] = 0.0
        run(gpu, clock, 1.0, BUSY)
        scrape(collector)
        run(gpu, clock, 1.0, BUSY)
        rows = scrape(collector)
        assert value(rows, "DCGM_FI_PROF_DRAM_ACTIVE", gpu="0") == pytest.approx(0.55)
    finally:
        backend.close()


def test_a_failing_metrics_call_skips_one_collection(fake_nvml: FakeNvml) -> None:
    gpu = fake_nvml.gpus[0]
    hopper(gpu)
    collector, backend, clock = start_backend(fake_nvml)
    try:
        scrape(collector)
        run(gpu, clock, 1.0, BUSY)
        fake_nvml.fail("nvmlGpmMetricsGet", pynvml.NVML_ERROR_TIMEOUT, times=1)
        rows = scrape(collector)
        assert not series(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        assert fake_nvml.calls["nvmlGpmMetricsGet"] == 1  # not retried by each of the ten fields
        run(gpu, clock, 1.0, BUSY)
        rows = scrape(collector)
        assert value(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0") == pytest.approx(0.625)
    finally:
        backend.close()


def test_per_mig_instance_with_gpu_level_pcie_copied(fake_nvml: FakeNvml) -> None:
    gpu = fake_nvml.gpus[0]
    hopper(gpu)
    big = gpu.add_mig("3g.40gb", gpu_instance_id=1, index=0)
    gpu.add_mig("3g.40gb", gpu_instance_id=1, compute_instance_id=1, index=1)  # a second CI: same GPU instance
    small = gpu.add_mig("1g.10gb", gpu_instance_id=5, index=2)
    for mig in (big, small):
        mig.gpm_counters = dict.fromkeys(BUSY, 0.0)
    collector, backend, clock = start_backend(fake_nvml)
    try:
        scrape(collector)
        run(gpu, clock, 1.0, {M.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 2.0, M.NVML_GPM_METRIC_GRAPHICS_UTIL: 99.0})
        big.gpm_run(1.0, {M.NVML_GPM_METRIC_GRAPHICS_UTIL: 75.0})
        small.gpm_run(1.0, {M.NVML_GPM_METRIC_GRAPHICS_UTIL: 10.0})
        rows = scrape(collector)
    finally:
        backend.close()
    assert value(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0", GPU_I_ID="1") == pytest.approx(0.75)
    assert value(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0", GPU_I_ID="5") == pytest.approx(0.10)
    tx = series(rows, "DCGM_FI_PROF_PCIE_TX_BYTES", gpu="0")
    assert sorted((r[1]["GPU_I_ID"], r[2]) for r in tx) == [("1", 2 * 1024 * 1024), ("5", 2 * 1024 * 1024)]
    assert fake_nvml.gpu_calls[("nvmlGpmMigSampleGet", 0)] == 2 * 2  # per GPU instance and collection
    assert fake_nvml.gpu_calls[("nvmlGpmSampleGet", 0)] == 2  # the parent once per collection, for PCIe


def test_samples_of_a_vanished_instance_are_reused_and_all_freed_on_close(fake_nvml: FakeNvml) -> None:
    gpu = fake_nvml.gpus[0]
    hopper(gpu)
    mig = gpu.add_mig("1g.10gb", gpu_instance_id=5, index=0)
    mig.gpm_counters = dict.fromkeys(BUSY, 0.0)
    collector, backend, clock = start_backend(fake_nvml)
    try:
        scrape(collector)
        assert fake_nvml.calls["nvmlGpmSampleAlloc"] == 2  # the instance's and the parent's (for PCIe)
        gpu.migs.clear()
        gpu.mig_mode = gpu.mig_pending = pynvml.NVML_DEVICE_MIG_DISABLE
        collector._enumerated_at = -1e18  # re-enumerate now instead of after 30 s
        run(gpu, clock, 1.0, BUSY)
        rows = scrape(collector)
        assert not series(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_I_ID="5")
        assert fake_nvml.calls["nvmlGpmSampleAlloc"] == 2  # the gone instance's sample was reused
        run(gpu, clock, 1.0, BUSY)
        rows = scrape(collector)
        assert value(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0") == pytest.approx(0.625)
    finally:
        backend.close()
    assert fake_nvml.gpm_samples_allocated == 0
