"""The field table: one row per DCGM field the exporter can produce.

A row says what dcgm-exporter calls the field, its Prometheus type, unit and help text, whether DCGM scopes it
to the physical GPU (copied onto every MIG instance) or to the GPU instance, how the NVML backend reads it,
and the idle value the fake backend reports when a state file does not set it.

NVML readers take a context (see ``exporter.backends.nvml.DeviceContext``) that memoises calls shared by
several rows (memory info, utilisation rates, remapped rows, field values) within one collection, so eight
framebuffer/utilisation rows cost two NVML calls, not eight.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["gauge", "counter", "label"]
Level = Literal["gpu", "instance"]
Value = int | float
NvmlReader = Callable[[Any], Any]

MIB = 1024 * 1024


@dataclass(frozen=True)
class Field:
    name: str
    kind: Kind
    unit: str
    help: str
    level: Level
    idle: Value | str
    nvml: NvmlReader | None
    """None: NVML has no equivalent this exporter reads yet; the field is reported unsupported (omitted)."""

    @property
    def is_label(self) -> bool:
        return self.kind == "label"


def _fb(attr: str) -> NvmlReader:
    return lambda c: getattr(c.memory(), attr) // MIB


def _temperature(c: Any) -> int:
    value = c.temperature()
    if value > 200:  # DCGM discards implausible readings rather than reporting them
        raise c.unavailable("temperature above 200 C discarded")
    return value


def _memory_temp(c: Any) -> int:
    value = c.field_value(c.nv.NVML_FI_DEV_MEMORY_TEMP, as_uint=True)
    if value > 200:
        raise c.unavailable("memory temperature above 200 C discarded")
    return value


ALL_LINKS = 0xFFFFFFFF
NVLINK_LINKS = 18  # DCGM's per-link fields L0-L17


def _nvlink_bandwidth(scope: int, directions: str) -> NvmlReader:
    """DCGM's NVLink rate (``ReadAndCacheNvLinkBandwidth``): the delta of NVML's data KiB counters (``RX``,
    ``TX`` or both, one link or ``ALL_LINKS``) per second since the previous collection, divided by 1000."""

    def read(c: Any) -> int:
        ids = {"RX": c.nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, "TX": c.nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX}
        try:
            kib = sum(c.field_value(ids[d], scope=scope) for d in directions.split("+"))
        except c.nv.NVMLError_InvalidArgument:
            if scope == ALL_LINKS:
                raise
            raise c.not_supported(f"this GPU has no NVLink {scope}") from None
        return int(c.rate(f"nvlink {directions} {scope}", kib) / 1000)

    return read


def _nvlink_errors(link: int, counter: str) -> NvmlReader:
    """DCGM's per-link NVLink error fields: ``nvmlDeviceGetNvLinkErrorCounter`` for the link (R520+)."""

    def read(c: Any) -> int:
        counters = {"CRC_FLIT": c.nv.NVML_NVLINK_ERROR_DL_CRC_FLIT, "CRC_DATA": c.nv.NVML_NVLINK_ERROR_DL_CRC_DATA,
                    "REPLAY": c.nv.NVML_NVLINK_ERROR_DL_REPLAY, "RECOVERY": c.nv.NVML_NVLINK_ERROR_DL_RECOVERY}
        try:
            return c.nv.nvmlDeviceGetNvLinkErrorCounter(c.gpu, link, counters[counter])
        except c.nv.NVMLError_InvalidArgument:
            raise c.not_supported(f"this GPU has no NVLink {link}") from None

    return read


def _ecc_location(errors: str, counter: str, location: str) -> NvmlReader:
    """DCGM's per-location ECC fields: ``nvmlDeviceGetMemoryErrorCounter`` (corrected = SBE, uncorrected = DBE)."""

    def read(c: Any) -> int:
        nv = c.nv
        kinds = {"SBE": nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, "DBE": nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED}
        counters = {"VOL": nv.NVML_VOLATILE_ECC, "AGG": nv.NVML_AGGREGATE_ECC}
        locations = {"L1": nv.NVML_MEMORY_LOCATION_L1_CACHE, "L2": nv.NVML_MEMORY_LOCATION_L2_CACHE,
                     "DEV": nv.NVML_MEMORY_LOCATION_DEVICE_MEMORY, "REG": nv.NVML_MEMORY_LOCATION_REGISTER_FILE,
                     "TEX": nv.NVML_MEMORY_LOCATION_TEXTURE_MEMORY, "SHM": nv.NVML_MEMORY_LOCATION_TEXTURE_SHM,
                     "CBU": nv.NVML_MEMORY_LOCATION_CBU, "SRM": nv.NVML_MEMORY_LOCATION_SRAM}
        return nv.nvmlDeviceGetMemoryErrorCounter(c.gpu, kinds[errors], counters[counter], locations[location])

    return read


def _fb_used_ratio(c: Any) -> float:
    """DCGM: used / (total - reserved), from memory info v2 of the GPU or GPU instance."""
    memory = c.memory()
    usable = memory.total - memory.reserved
    if memory.total == 0 or usable <= 0:
        raise c.unavailable("no usable framebuffer")
    return memory.used / usable


def _vgpu_license(c: Any) -> int:
    features = c.nv.nvmlDeviceGetGridLicensableFeatures(c.gpu)
    if not features.isGridLicenseSupported:
        return 0
    for i in range(features.licensableFeaturesCount):
        feature = features.gridLicensableFeatures[i]
        if feature.featureCode == c.nv.NVML_GRID_LICENSE_FEATURE_CODE_VGPU:
            return 1 if feature.featureState > 0 else 0
    return 0


def _pcie_throughput(counter_name: str) -> NvmlReader:
    """KB/s over the 20 ms the call samples for (started early with the other sampled calls)."""

    def read(c: Any) -> int:
        return c.sampled(counter_name, lambda: c.nv.nvmlDeviceGetPcieThroughput(c.gpu, getattr(c.nv, counter_name)))

    return read


def _gpm_ratio(metric: str) -> NvmlReader:
    """A GPM percentage of this entity's sample pair as DCGM's 0-1 activity ratio."""
    return lambda c: c.gpm(getattr(c.nv, metric), gpu_level=False) / 100.0


def _gpm_bytes_per_second(metric: str) -> NvmlReader:
    """A GPU-level GPM bandwidth in MiB/s as bytes/s (DCGM: "the int64 GPM metrics are bandwidth values in MiB")."""
    return lambda c: int(c.gpm(getattr(c.nv, metric), gpu_level=True) * MIB)


def _violation(field_name: str) -> NvmlReader:
    return lambda c: c.field_value(getattr(c.nv, field_name))


def _ecc(field_name: str) -> NvmlReader:
    return lambda c: c.field_value(getattr(c.nv, field_name))


def _retired_sbe(c: Any) -> int:
    cause = c.nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    return len(c.nv.nvmlDeviceGetRetiredPages(c.gpu, cause))


_BRANDS = {0: "Unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "GRID", 5: "GeForce", 6: "Titan", 7: "NVIDIA vApps",
           8: "NVIDIA vPC", 9: "NVIDIA vCS", 10: "NVIDIA vWS", 11: "NVIDIA Cloud Gaming", 12: "Quadro RTX",
           13: "NVIDIA RTX", 14: "NVIDIA", 15: "GeForce RTX", 16: "Titan RTX"}


def _inforom(kind: str) -> NvmlReader:
    return lambda c: _str(c.nv.nvmlDeviceGetInforomVersion(c.gpu, getattr(c.nv, kind)))


def _temperature_threshold(kind: str) -> NvmlReader:
    return lambda c: c.nv.nvmlDeviceGetTemperatureThreshold(c.gpu, getattr(c.nv, kind))


def _bar1(attr: str) -> NvmlReader:
    """BAR1 memory of the GPU, or of the GPU instance through its MIG device handle (as DCGM reads it)."""
    return lambda c: getattr(c.nv.nvmlDeviceGetBAR1MemoryInfo(c.dev), attr) // MIB


def _compute_mode(c: Any) -> int:
    """NVML's compute mode renumbered as DCGM reports it (exclusive-thread was removed from NVML)."""
    mode = c.nv.nvmlDeviceGetComputeMode(c.gpu)
    if mode == c.nv.NVML_COMPUTEMODE_PROHIBITED:
        return 1
    if mode == c.nv.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS:
        return 2
    return mode


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_F = Field
_G: Level = "gpu"
_I: Level = "instance"

FIELDS: tuple[Field, ...] = (
    _F("DCGM_FI_DEV_SM_CLOCK", "gauge", "MHz", "SM clock frequency (in MHz).", _G, 1980,
       lambda c: c.nv.nvmlDeviceGetClockInfo(c.gpu, c.nv.NVML_CLOCK_SM)),
    _F("DCGM_FI_DEV_MEM_CLOCK", "gauge", "MHz", "Memory clock frequency (in MHz).", _G, 2619,
       lambda c: c.nv.nvmlDeviceGetClockInfo(c.gpu, c.nv.NVML_CLOCK_MEM)),
    _F("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "C", "Memory temperature (in C).", _G, 34, _memory_temp),
    _F("DCGM_FI_DEV_GPU_TEMP", "gauge", "C", "GPU temperature (in C).", _G, 31, _temperature),
    _F("DCGM_FI_DEV_POWER_USAGE", "gauge", "W", "Power draw (in W).", _G, 71.5,
       lambda c: c.nv.nvmlDeviceGetPowerUsage(c.gpu) / 1000.0),
    _F("DCGM_FI_DEV_POWER_USAGE_INSTANT", "gauge", "W", "Current instantaneous power usage of the device in Watts.",
       _G, 71.5, lambda c: c.field_value(c.nv.NVML_FI_DEV_POWER_INSTANT) / 1000.0),
    _F("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "mJ", "Total energy consumption since boot (in mJ).", _G,
       0, lambda c: c.nv.nvmlDeviceGetTotalEnergyConsumption(c.gpu)),
    _F("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter", "KB",
       "Total number of bytes transmitted through PCIe TX (in KB) via NVML.", _G, 0,
       _pcie_throughput("NVML_PCIE_UTIL_TX_BYTES")),
    _F("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "counter", "KB",
       "Total number of bytes received through PCIe RX (in KB) via NVML.", _G, 0,
       _pcie_throughput("NVML_PCIE_UTIL_RX_BYTES")),
    _F("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "count", "Total number of PCIe retries.", _G, 0,
       lambda c: c.nv.nvmlDeviceGetPcieReplayCounter(c.gpu)),
    _F("DCGM_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS", "counter", "count", "Total number of PCIe correctable errors.",
       _G, 0, lambda c: c.field_value(c.nv.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS)),
    _F("DCGM_FI_DEV_GPU_UTIL", "gauge", "%", "GPU utilization (in %).", _I, 0, lambda c: c.utilization().gpu),
    _F("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "%", "Memory utilization (in %).", _I, 0,
       lambda c: c.utilization().memory),
    _F("DCGM_FI_DEV_ENC_UTIL", "gauge", "%", "Encoder utilization (in %).", _I, 0,
       lambda c: c.nv.nvmlDeviceGetEncoderUtilization(c.dev)[0]),
    _F("DCGM_FI_DEV_DEC_UTIL", "gauge", "%", "Decoder utilization (in %).", _I, 0,
       lambda c: c.nv.nvmlDeviceGetDecoderUtilization(c.dev)[0]),
    _F("DCGM_FI_DEV_XID_ERRORS", "gauge", "xid", "Value of the last XID error encountered.", _I, 0,
       lambda c: c.last_xid()),
    _F("DCGM_FI_DEV_POWER_VIOLATION", "counter", "ns", "Throttling duration due to power constraints (in ns).",
       _G, 0, _violation("NVML_FI_DEV_PERF_POLICY_POWER")),
    _F("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "ns",
       "Throttling duration due to thermal constraints (in ns).", _G, 0,
       _violation("NVML_FI_DEV_PERF_POLICY_THERMAL")),
    _F("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "counter", "ns",
       "Throttling duration due to sync-boost constraints (in ns).", _G, 0,
       _violation("NVML_FI_DEV_PERF_POLICY_SYNC_BOOST")),
    _F("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "counter", "ns",
       "Throttling duration due to board limit constraints (in ns).", _G, 0,
       _violation("NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT")),
    _F("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "counter", "ns", "Throttling duration due to low utilization (in ns).",
       _G, 0, _violation("NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION")),
    _F("DCGM_FI_DEV_RELIABILITY_VIOLATION", "counter", "ns",
       "Throttling duration due to reliability constraints (in ns).", _G, 0,
       _violation("NVML_FI_DEV_PERF_POLICY_RELIABILITY")),
    _F("DCGM_FI_DEV_FB_TOTAL", "gauge", "MiB", "Framebuffer memory total (in MiB).", _I, 81559, _fb("total")),
    _F("DCGM_FI_DEV_FB_FREE", "gauge", "MiB", "Framebuffer memory free (in MiB).", _I, 80968, _fb("free")),
    _F("DCGM_FI_DEV_FB_USED", "gauge", "MiB", "Framebuffer memory used (in MiB).", _I, 0, _fb("used")),
    _F("DCGM_FI_DEV_FB_RESERVED", "gauge", "MiB", "Framebuffer memory reserved (in MiB).", _I, 591,
       _fb("reserved")),
    _F("DCGM_FI_DEV_FB_USED_PERCENT", "gauge", "ratio", "Ratio of framebuffer used to framebuffer not reserved.",
       _I, 0.0, _fb_used_ratio),
    _F("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "count", "Total number of single-bit volatile ECC errors.", _G,
       0, _ecc("NVML_FI_DEV_ECC_SBE_VOL_TOTAL")),
    _F("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "count", "Total number of double-bit volatile ECC errors.", _G,
       0, _ecc("NVML_FI_DEV_ECC_DBE_VOL_TOTAL")),
    _F("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "count", "Total number of single-bit persistent ECC errors.",
       _G, 0, _ecc("NVML_FI_DEV_ECC_SBE_AGG_TOTAL")),
    _F("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "count", "Total number of double-bit persistent ECC errors.",
       _G, 0, _ecc("NVML_FI_DEV_ECC_DBE_AGG_TOTAL")),
    _F("DCGM_FI_DEV_RETIRED_SBE", "counter", "pages", "Total number of retired pages due to single-bit errors.",
       _G, 0, _retired_sbe),
    _F("DCGM_FI_DEV_RETIRED_DBE", "counter", "pages", "Total number of retired pages due to double-bit errors.",
       _G, 0, _ecc("NVML_FI_DEV_RETIRED_DBE")),
    _F("DCGM_FI_DEV_RETIRED_PENDING", "counter", "pages", "Total number of pages pending retirement.", _G, 0,
       _ecc("NVML_FI_DEV_RETIRED_PENDING")),
    _F("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "count",
       "Total number of NVLink flow-control CRC errors.", _G, 0, _ecc("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")),
    _F("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "count", "Total number of NVLink data CRC errors.",
       _G, 0, _ecc("NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL")),
    _F("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "count", "Total number of NVLink retries.", _G, 0,
       _ecc("NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL")),
    _F("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "count", "Total number of NVLink recovery errors.",
       _G, 0, _ecc("NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")),
    _F("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gauge", "MB/s",
       "Total number of NVLink bandwidth counters for all lanes", _G, 0, _nvlink_bandwidth(ALL_LINKS, "RX+TX")),
    _F("DCGM_FI_DEV_NVLINK_TX_BANDWIDTH_TOTAL", "gauge", "MB/s", "NVLink TX bandwidth over all links (in MB/s).", _G,
       0, _nvlink_bandwidth(ALL_LINKS, "TX")),
    _F("DCGM_FI_DEV_NVLINK_RX_BANDWIDTH_TOTAL", "gauge", "MB/s", "NVLink RX bandwidth over all links (in MB/s).", _G,
       0, _nvlink_bandwidth(ALL_LINKS, "RX")),
    _F("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "0/1", "vGPU License status", _G, 0, _vgpu_license),
    _F("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "rows",
       "Number of remapped rows for uncorrectable errors", _G, 0, lambda c: c.remapped_rows()[1]),
    _F("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "rows", "Number of remapped rows for correctable errors",
       _G, 0, lambda c: c.remapped_rows()[0]),
    _F("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "0/1", "Whether remapping of rows has failed", _G, 0,
       lambda c: c.remapped_rows()[3]),
    _F("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "0/1", "Whether remapping of rows is pending (reset needed)", _G,
       0, lambda c: c.remapped_rows()[2]),
    _F("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "bitmask",
       "Current clock event (throttle) reasons, a bitmask of DCGM_CLOCKS_EVENT_REASON_*.", _G, 0,
       lambda c: c.clock_event_reasons()),
    _F("DCGM_FI_DEV_VIDEO_CLOCK", "gauge", "MHz", "Video encoder/decoder clock (in MHz).", _G, 1755,
       lambda c: c.nv.nvmlDeviceGetClockInfo(c.gpu, c.nv.NVML_CLOCK_VIDEO)),
    _F("DCGM_FI_DEV_APP_SM_CLOCK", "gauge", "MHz", "SM application clock (in MHz).", _G, 1980,
       lambda c: c.nv.nvmlDeviceGetApplicationsClock(c.gpu, c.nv.NVML_CLOCK_SM)),
    _F("DCGM_FI_DEV_APP_MEM_CLOCK", "gauge", "MHz", "Memory application clock (in MHz).", _G, 2619,
       lambda c: c.nv.nvmlDeviceGetApplicationsClock(c.gpu, c.nv.NVML_CLOCK_MEM)),
    _F("DCGM_FI_DEV_MAX_SM_CLOCK", "gauge", "MHz", "Maximum SM clock (in MHz).", _G, 1980,
       lambda c: c.nv.nvmlDeviceGetMaxClockInfo(c.gpu, c.nv.NVML_CLOCK_SM)),
    _F("DCGM_FI_DEV_MAX_MEM_CLOCK", "gauge", "MHz", "Maximum memory clock (in MHz).", _G, 2619,
       lambda c: c.nv.nvmlDeviceGetMaxClockInfo(c.gpu, c.nv.NVML_CLOCK_MEM)),
    _F("DCGM_FI_DEV_MAX_VIDEO_CLOCK", "gauge", "MHz", "Maximum video clock (in MHz).", _G, 1755,
       lambda c: c.nv.nvmlDeviceGetMaxClockInfo(c.gpu, c.nv.NVML_CLOCK_VIDEO)),
    _F("DCGM_FI_DEV_PSTATE", "gauge", "P-state", "Performance state (P-state) 0-15, 32 unknown.", _G, 0,
       lambda c: c.nv.nvmlDeviceGetPerformanceState(c.gpu)),
    _F("DCGM_FI_DEV_FAN_SPEED", "gauge", "%", "Fan speed (in 0-100%).", _G, 0,
       lambda c: c.nv.nvmlDeviceGetFanSpeed(c.gpu)),
    _F("DCGM_FI_DEV_SLOWDOWN_TEMP", "gauge", "C", "Slowdown temperature threshold (in C).", _G, 87,
       _temperature_threshold("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN")),
    _F("DCGM_FI_DEV_SHUTDOWN_TEMP", "gauge", "C", "Shutdown temperature threshold (in C).", _G, 92,
       _temperature_threshold("NVML_TEMPERATURE_THRESHOLD_SHUTDOWN")),
    # DCGM divides the limits' milliwatts as integers: whole watts
    _F("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "W", "Current power limit (in W).", _G, 700.0,
       lambda c: float(c.nv.nvmlDeviceGetPowerManagementLimit(c.gpu) // 1000)),
    _F("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", "gauge", "W", "Default power limit (in W).", _G, 700.0,
       lambda c: float(c.nv.nvmlDeviceGetPowerManagementDefaultLimit(c.gpu) // 1000)),
    _F("DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN", "gauge", "W", "Minimum power limit (in W).", _G, 200.0,
       lambda c: float(c.power_limit_constraints()[0] // 1000)),
    _F("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "gauge", "W", "Maximum power limit (in W).", _G, 700.0,
       lambda c: float(c.power_limit_constraints()[1] // 1000)),
    _F("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gauge", "W", "Effective power limit the driver enforces (in W).", _G,
       700.0, lambda c: float(c.nv.nvmlDeviceGetEnforcedPowerLimit(c.gpu) // 1000)),
    _F("DCGM_FI_DEV_GPU_MAX_OP_TEMP", "gauge", "C", "Maximum operating temperature of the GPU (in C).", _G, 87,
       _temperature_threshold("NVML_TEMPERATURE_THRESHOLD_GPU_MAX")),
    _F("DCGM_FI_DEV_MEM_MAX_OP_TEMP", "gauge", "C", "Maximum operating temperature of the memory (in C).", _G, 95,
       _temperature_threshold("NVML_TEMPERATURE_THRESHOLD_MEM_MAX")),
    _F("DCGM_FI_DEV_BAR1_TOTAL", "gauge", "MiB", "Total BAR1 memory (in MiB).", _I, 131072, _bar1("bar1Total")),
    _F("DCGM_FI_DEV_BAR1_USED", "gauge", "MiB", "Used BAR1 memory (in MiB).", _I, 1, _bar1("bar1Used")),
    _F("DCGM_FI_DEV_BAR1_FREE", "gauge", "MiB", "Free BAR1 memory (in MiB).", _I, 131071, _bar1("bar1Free")),
    _F("DCGM_FI_DEV_COMPUTE_MODE", "gauge", "mode",
       "Compute mode: 0 default, 1 exclusive thread/prohibited, 2 exclusive process (DCGM's numbering).", _G, 0,
       _compute_mode),
    _F("DCGM_FI_DEV_PERSISTENCE_MODE", "gauge", "0/1", "Persistence mode.", _G, 1,
       lambda c: c.nv.nvmlDeviceGetPersistenceMode(c.gpu)),
    _F("DCGM_FI_DEV_MIG_MODE", "gauge", "0/1", "Whether MIG mode is enabled.", _G, 0,
       lambda c: int(c.nv.nvmlDeviceGetMigMode(c.gpu)[0] == c.nv.NVML_DEVICE_MIG_ENABLE)),
    _F("DCGM_FI_DEV_ECC_CURRENT", "gauge", "0/1", "Current ECC mode.", _G, 1,
       lambda c: c.nv.nvmlDeviceGetEccMode(c.gpu)[0]),
    _F("DCGM_FI_DEV_ECC_PENDING", "gauge", "0/1", "ECC mode after the next reboot.", _G, 1,
       lambda c: c.nv.nvmlDeviceGetEccMode(c.gpu)[1]),
    _F("DCGM_FI_DEV_CUDA_COMPUTE_CAPABILITY", "gauge", "version",
       "CUDA compute capability: major in the upper 16 bits, minor in the lower (9.0 = 589824).", _G, 9 << 16,
       lambda c: (lambda major, minor: major << 16 | minor)(*c.nv.nvmlDeviceGetCudaComputeCapability(c.gpu))),
    _F("DCGM_FI_DEV_MINOR_NUMBER", "gauge", "number", "Device node minor number (/dev/nvidia#).", _G, 0,
       lambda c: c.nv.nvmlDeviceGetMinorNumber(c.gpu)),
    _F("DCGM_FI_DEV_COUNT", "gauge", "GPUs", "Number of GPUs on the node.", _G, 1,
       lambda c: c.nv.nvmlDeviceGetCount()),
    _F("DCGM_FI_CUDA_DRIVER_VERSION", "gauge", "version",
       "CUDA version the driver supports: major * 1000 + minor * 10 (CUDA 12.4 = 12040).", _G, 12040,
       lambda c: c.nv.nvmlSystemGetCudaDriverVersion_v2()),
    _F("DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "gen", "Current PCIe link generation.", _G, 5,
       lambda c: c.nv.nvmlDeviceGetCurrPcieLinkGeneration(c.gpu)),
    _F("DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "lanes", "Current PCIe link width.", _G, 16,
       lambda c: c.nv.nvmlDeviceGetCurrPcieLinkWidth(c.gpu)),
    _F("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "gauge", "gen", "Maximum PCIe link generation.", _G, 5,
       lambda c: c.nv.nvmlDeviceGetMaxPcieLinkGeneration(c.gpu)),
    _F("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "gauge", "lanes", "Maximum PCIe link width.", _G, 16,
       lambda c: c.nv.nvmlDeviceGetMaxPcieLinkWidth(c.gpu)),
    # Profiling fields: NVML's GPM API (Hopper and newer; per GPU instance on MIG). Elsewhere unsupported, omitted.
    _F("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "ratio", "Ratio of time the graphics engine is active.", _I, 0.0,
       _gpm_ratio("NVML_GPM_METRIC_GRAPHICS_UTIL")),
    _F("DCGM_FI_PROF_SM_ACTIVE", "gauge", "ratio",
       "The ratio of cycles an SM has at least 1 warp assigned.", _I, 0.0, _gpm_ratio("NVML_GPM_METRIC_SM_UTIL")),
    _F("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "ratio",
       "The ratio of number of warps resident on an SM.", _I, 0.0, _gpm_ratio("NVML_GPM_METRIC_SM_OCCUPANCY")),
    # DCGM maps the tensor field to GPM's ANY tensor metric, whatever "(HMMA)" in the help text says.
    _F("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "ratio",
       "Ratio of cycles the tensor (HMMA) pipe is active.", _I, 0.0, _gpm_ratio("NVML_GPM_METRIC_ANY_TENSOR_UTIL")),
    _F("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "ratio", "Ratio of cycles the fp64 pipes are active.", _I, 0.0,
       _gpm_ratio("NVML_GPM_METRIC_FP64_UTIL")),
    _F("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "ratio", "Ratio of cycles the fp32 pipes are active.", _I, 0.0,
       _gpm_ratio("NVML_GPM_METRIC_FP32_UTIL")),
    _F("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "ratio", "Ratio of cycles the fp16 pipes are active.", _I, 0.0,
       _gpm_ratio("NVML_GPM_METRIC_FP16_UTIL")),
    _F("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "ratio",
       "Ratio of cycles the device memory interface is active sending or receiving data.", _I, 0.0,
       _gpm_ratio("NVML_GPM_METRIC_DRAM_BW_UTIL")),
    _F("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "B/s",
       "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - "
       "in bytes per second.", _G, 0, _gpm_bytes_per_second("NVML_GPM_METRIC_PCIE_TX_PER_SEC")),
    _F("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "B/s",
       "The rate of data received over the PCIe bus - including both protocol headers and data payloads - "
       "in bytes per second.", _G, 0, _gpm_bytes_per_second("NVML_GPM_METRIC_PCIE_RX_PER_SEC")),
    # Label fields: attached as labels named after the field on every GPU series.
    _F("DCGM_FI_DRIVER_VERSION", "label", "", "Driver Version", _G, "550.54.15",
       lambda c: _str(c.nv.nvmlSystemGetDriverVersion())),
    _F("DCGM_FI_NVML_VERSION", "label", "", "NVML Version", _G, "12.550.54.15",
       lambda c: _str(c.nv.nvmlSystemGetNVMLVersion())),
    _F("DCGM_FI_DEV_BRAND", "label", "", "Device Brand", _G, "NVIDIA",
       lambda c: _BRANDS.get(c.nv.nvmlDeviceGetBrand(c.gpu), "Unknown")),
    _F("DCGM_FI_DEV_OEM_INFOROM_VER", "label", "", "OEM inforom version", _G, "1.1", _inforom("NVML_INFOROM_OEM")),
    _F("DCGM_FI_DEV_ECC_INFOROM_VER", "label", "", "ECC inforom version", _G, "7.0", _inforom("NVML_INFOROM_ECC")),
    _F("DCGM_FI_DEV_POWER_INFOROM_VER", "label", "", "Power management object inforom version", _G, "1.0",
       _inforom("NVML_INFOROM_POWER")),
    _F("DCGM_FI_DEV_INFOROM_IMAGE_VER", "label", "", "Inforom image version", _G, "G520.0200.00.05",
       lambda c: _str(c.nv.nvmlDeviceGetInforomImageVersion(c.gpu))),
    _F("DCGM_FI_DEV_SERIAL", "label", "", "Device Serial Number", _G, "",
       lambda c: _str(c.nv.nvmlDeviceGetSerial(c.gpu))),
    _F("DCGM_FI_DEV_VBIOS_VERSION", "label", "", "VBIOS version of the device", _G, "96.00.74.00.01",
       lambda c: _str(c.nv.nvmlDeviceGetVbiosVersion(c.gpu))),
    _F("DCGM_FI_DEV_NAME", "label", "", "Name of the GPU device", _G, "NVIDIA H100 80GB HBM3",
       lambda c: _str(c.nv.nvmlDeviceGetName(c.gpu))),
    _F("DCGM_FI_DEV_UUID", "label", "", "UUID corresponding to the device", _G, "",
       lambda c: _str(c.nv.nvmlDeviceGetUUID(c.gpu))),
    _F("DCGM_FI_DEV_PCI_BUSID", "label", "", "PCI bus id of the device", _G, "",
       lambda c: _str(c.pci_info().busId)),
    _F("DCGM_FI_DEV_PCI_COMBINED_ID", "gauge", "id", "The combined 16-bit device id and 16-bit vendor id", _G,
       0x233010DE, lambda c: c.pci_info().pciDeviceId),
    _F("DCGM_FI_DEV_PCI_SUBSYS_ID", "gauge", "id", "The 32-bit Sub System Device ID", _G, 0x16C110DE,
       lambda c: c.pci_info().pciSubSystemId),
)

# DCGM's legacy per-link NVLink bandwidth fields, read like the totals with the link as the field-value scope.
FIELDS += tuple(
    _F(f"DCGM_FI_DEV_NVLINK_{prefix}BANDWIDTH_L{link}", "gauge", "MB/s",
       f"NVLink {what} bandwidth on link {link} (in MB/s).", _G, 0, _nvlink_bandwidth(link, directions))
    for prefix, what, directions in (("", "RX+TX", "RX+TX"), ("TX_", "TX", "TX"), ("RX_", "RX", "RX"))
    for link in range(NVLINK_LINKS))
# DCGM's ECC counts per memory location (L1/L2 cache, device memory, register file, texture, shared, CBU, SRAM).
FIELDS += tuple(
    _F(f"DCGM_FI_DEV_ECC_{errors}_{counter}_{location}", "counter", "count",
       f"{'Single' if errors == 'SBE' else 'Double'}-bit {'volatile' if counter == 'VOL' else 'persistent'} ECC "
       f"errors in {location}.", _G, 0, _ecc_location(errors, counter, location))
    for counter in ("VOL", "AGG") for location in ("L1", "L2", "DEV", "REG", "TEX", "SHM", "CBU", "SRM")
    for errors in ("SBE", "DBE"))
# ... and per-link error counters (DCGM: flow-control CRC, data CRC, replay, recovery).
FIELDS += tuple(
    _F(f"DCGM_FI_DEV_NVLINK_{counter}_ERROR_COUNT_L{link}", "counter", "count",
       f"NVLink {what} errors on link {link}.", _G, 0, _nvlink_errors(link, counter))
    for counter, what in (("CRC_FLIT", "flow-control CRC"), ("CRC_DATA", "data CRC"), ("REPLAY", "replay"),
                          ("RECOVERY", "recovery"))
    for link in range(NVLINK_LINKS))

FIELDS_BY_NAME: Mapping[str, Field] = {f.name: f for f in FIELDS}
