"""The NVML backend through the real pynvml module, with only libnvidia-ml's C functions simulated."""

from __future__ import annotations

import time

import pynvml
import pytest

from exporter.backends.base import BackendUnavailable, DeviceLost, FieldNotSupported, FieldUnavailable
from exporter.backends.nvml import NvmlBackend, NvmlMissing, translate
from exporter.fields.counters import load_counters
from exporter.serving.collector import Collector, CollectorOptions
from tests import fakenvml
from tests.exporter_helpers import parse_metrics, series, value
from tests.fakenvml import MIB, FakeNvml
from tests.support.waiting import wait_until

pytestmark = pytest.mark.unit

fake_nvml = fakenvml.fake_nvml


class Clock:
    """The backend's clock, moved by the test: rates divide by exactly the time the test let pass."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def collector_for(fake: FakeNvml, clock: Clock | None = None, **opts: object) -> tuple[Collector, NvmlBackend]:
    backend = NvmlBackend(pynvml, clock=clock or time.monotonic)
    backend.open()
    return Collector(backend, load_counters(None), CollectorOptions(hostname="n1", **opts)), backend  # type: ignore[arg-type]


def scrape(collector: Collector) -> list:
    collector.collect_once()
    return parse_metrics(collector.snapshot.body.decode())


def test_identity_and_default_fields_with_dcgm_conversions(fake_nvml: FakeNvml) -> None:
    gpu0 = fake_nvml.gpus[0]
    gpu0.power_mw = 312_345
    gpu0.gpu_util, gpu0.mem_util = 77, 12
    gpu0.memory = fakenvml.FakeMemory(total=81559 * MIB, reserved=567 * MIB, used=30000 * MIB + 123)
    collector, backend = collector_for(fake_nvml)
    try:
        rows = scrape(collector)
    finally:
        backend.close()
    labels = series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]
    assert labels["UUID"] == gpu0.uuid and labels["pci_bus_id"] == gpu0.pci_bus_id
    assert labels["modelName"] == "NVIDIA H100 80GB HBM3" and labels["device"] == "nvidia0"
    assert labels["DCGM_FI_DRIVER_VERSION"] == fake_nvml.driver_version
    assert value(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 77
    assert value(rows, "DCGM_FI_DEV_MEM_COPY_UTIL", gpu="0") == 12
    assert value(rows, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == 312.345  # mW -> W as a float
    assert value(rows, "DCGM_FI_DEV_FB_USED", gpu="0") == 30000  # bytes -> MiB, truncated like DCGM
    assert value(rows, "DCGM_FI_DEV_FB_RESERVED", gpu="0") == 567
    assert value(rows, "DCGM_FI_DEV_FB_TOTAL", gpu="0") == 81559
    assert value(rows, "DCGM_FI_DEV_FB_FREE", gpu="0") == (81559 - 567 - 30000) - 1  # free bytes floor to MiB
    assert value(rows, "DCGM_FI_DEV_SM_CLOCK", gpu="0") == 1980
    assert value(rows, "DCGM_FI_DEV_MEM_CLOCK", gpu="0") == 2619
    assert value(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0") == 36
    assert value(rows, "DCGM_FI_DEV_MEMORY_TEMP", gpu="0") == 44
    assert value(rows, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0") == 1_234_567_890
    assert value(rows, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gpu="0") == 0
    assert value(rows, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", gpu="0") == 0
    assert value(rows, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", gpu="0") == 0
    assert value(rows, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu="0") == 0  # first sample of a rate
    # no XID yet, and profiling fields need GPM: omitted, never 0
    assert not series(rows, "DCGM_FI_DEV_XID_ERRORS")
    assert not series(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert value(rows, "gpu_exporter_field_supported", gpu="0", field="DCGM_FI_PROF_GR_ENGINE_ACTIVE") == 0


def test_nvlink_bandwidth_is_a_rate(fake_nvml: FakeNvml) -> None:
    clock = Clock()
    collector, backend = collector_for(fake_nvml, clock)
    try:
        scrape(collector)
        gpu0 = fake_nvml.gpus[0]
        with fake_nvml.lock:
            gpu0.nvlink_rx_kib = [kib + 50_000 for kib in gpu0.nvlink_rx_kib]
        clock.now += 0.5
        rows = scrape(collector)
    finally:
        backend.close()
    # DCGM: delta KiB (RX+TX over all links) / seconds / 1000 -> 18 links * 50,000 KiB / 0.5 s / 1000 = 1800
    assert value(rows, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu="0") == 1800
    assert value(rows, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu="1") == 0


def test_nvlink_per_link_bandwidth_direction_and_errors(fake_nvml: FakeNvml) -> None:
    from exporter.fields.counters import parse_counters

    csv = "\n".join(f"DCGM_FI_DEV_NVLINK_{name}, gauge, x" for name in (
        "BANDWIDTH_L3", "TX_BANDWIDTH_L3", "RX_BANDWIDTH_L3", "TX_BANDWIDTH_TOTAL", "RX_BANDWIDTH_TOTAL",
        "BANDWIDTH_L12")) + "\n" + "\n".join(f"DCGM_FI_DEV_NVLINK_{name}_ERROR_COUNT_L{link}, counter, x"
                                              for name in ("CRC_FLIT", "REPLAY") for link in (2, 12))
    gpu0 = fake_nvml.gpus[0]
    gpu0.nvlink_errors = {(2, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT): 5, (2, pynvml.NVML_NVLINK_ERROR_DL_REPLAY): 1}
    gpu0.nvlink_tx_kib, gpu0.nvlink_rx_kib = gpu0.nvlink_tx_kib[:12], gpu0.nvlink_rx_kib[:12]  # an A100: 12 links
    clock = Clock()
    backend = NvmlBackend(pynvml, clock=clock)
    backend.open()
    collector = Collector(backend, parse_counters(csv, "nvlink.csv"), CollectorOptions())
    try:
        scrape(collector)
        with fake_nvml.lock:
            gpu0.nvlink_tx_kib = [kib + (40_000 if link == 3 else 0) for link, kib in enumerate(gpu0.nvlink_tx_kib)]
            gpu0.nvlink_rx_kib = [kib + 10_000 for kib in gpu0.nvlink_rx_kib]
        clock.now += 0.5
        rows = scrape(collector)
    finally:
        backend.close()
    # DCGM's per-link fields: the same delta KiB / s / 1000, with the link as the scope; 0.5 s between samples
    rate = {name: value(rows, f"DCGM_FI_DEV_NVLINK_{name}", gpu="0") for name in (
        "BANDWIDTH_L3", "TX_BANDWIDTH_L3", "RX_BANDWIDTH_L3", "TX_BANDWIDTH_TOTAL", "RX_BANDWIDTH_TOTAL")}
    assert rate == {"TX_BANDWIDTH_L3": 80, "RX_BANDWIDTH_L3": 20, "BANDWIDTH_L3": 100,
                    "TX_BANDWIDTH_TOTAL": 80,  # only link 3 sent
                    "RX_BANDWIDTH_TOTAL": 240}  # 12 links received alike
    # link 12 does not exist on this GPU: unsupported there, read on GPU 1 (18 links)
    assert value(rows, "gpu_exporter_field_supported", gpu="0", field="DCGM_FI_DEV_NVLINK_BANDWIDTH_L12") == 0
    assert not series(rows, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L12", gpu="0")
    assert value(rows, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L12", gpu="1") == 0
    # per-link error counters: nvmlDeviceGetNvLinkErrorCounter(link, counter); link 12 absent on GPU 0 likewise
    assert value(rows, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L2", gpu="0") == 5
    assert value(rows, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L2", gpu="0") == 1
    assert value(rows, "gpu_exporter_field_supported", gpu="0", field="DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L12") == 0
    assert value(rows, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L12", gpu="1") == 0


def test_not_supported_is_probed_once_then_omitted(fake_nvml: FakeNvml) -> None:
    fake_nvml.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=1)
    fake_nvml.gpus[1].memory_temp_c = None  # per-field NOT_SUPPORTED inside nvmlDeviceGetFieldValues
    collector, backend = collector_for(fake_nvml)
    try:
        for _ in range(3):
            rows = scrape(collector)
    finally:
        backend.close()
    assert fake_nvml.gpu_calls[("nvmlDeviceGetPowerUsage", 1)] == 1
    assert fake_nvml.gpu_calls[("nvmlDeviceGetPowerUsage", 0)] == 3
    assert not series(rows, "DCGM_FI_DEV_POWER_USAGE", gpu="1")
    assert not series(rows, "DCGM_FI_DEV_MEMORY_TEMP", gpu="1")
    assert series(rows, "DCGM_FI_DEV_MEMORY_TEMP", gpu="0")
    assert value(rows, "gpu_exporter_field_supported", gpu="1", field="DCGM_FI_DEV_POWER_USAGE") == 0


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN])
def test_failed_gpu_drops_only_its_series_and_is_retried(fake_nvml: FakeNvml, code: int) -> None:
    collector, backend = collector_for(fake_nvml)
    try:
        scrape(collector)
        fake_nvml.fail("*", code, gpu=1)
        rows = scrape(collector)
        assert series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
        assert not [r for r in rows if r[0].startswith("DCGM_") and r[1]["gpu"] == "1"]
        assert value(rows, "gpu_exporter_gpu_up", gpu="1") == 0
        assert collector.health()[0]
        rows = scrape(collector)  # still failing: still absent, exporter still healthy
        assert not series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="1")
        fake_nvml.clear_failures()
        rows = scrape(collector)
        assert series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="1")
        assert value(rows, "gpu_exporter_gpu_up", gpu="1") == 1
    finally:
        backend.close()


def test_transient_field_error_skips_only_that_sample(fake_nvml: FakeNvml) -> None:
    fake_nvml.fail("nvmlDeviceGetClockInfo", pynvml.NVML_ERROR_TIMEOUT, gpu=0, times=2)
    collector, backend = collector_for(fake_nvml)
    try:
        rows = scrape(collector)
        assert not series(rows, "DCGM_FI_DEV_SM_CLOCK", gpu="0")
        assert series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
        rows = scrape(collector)
        assert series(rows, "DCGM_FI_DEV_SM_CLOCK", gpu="0")  # not cached as unsupported
    finally:
        backend.close()


def test_driver_not_loaded_at_start_gives_503_then_recovers(fake_nvml: FakeNvml) -> None:
    fake_nvml.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    backend = NvmlBackend(pynvml)
    with pytest.raises(BackendUnavailable, match="Driver Not Loaded"):
        backend.open()
    collector = Collector(backend, load_counters(None), CollectorOptions())
    rows = scrape(collector)
    ok, reason = collector.health()
    assert not ok and "Driver Not Loaded" in reason
    assert not [r for r in rows if r[0].startswith("DCGM_")]
    assert value(rows, "gpu_exporter_backend_up", backend="nvml") == 0
    fake_nvml.init_error = None
    rows = scrape(collector)
    assert collector.health() == (True, "OK")
    assert series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
    backend.close()


def test_library_missing_is_a_clear_startup_error(fake_nvml: FakeNvml) -> None:
    fake_nvml.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(NvmlMissing, match=r"libnvidia-ml\.so\.1 not found"):
        NvmlBackend(pynvml).open()


def test_nvml_going_away_mid_run(fake_nvml: FakeNvml) -> None:
    collector, backend = collector_for(fake_nvml)
    try:
        assert series(scrape(collector), "DCGM_FI_DEV_GPU_TEMP")
        fake_nvml.fail("*", pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
        rows = scrape(collector)
        assert not [r for r in rows if r[0].startswith("DCGM_")]
        assert not collector.health()[0]
        fake_nvml.clear_failures()
        assert series(scrape(collector), "DCGM_FI_DEV_GPU_TEMP")
        assert collector.health()[0]
    finally:
        backend.close()


def test_mig_instances_with_profiles_and_per_instance_memory(fake_nvml: FakeNvml) -> None:
    gpu0 = fake_nvml.gpus[0]
    big = gpu0.add_mig("3g.40gb", gpu_instance_id=2, compute_instance_id=0, index=0, used=1024 * MIB)
    gpu0.add_mig("3g.40gb", gpu_instance_id=2, compute_instance_id=1, index=1, used=1024 * MIB)
    small = gpu0.add_mig("1g.10gb", gpu_instance_id=9, index=3)
    collector, backend = collector_for(fake_nvml)
    try:
        rows = scrape(collector)
        entities = {e.key: e for e in backend.entities("f")}
    finally:
        backend.close()
    assert set(entities) == {(0, 2), (0, 9), (1, None)}
    assert len(entities[(0, 2)].mig_uuids) == 2 and big.uuid in entities[(0, 2)].mig_uuids
    assert entities[(0, 9)].mig_uuids == (small.uuid,)
    temps = series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
    assert sorted((r[1]["GPU_I_ID"], r[1]["GPU_I_PROFILE"]) for r in temps) == [("2", "3g.40gb"), ("9", "1g.10gb")]
    assert {r[1]["UUID"] for r in temps} == {gpu0.uuid}
    assert value(rows, "DCGM_FI_DEV_FB_USED", gpu="0", GPU_I_ID="2") == 1024
    assert value(rows, "DCGM_FI_DEV_FB_TOTAL", gpu="0", GPU_I_ID="2") == 40320
    assert not series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")  # NOT_SUPPORTED under MIG
    assert series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="1")


def test_xid_events_become_the_xid_series(fake_nvml: FakeNvml) -> None:
    gpu0 = fake_nvml.gpus[0]
    gpu0.add_mig("3g.40gb", gpu_instance_id=2, index=0)
    collector, backend = collector_for(fake_nvml)
    try:
        scrape(collector)  # first collection enumerates GPUs and starts the event thread
        assert fake_nvml.wait_for_event_registration(1, timeout=5)
        assert fake_nvml.wait_for_event_registration(0, timeout=5)
        fake_nvml.inject_xid(1, 48)
        fake_nvml.inject_xid(0, 94, gi=2, ci=0)

        def both_seen() -> list | None:
            rows = scrape(collector)
            return rows if len(series(rows, "DCGM_FI_DEV_XID_ERRORS")) == 2 else None

        rows = wait_until(both_seen, 5, "both XIDs in DCGM_FI_DEV_XID_ERRORS")
    finally:
        collector.stop()
        backend.close()
    xid1 = series(rows, "DCGM_FI_DEV_XID_ERRORS", gpu="1")[0]
    assert xid1[2] == 48 and xid1[1]["err_code"] == "48" and xid1[1]["err_msg"] == "Double Bit ECC Error"
    xid0 = series(rows, "DCGM_FI_DEV_XID_ERRORS", gpu="0", GPU_I_ID="2")[0]
    assert xid0[2] == 94 and xid0[1]["err_msg"] == "Contained ECC error"
    assert value(rows, "gpu_exporter_xid_events_total") == 2


@pytest.mark.parametrize(("code", "kind"), [
    (pynvml.NVML_ERROR_NOT_SUPPORTED, FieldNotSupported),
    (pynvml.NVML_ERROR_NO_PERMISSION, FieldNotSupported),
    (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, FieldNotSupported),
    (pynvml.NVML_ERROR_GPU_IS_LOST, DeviceLost),
    (pynvml.NVML_ERROR_UNKNOWN, DeviceLost),
    (pynvml.NVML_ERROR_RESET_REQUIRED, DeviceLost),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, BackendUnavailable),
    (pynvml.NVML_ERROR_UNINITIALIZED, BackendUnavailable),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, BackendUnavailable),
    (pynvml.NVML_ERROR_TIMEOUT, FieldUnavailable),
    (pynvml.NVML_ERROR_NO_DATA, FieldUnavailable),
])
def test_error_translation_uses_the_real_error_classes(code: int, kind: type) -> None:
    error = pynvml.NVMLError(code)
    assert type(error).__name__.startswith("NVMLError_")
    assert isinstance(translate(error), kind)


def test_every_field_in_the_table_reads_or_is_reported_unsupported(fake_nvml: FakeNvml) -> None:
    from exporter.fields.counters import parse_counters
    from exporter.fields.table import FIELDS

    csv = "\n".join(f"{f.name}, {f.kind}, {f.help}" for f in FIELDS)
    ull = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    fake_nvml.gpus[0].fields = {pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (ull, 7),
                                pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL: (ull, 123_456_789)}
    fake_nvml.gpus[0].remapped_rows = (3, 1, 1, 0)  # correctable, uncorrectable, pending, failure
    fake_nvml.gpus[0].clocks_event_reasons = 0x4 | 0x20  # SW power cap + SW thermal slowdown
    fake_nvml.gpus[0].power_limit_mw = 350_500
    fake_nvml.gpus[0].ecc_errors = {(pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC,
                                     pynvml.NVML_MEMORY_LOCATION_L2_CACHE): 4}
    fake_nvml.gpus[0].fields[pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS] = (ull, 11)
    fake_nvml.gpus[0].compute_mode = pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    fake_nvml.gpus[0].ecc_mode = (pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_DISABLED)
    backend = NvmlBackend(pynvml)
    backend.open()
    collector = Collector(backend, parse_counters(csv, "all.csv"), CollectorOptions())
    try:
        rows = scrape(collector)
    finally:
        backend.close()
    assert collector.health() == (True, "OK")
    labels = series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0][1]
    assert labels["DCGM_FI_DEV_BRAND"] == "NVIDIA"
    assert labels["DCGM_FI_DEV_SERIAL"] == fake_nvml.gpus[0].serial
    assert labels["DCGM_FI_NVML_VERSION"] == fake_nvml.nvml_version
    gpu0 = fake_nvml.gpus[0]
    assert (labels["DCGM_FI_DEV_NAME"], labels["DCGM_FI_DEV_UUID"], labels["DCGM_FI_DEV_PCI_BUSID"]) == (
        gpu0.name, gpu0.uuid, gpu0.pci_bus_id)
    assert value(rows, "DCGM_FI_DEV_PCI_COMBINED_ID", gpu="0") == gpu0.pci_device_id
    assert value(rows, "DCGM_FI_DEV_PCI_SUBSYS_ID", gpu="0") == gpu0.pci_subsystem_id
    emitted = {r[0] for r in rows if r[0].startswith("DCGM_")}
    unsupported = {r[1]["field"] for r in rows if r[0] == "gpu_exporter_field_supported" and r[2] == 0
                   and r[1]["gpu"] == "0"}
    as_labels = {f.name for f in FIELDS if f.is_label and f.name in labels}
    assert emitted | as_labels | unsupported | {"DCGM_FI_DEV_XID_ERRORS"} == {f.name for f in FIELDS}
    # what the simulated H100 supports must come out
    for name in ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_ROW_REMAP_FAILURE"):
        assert name in emitted
    assert "DCGM_FI_DEV_FAN_SPEED" in unsupported  # the simulated SXM board has no fan NVML can read
    # each newer reader goes through its NVML call and conversion
    assert value(rows, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="0") == 0x24
    assert value(rows, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="1") == 1  # GPU idle
    assert value(rows, "DCGM_FI_DEV_VIDEO_CLOCK", gpu="0") == 1755
    assert value(rows, "DCGM_FI_DEV_MAX_VIDEO_CLOCK", gpu="0") == 1980
    assert value(rows, "DCGM_FI_DEV_APP_SM_CLOCK", gpu="0") == 1755
    assert value(rows, "DCGM_FI_DEV_SLOWDOWN_TEMP", gpu="0") == 89
    assert value(rows, "DCGM_FI_DEV_SHUTDOWN_TEMP", gpu="0") == 92
    assert value(rows, "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", gpu="0") == 700.0
    assert value(rows, "DCGM_FI_DEV_PCIE_LINK_WIDTH", gpu="0") == 16
    assert value(rows, "DCGM_FI_DEV_PSTATE", gpu="0") == 0
    assert value(rows, "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN", gpu="0") == 200.0
    assert value(rows, "DCGM_FI_DEV_POWER_MGMT_LIMIT", gpu="0") == 350.0  # 350,500 mW: DCGM keeps whole watts
    assert value(rows, "DCGM_FI_DEV_GPU_MAX_OP_TEMP", gpu="0") == 87
    assert value(rows, "DCGM_FI_DEV_MEM_MAX_OP_TEMP", gpu="0") == 95
    assert [value(rows, f"DCGM_FI_DEV_BAR1_{k}", gpu="0") for k in ("TOTAL", "USED", "FREE")] == [131072, 2, 131069]
    assert value(rows, "DCGM_FI_DEV_COMPUTE_MODE", gpu="0") == 2  # NVML's exclusive-process in DCGM's numbering
    assert value(rows, "DCGM_FI_DEV_PERSISTENCE_MODE", gpu="0") == 1
    assert value(rows, "DCGM_FI_DEV_MIG_MODE", gpu="0") == 0
    assert (value(rows, "DCGM_FI_DEV_ECC_CURRENT", gpu="0"), value(rows, "DCGM_FI_DEV_ECC_PENDING", gpu="0")) == (1, 0)
    assert value(rows, "DCGM_FI_DEV_MINOR_NUMBER", gpu="1") == 1
    assert value(rows, "DCGM_FI_DEV_COUNT", gpu="0") == len(fake_nvml.gpus)
    assert value(rows, "DCGM_FI_CUDA_DRIVER_VERSION", gpu="0") == fake_nvml.cuda_version
    assert value(rows, "DCGM_FI_DEV_ECC_SBE_AGG_L2", gpu="0") == 4
    assert value(rows, "DCGM_FI_DEV_ECC_DBE_AGG_L2", gpu="0") == value(rows, "DCGM_FI_DEV_ECC_SBE_VOL_L2", gpu="0") == 0
    assert value(rows, "DCGM_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS", gpu="0") == 11
    assert value(rows, "DCGM_FI_DEV_CUDA_COMPUTE_CAPABILITY", gpu="0") == 9 << 16
    assert value(rows, "DCGM_FI_DEV_FB_USED_PERCENT", gpu="0") == pytest.approx(20480 / (81559 - 567))
    assert [value(rows, f"DCGM_FI_DEV_{name}", gpu="0") for name in (
        "CORRECTABLE_REMAPPED_ROWS", "UNCORRECTABLE_REMAPPED_ROWS", "ROW_REMAP_PENDING", "ROW_REMAP_FAILURE")
    ] == [3, 1, 1, 0]
    # NVML field values decode by their value type
    assert value(rows, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu="0") == 7
    assert value(rows, "DCGM_FI_DEV_THERMAL_VIOLATION", gpu="0") == 123_456_789
    assert not series(rows, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu="1")


def test_clock_event_reasons_on_a_driver_before_the_rename(fake_nvml: FakeNvml) -> None:
    """Drivers before R535 have only nvmlDeviceGetCurrentClocksThrottleReasons; the field still reads."""
    from exporter.fields.table import FIELDS_BY_NAME

    fake_nvml.hide_symbol("nvmlDeviceGetCurrentClocksEventReasons")
    fake_nvml.gpus[0].clocks_event_reasons = 0x8  # HW slowdown
    backend = NvmlBackend(pynvml)
    backend.open()
    try:
        entity = backend.entities("f")[0]
        backend.begin_collection()
        assert backend.read(entity, FIELDS_BY_NAME["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]) == 0x8
    finally:
        backend.close()
    assert fake_nvml.missing_symbols["nvmlDeviceGetCurrentClocksEventReasons"] >= 1



def test_xid_events_counted_in_the_window(fake_nvml: FakeNvml) -> None:
    from exporter.fields.counters import parse_counters

    csv = "DCGM_FI_DEV_XID_ERRORS, gauge, last XID\nDCGM_EXP_XID_ERRORS_COUNT, counter, XIDs in the window\n"
    backend = NvmlBackend(pynvml)
    backend.open()
    collector = Collector(backend, parse_counters(csv, "xid.csv"), CollectorOptions(xid_count_window_ms=120_000))
    try:
        scrape(collector)
        assert fake_nvml.wait_for_event_registration(0, timeout=5)
        assert fake_nvml.wait_for_event_registration(1, timeout=5)
        for gpu, xid in ((0, 79), (0, 79), (1, 48)):
            fake_nvml.inject_xid(gpu, xid)

        def counted_all() -> tuple[list, dict[tuple[str, str | None], float]] | None:
            rows = scrape(collector)
            counted = {(r[1]["gpu"], r[1].get("xid")): r[2] for r in series(rows, "DCGM_EXP_XID_ERRORS_COUNT")}
            return (rows, counted) if sum(counted.values()) >= 3 else None

        rows, counted = wait_until(counted_all, 5, "three XIDs counted")
    finally:
        collector.stop()
        backend.close()
    assert counted == {("0", "79"): 2, ("1", "48"): 1}
    assert {r[1]["window_size_in_ms"] for r in series(rows, "DCGM_EXP_XID_ERRORS_COUNT")} == {"120000"}
