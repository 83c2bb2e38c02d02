"""The simulated libnvidia-ml behaves like the C library when driven through the real pynvml wrappers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pynvml
import pytest

from tests import fakenvml
from tests.fakenvml import (
    MIB,
    NO_ID,
    FakeGpu,
    FakeGridFeature,
    FakeNvml,
    FakeProcess,
    FakeProcessSample,
    address_of,
    install_fake_nvml,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.unit

fake_nvml = fakenvml.fake_nvml  # re-exported fixture (an import would trip ruff's F811)


@pytest.fixture
def nvml(fake_nvml: FakeNvml) -> Iterator[FakeNvml]:
    """The default fake, initialised through pynvml and shut down afterwards."""
    pynvml.nvmlInit()
    yield fake_nvml
    while fake_nvml.init_count:
        pynvml.nvmlShutdown()


def handle(index: int = 0) -> pynvml.c_nvmlDevice_t:
    """The pynvml handle of GPU ``index``."""
    return pynvml.nvmlDeviceGetHandleByIndex(index)


# --------------------------------------------------------------------------- lifecycle


def test_calls_before_init_raise_uninitialized(fake_nvml: FakeNvml) -> None:
    assert pynvml.nvmlLib is None
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_init_shutdown_reference_counting(fake_nvml: FakeNvml) -> None:
    pynvml.nvmlInit()
    pynvml.nvmlInit()
    assert fake_nvml.init_count == 2
    assert pynvml._nvmlLib_refcount == 2
    pynvml.nvmlShutdown()
    assert pynvml.nvmlDeviceGetCount() == 2
    pynvml.nvmlShutdown()
    assert (fake_nvml.init_count, pynvml._nvmlLib_refcount) == (0, 0)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()
    pynvml.nvmlInit()  # re-init after shutdown works, handles stay valid
    assert pynvml.nvmlDeviceGetUUID(handle(1)) == fake_nvml.gpus[1].uuid
    pynvml.nvmlShutdown()


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVMLError_DriverNotLoaded),
        (pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVMLError_NoPermission),
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVMLError_LibraryNotFound),
    ],
)
def test_init_failure(fake_nvml: FakeNvml, code: int, error: type[pynvml.NVMLError]) -> None:
    fake_nvml.init_error = code
    with pytest.raises(error) as info:
        pynvml.nvmlInit()
    assert isinstance(info.value, pynvml.NVMLError)
    assert fake_nvml.init_count == 0
    assert pynvml._nvmlLib_refcount == 0
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        assert pynvml.nvmlLib is None
        assert fake_nvml.calls["nvmlInitWithFlags"] == 0
    fake_nvml.init_error = None
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 2
    pynvml.nvmlShutdown()


def test_uninstall_restores_pynvml() -> None:
    sentinel = object()
    pynvml._nvmlGetFunctionPointer_cache["nvmlSentinel"] = sentinel
    before = (pynvml.nvmlLib, pynvml._nvmlLib_refcount, pynvml._LoadNvmlLibrary)
    before_cache = dict(pynvml._nvmlGetFunctionPointer_cache)
    before_errors = dict(pynvml.NVMLError._errcode_to_string)
    try:
        fake = FakeNvml(1)
        with install_fake_nvml(fake):
            assert "nvmlSentinel" not in pynvml._nvmlGetFunctionPointer_cache
            pynvml.nvmlInit()
            assert pynvml.nvmlLib is fake.lib
            assert "nvmlInitWithFlags" in pynvml._nvmlGetFunctionPointer_cache
            assert str(pynvml.NVMLError(12345)).startswith("Unknown Error")  # goes through nvmlErrorString
            assert fake.calls["nvmlErrorString"] == 1
        assert (pynvml.nvmlLib, pynvml._nvmlLib_refcount, pynvml._LoadNvmlLibrary) == before
        assert pynvml._nvmlGetFunctionPointer_cache == before_cache
        assert pynvml.NVMLError._errcode_to_string == before_errors
    finally:
        pynvml._nvmlGetFunctionPointer_cache.pop("nvmlSentinel", None)


def test_fixture_installs_two_h100s(fake_nvml: FakeNvml) -> None:
    assert [g.index for g in fake_nvml.gpus] == [0, 1]
    assert pynvml._LoadNvmlLibrary is not None
    assert all(g.name == "NVIDIA H100 80GB HBM3" for g in fake_nvml.gpus)
    assert len({g.uuid for g in fake_nvml.gpus}) == 2


def test_gpu_positions_must_match_indices() -> None:
    with pytest.raises(ValueError, match="position 0"):
        FakeNvml([FakeGpu(index=1)])


# --------------------------------------------------------------------------- devices and identity


def test_count_and_handles(nvml: FakeNvml) -> None:
    assert pynvml.nvmlDeviceGetCount() == 2
    h0, h1 = handle(0), handle(1)
    assert address_of(h0) != address_of(h1)
    assert address_of(handle(0)) == address_of(h0) == nvml.gpus[0].handle_address
    assert [pynvml.nvmlDeviceGetIndex(h) for h in (h0, h1)] == [0, 1]
    assert nvml.device_for_handle(h1) is nvml.gpus[1]
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID(nvml.gpus[1].uuid)
    assert address_of(by_uuid) == address_of(h1)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        handle(2)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetPowerUsage(pynvml.c_nvmlDevice_t())  # NULL handle


def test_identity_strings_and_pci(nvml: FakeNvml) -> None:
    h = handle(1)
    gpu = nvml.gpus[1]
    uuid = pynvml.nvmlDeviceGetUUID(h)
    assert uuid == gpu.uuid and uuid.startswith("GPU-") and isinstance(uuid, str)
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert pynvml.nvmlDeviceGetSerial(h) == gpu.serial
    assert pynvml.nvmlDeviceGetVbiosVersion(h) == "96.00.74.00.0F"
    assert pynvml.nvmlDeviceGetBrand(h) == pynvml.NVML_BRAND_NVIDIA
    assert pynvml.nvmlDeviceGetMinorNumber(h) == 1
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    assert pci.busId == "00000000:2A:00.0" == gpu.pci_bus_id  # pynvml structs decode char arrays
    assert pci.busIdLegacy == "0000:2A:00.0"
    assert (pci.domain, pci.bus, pci.device) == (0, 0x2A, 0)
    assert pci.pciDeviceId == 0x233010DE
    assert pynvml.nvmlSystemGetDriverVersion() == "550.90.07"
    assert pynvml.nvmlSystemGetNVMLVersion() == "12.550.90.07"
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 12040


def test_custom_gpu_model() -> None:
    gpu = FakeGpu(index=0, name="NVIDIA A100-SXM4-40GB", pci_bus_id="00000001:C1:00.0", serial=None)
    with install_fake_nvml(FakeNvml([gpu])):
        pynvml.nvmlInit()
        h = handle(0)
        assert pynvml.nvmlDeviceGetName(h) == "NVIDIA A100-SXM4-40GB"
        pci = pynvml.nvmlDeviceGetPciInfo_v3(h)
        assert (pci.domain, pci.bus, pci.busId) == (1, 0xC1, "00000001:C1:00.0")
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetSerial(h)
        pynvml.nvmlShutdown()


# --------------------------------------------------------------------------- telemetry


def test_scalar_telemetry(nvml: FakeNvml) -> None:
    gpu = nvml.gpus[0]
    gpu.power_mw, gpu.energy_mj, gpu.pcie_replay_counter = 301_250, 9_876_543_210, 3
    gpu.gpu_util, gpu.mem_util, gpu.enc_util, gpu.dec_util = 88, 55, 4, 7
    h = handle(0)
    assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1980
    assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM) == 2619
    assert pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) == 1980
    assert pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 36
    assert pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU) == 36
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 301_250
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 700_000
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) == 9_876_543_210  # 64-bit counter
    assert pynvml.nvmlDeviceGetPcieReplayCounter(h) == 3
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    assert (util.gpu, util.memory) == (88, 55)
    assert pynvml.nvmlDeviceGetEncoderUtilization(h) == [4, 167_000]
    assert pynvml.nvmlDeviceGetDecoderUtilization(h) == [7, 167_000]
    assert pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES) == 12_345
    assert pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES) == 67_890


def test_none_attribute_means_not_supported(nvml: FakeNvml) -> None:
    nvml.gpus[0].enc_util = None
    nvml.gpus[0].power_mw = None
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetEncoderUtilization(handle(0))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerUsage(handle(0))
    assert pynvml.nvmlDeviceGetPowerUsage(handle(1)) == 118_512


def test_memory_info_v1_and_v2(nvml: FakeNvml) -> None:
    mem = nvml.gpus[0].memory
    assert mem is not None
    mem.total, mem.reserved, mem.used = 80 * 1024 * MIB, 512 * MIB, 10 * 1024 * MIB
    v2 = pynvml.nvmlDeviceGetMemoryInfo(handle(0), version=pynvml.nvmlMemory_v2)
    assert (v2.total, v2.reserved, v2.used) == (80 * 1024 * MIB, 512 * MIB, 10 * 1024 * MIB)
    assert v2.free == v2.total - v2.reserved - v2.used
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle(0))
    assert (v1.total, v1.free) == (v2.total, v2.free)
    assert v1.used == v2.used + v2.reserved  # the v1 call folds reserved memory into "used"
    assert nvml.calls["nvmlDeviceGetMemoryInfo_v2"] == nvml.calls["nvmlDeviceGetMemoryInfo"] == 1
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetMemoryInfo(handle(0), version=0x01000028)


def test_field_values(nvml: FakeNvml) -> None:
    gpu = nvml.gpus[0]
    gpu.nvlink_tx_kib = [10, 20, 30]
    gpu.nvlink_rx_kib = [1, 2, 3]
    gpu.fields[pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL] = (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 2)
    gpu.fields[(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, NO_ID)] = (pynvml.NVML_VALUE_TYPE_DOUBLE, 1.5)
    gpu.field_errors[pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL] = pynvml.NVML_ERROR_NO_PERMISSION
    values = pynvml.nvmlDeviceGetFieldValues(
        handle(0),
        [
            pynvml.NVML_FI_DEV_MEMORY_TEMP,
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NO_ID),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NO_ID),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 1),
            pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
            pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, NO_ID),
            pynvml.NVML_FI_DEV_REMAPPED_UNC,
            9999,
        ],
    )
    mem_temp, tx, rx, tx_link1, dbe, sbe, raw_tx, unc, unknown = values
    assert (mem_temp.nvmlReturn, mem_temp.valueType, mem_temp.value.uiVal) == (
        pynvml.NVML_SUCCESS,
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
        44,
    )
    assert mem_temp.timestamp > 0
    assert (tx.scopeId, tx.valueType, tx.value.ullVal) == (NO_ID, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 60)
    assert rx.value.ullVal == 6
    assert tx_link1.value.ullVal == 20
    assert dbe.value.ullVal == 2
    assert sbe.nvmlReturn == pynvml.NVML_ERROR_NO_PERMISSION
    assert raw_tx.value.dVal == 1.5
    assert (unc.nvmlReturn, unc.value.uiVal) == (pynvml.NVML_SUCCESS, 0)
    assert unknown.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    gpu.memory_temp_c = None
    (mem_temp,) = pynvml.nvmlDeviceGetFieldValues(handle(0), [pynvml.NVML_FI_DEV_MEMORY_TEMP])
    assert mem_temp.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_remapped_rows(nvml: FakeNvml) -> None:
    nvml.gpus[1].remapped_rows = (3, 1, 1, 0)
    assert pynvml.nvmlDeviceGetRemappedRows(handle(0)) == (0, 0, 0, 0)
    assert pynvml.nvmlDeviceGetRemappedRows(handle(1)) == (3, 1, 1, 0)
    nvml.gpus[1].remapped_rows = None
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRemappedRows(handle(1))


def test_grid_licensable_features(nvml: FakeNvml) -> None:
    info = pynvml.nvmlDeviceGetGridLicensableFeatures(handle(0))
    assert (info.isGridLicenseSupported, info.licensableFeaturesCount) == (0, 0)
    nvml.gpus[0].grid_license_supported = True
    nvml.gpus[0].grid_features = [FakeGridFeature(license_info="licensed until 2030")]
    info = pynvml.nvmlDeviceGetGridLicensableFeatures_v4(handle(0))
    assert (info.isGridLicenseSupported, info.licensableFeaturesCount) == (1, 1)
    feature = info.gridLicensableFeatures[0]
    assert feature.featureCode == pynvml.NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE
    assert (feature.featureState, feature.featureEnabled) == (1, 1)
    assert feature.licenseInfo == "licensed until 2030"


# --------------------------------------------------------------------------- error injection and counters


def test_failure_for_all_gpus_raises_error_class(nvml: FakeNvml) -> None:
    nvml.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED)
    for i in (0, 1):
        with pytest.raises(pynvml.NVMLError_NotSupported) as info:
            pynvml.nvmlDeviceGetPowerUsage(handle(i))
        assert isinstance(info.value, pynvml.NVMLError)
        assert info.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert pynvml.nvmlDeviceGetTemperature(handle(0), 0) == 36
    nvml.clear_failures()
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) == 118_512


def test_failure_for_one_gpu(nvml: FakeNvml) -> None:
    mig = nvml.gpus[1].add_mig("3g.40gb")
    nvml.fail("nvmlDeviceGetUUID", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=1)
    assert pynvml.nvmlDeviceGetUUID(handle(0)) == nvml.gpus[0].uuid
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUUID(handle(1))
    mig_handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle(1), mig.index)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):  # MIG devices share their parent's fate
        pynvml.nvmlDeviceGetUUID(mig_handle)


def test_wildcard_and_counted_failures(nvml: FakeNvml) -> None:
    h1 = handle(1)
    nvml.fail("*", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=1)
    for call in (pynvml.nvmlDeviceGetPowerUsage, pynvml.nvmlDeviceGetName, pynvml.nvmlDeviceGetMemoryInfo):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call(h1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        handle(1)
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) == 118_512
    assert pynvml.nvmlDeviceGetCount() == 2
    nvml.clear_failures()
    nvml.fail("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_UNKNOWN, gpu=0, times=2)
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_Unknown):
            pynvml.nvmlDeviceGetTemperature(handle(0), 0)
    assert pynvml.nvmlDeviceGetTemperature(handle(0), 0) == 36


def test_call_counters(nvml: FakeNvml) -> None:
    nvml.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=0)
    for _ in range(3):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetPowerUsage(handle(0))
    pynvml.nvmlDeviceGetPowerUsage(handle(1))
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 4
    assert nvml.gpu_calls[("nvmlDeviceGetPowerUsage", 0)] == 3
    assert nvml.gpu_calls[("nvmlDeviceGetPowerUsage", 1)] == 1
    assert nvml.calls["nvmlDeviceGetHandleByIndex_v2"] == 4
    assert nvml.calls["nvmlInitWithFlags"] == 1


def test_missing_symbols_raise_function_not_found(nvml: FakeNvml) -> None:
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetCpuAffinity(handle(0), 4)  # not simulated
    assert nvml.missing_symbols["nvmlDeviceGetCpuAffinity"] == 1
    assert pynvml.nvmlDeviceGetTemperatureV(handle(0), 0) == 36
    nvml.hide_symbol("nvmlDeviceGetTemperatureV")  # an older driver
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetTemperatureV(handle(0), 0)
    assert pynvml.nvmlDeviceGetTemperature(handle(0), 0) == 36


# --------------------------------------------------------------------------- MIG


def test_mig_enumeration(nvml: FakeNvml) -> None:
    gpu = nvml.gpus[0]
    assert pynvml.nvmlDeviceGetMigMode(handle(0)) == [0, 0]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle(0)) == 0
    big = gpu.add_mig("3g.40gb", gpu_instance_id=2, index=0, used=1024 * MIB)
    small = gpu.add_mig("1g.10gb", gpu_instance_id=9, compute_instance_id=0, index=3)
    h = handle(0)
    assert pynvml.nvmlDeviceGetMigMode(h) == [pynvml.NVML_DEVICE_MIG_ENABLE] * 2
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    found = {}
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            found[i] = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except pynvml.NVMLError_NotFound:
            continue
    assert sorted(found) == [0, 3]
    mh = found[0]
    assert address_of(mh) not in (address_of(handle(0)), address_of(handle(1)))
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mh).value == 1
    assert pynvml.nvmlDeviceGetUUID(mh) == big.uuid and big.uuid.startswith("MIG-")
    assert pynvml.nvmlDeviceGetName(mh) == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert pynvml.nvmlDeviceGetGpuInstanceId(mh) == 2
    assert pynvml.nvmlDeviceGetGpuInstanceId(found[3]) == 9
    assert pynvml.nvmlDeviceGetComputeInstanceId(found[3]) == small.compute_instance_id == 0
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mh)
    assert address_of(parent) == address_of(h)
    attrs = pynvml.nvmlDeviceGetAttributes(mh)
    assert (attrs.gpuInstanceSliceCount, attrs.memorySizeMB, attrs.multiprocessorCount) == (3, 40320, 60)
    mem = pynvml.nvmlDeviceGetMemoryInfo(mh, version=pynvml.nvmlMemory_v2)
    assert (mem.total, mem.used) == (40320 * MIB, 1024 * MIB)
    assert address_of(pynvml.nvmlDeviceGetHandleByUUID(small.uuid)) == address_of(found[3])
    assert nvml.device_for_handle(mh) is big and nvml.gpu_for_handle(mh) is gpu


def test_mig_handle_restrictions(nvml: FakeNvml) -> None:
    nvml.gpus[0].add_mig("7g.80gb")
    mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle(0), 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerUsage(mh)  # GPU-level telemetry is not available per MIG device
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(handle(0))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetAttributes(handle(0))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle(0))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # MIG disabled on GPU 1
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle(1), 0)
    nvml.gpus[1].mig_capable = False
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(handle(1))
    nvml.gpus[0].migs.clear()  # a destroyed instance invalidates its handle
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetUUID(mh)


# --------------------------------------------------------------------------- processes


def test_compute_running_processes(nvml: FakeNvml) -> None:
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(handle(0)) == []
    gpu = nvml.gpus[0]
    mig = gpu.add_mig("3g.40gb", gpu_instance_id=1, compute_instance_id=0)
    gpu.processes = [
        FakeProcess(pid=4242, used_memory=3 * 1024 * MIB, gpu_instance_id=1, compute_instance_id=0),
        FakeProcess(pid=4343, used_memory=512 * MIB, gpu_instance_id=5, compute_instance_id=0),
    ]
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses_v3(handle(0))
    assert [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in procs] == [
        (4242, 3 * 1024 * MIB, 1, 0),
        (4343, 512 * MIB, 5, 0),
    ]
    mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle(0), mig.index)
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(mh)] == [4242]
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1 + 2 + 2  # size probe, then fill


def test_process_utilization(nvml: FakeNvml) -> None:
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(handle(0), 0)
    nvml.gpus[0].process_samples = [
        FakeProcessSample(pid=10, timestamp_us=1_000, sm=50, mem=20, enc=1, dec=2),
        FakeProcessSample(pid=11, timestamp_us=2_000, sm=30, mem=10),
    ]
    samples = pynvml.nvmlDeviceGetProcessUtilization(handle(0), 0)
    assert [(s.pid, s.timeStamp, s.smUtil, s.memUtil, s.encUtil, s.decUtil) for s in samples] == [
        (10, 1_000, 50, 20, 1, 2),
        (11, 2_000, 30, 10, 0, 0),
    ]
    assert [s.pid for s in pynvml.nvmlDeviceGetProcessUtilization(handle(0), 1_500)] == [11]
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(handle(0), 2_000)


def test_graphics_and_mps_process_lists(nvml: FakeNvml) -> None:
    nvml.gpus[0].processes = [
        FakeProcess(pid=10, used_memory=MIB),
        FakeProcess(pid=11, used_memory=2 * MIB, kind="graphics"),
        FakeProcess(pid=12, used_memory=None, kind="mps"),
    ]
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle(0))] == [10]
    assert [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle(0))] == [
        (11, 2 * MIB)]
    # NVML_VALUE_NOT_AVAILABLE becomes None in pynvml
    assert [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetMPSComputeRunningProcesses(handle(0))] == [
        (12, None)]


def test_process_utilization_not_supported_on_mig_enabled_gpu(nvml: FakeNvml) -> None:
    nvml.gpus[0].add_mig("1g.10gb")
    nvml.gpus[0].process_samples = [FakeProcessSample(pid=10, timestamp_us=1_000, sm=50)]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetProcessUtilization(handle(0), 0)


# --------------------------------------------------------------------------- events


def test_xid_events(nvml: FakeNvml) -> None:
    event_set = pynvml.nvmlEventSetCreate()
    h1 = handle(1)
    assert pynvml.nvmlDeviceGetSupportedEventTypes(h1) & pynvml.nvmlEventTypeXidCriticalError
    assert nvml.inject_xid(1, 13) == 0  # nobody listens yet: the event is lost
    pynvml.nvmlDeviceRegisterEvents(h1, pynvml.nvmlEventTypeXidCriticalError, event_set)
    assert nvml.wait_for_event_registration(1, timeout=0)
    start = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 50)
    assert time.monotonic() - start >= 0.045
    assert nvml.inject_xid(1, 79, gi=2, ci=0) == 1
    assert nvml.inject_xid(0, 48) == 0  # GPU 0 is not registered
    data = pynvml.nvmlEventSetWait(event_set, 1000)
    assert address_of(data.device) == address_of(h1)
    assert data.eventType == pynvml.nvmlEventTypeXidCriticalError
    assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (79, 2, 0)
    nvml.inject_xid(1, 31)
    data = pynvml.nvmlEventSetWait_v2(event_set, 0)
    assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (31, NO_ID, NO_ID)
    pynvml.nvmlEventSetFree(event_set)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetWait_v2(event_set, 0)


def test_event_wait_wakes_on_injection_without_blocking_other_calls(nvml: FakeNvml) -> None:
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle(0), pynvml.nvmlEventTypeXidCriticalError, event_set)
    received: list[int] = []
    waiter = threading.Thread(target=lambda: received.append(pynvml.nvmlEventSetWait_v2(event_set, 5000).eventData))
    waiter.start()
    # The call is counted under the model lock, which the waiter holds until its wait lets it go: once counted, a
    # call from this thread gets the lock only while the waiter waits.
    wait_until(lambda: nvml.calls["nvmlEventSetWait_v2"] == 1, 5, "the waiter inside nvmlEventSetWait_v2")
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) == 118_512
    assert waiter.is_alive() and received == []  # answered while the waiter still waits: it holds no lock
    nvml.inject_xid(0, 94)
    waiter.join(timeout=2)
    assert not waiter.is_alive()
    assert received == [94]
    pynvml.nvmlEventSetFree(event_set)


def test_register_unsupported_event_type(nvml: FakeNvml) -> None:
    event_set = pynvml.nvmlEventSetCreate()
    nvml.gpus[0].supported_events = pynvml.nvmlEventTypePState
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(handle(0), pynvml.nvmlEventTypeXidCriticalError, event_set)
    assert not nvml.wait_for_event_registration(0, timeout=0.01)
    pynvml.nvmlEventSetFree(event_set)


# --------------------------------------------------------------------------- GPM


def _metrics_get(first: object, second: object, *metric_ids: int) -> list[tuple[int, float]]:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(metric_ids)
    request.sample1, request.sample2 = first, second
    for i, metric_id in enumerate(metric_ids):
        request.metrics[i].metricId = metric_id
    result = pynvml.nvmlGpmMetricsGet(request)
    return [(result.metrics[i].nvmlReturn, result.metrics[i].value) for i in range(len(metric_ids))]


def test_gpm_unsupported_by_default_and_computed_from_recorded_sample_pairs(nvml: FakeNvml) -> None:
    assert pynvml.nvmlGpmQueryDeviceSupport(handle(0)).isSupportedDevice == 0
    sample = pynvml.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(handle(0), sample)
    now = [100.0]
    nvml.clock = lambda: now[0]
    gpu = nvml.gpus[0]
    gpu.gpm_supported = True
    occupancy, tx = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC
    gpu.gpm_run(10.0, {occupancy: 50.0, tx: 300.0})
    assert pynvml.nvmlGpmQueryDeviceSupport(handle(0)).isSupportedDevice == 1
    second = pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handle(0), sample)
    gpu.gpm_run(2.0, {occupancy: 37.5, tx: 1000.0})  # the window between the two samples
    now[0] += 2.0
    pynvml.nvmlGpmSampleGet(handle(0), second)
    gpu.gpm_run(1.0, {occupancy: 100.0})  # after the second sample: not in this pair
    result = _metrics_get(sample, second, occupancy, tx, pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL)
    assert result[0] == (pynvml.NVML_SUCCESS, 37.5)
    assert result[1] == (pynvml.NVML_SUCCESS, 1000.0)  # MiB/s
    assert result[2][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # the older sample goes first
        _metrics_get(second, sample, occupancy)
    assert nvml.gpm_samples_allocated == 2
    pynvml.nvmlGpmSampleFree(sample)
    pynvml.nvmlGpmSampleFree(second)
    assert nvml.gpm_samples_allocated == 0


def test_gpm_mig_samples_come_from_the_gpu_instance(nvml: FakeNvml) -> None:
    now = [0.0]
    nvml.clock = lambda: now[0]
    gpu = nvml.gpus[0]
    gpu.gpm_supported = True
    mig = gpu.add_mig("3g.40gb", gpu_instance_id=2)
    util = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL
    mig.gpm_counters = {util: 0.0}
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmMigSampleGet(handle(0), 2, first)
    mig.gpm_run(1.0, {util: 80.0})
    gpu.gpm_run(1.0, {util: 10.0})
    now[0] += 1.0
    pynvml.nvmlGpmMigSampleGet(handle(0), 2, second)
    assert _metrics_get(first, second, util) == [(pynvml.NVML_SUCCESS, 80.0)]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # no such GPU instance
        pynvml.nvmlGpmMigSampleGet(handle(0), 9, first)
    pynvml.nvmlGpmSampleFree(first)
    pynvml.nvmlGpmSampleFree(second)
