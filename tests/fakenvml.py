"""A simulated ``libnvidia-ml`` for tests, installed underneath the real ``pynvml`` module.

Only the C entry points are replaced: every ``pynvml.nvmlXxx`` wrapper, struct class and
``NVMLError_*`` class is the genuine one.  The fake library hands pynvml Python callables that take
the same ctypes arguments as the C functions (handles, ``byref`` outputs, char buffers ...), fill
the outputs and return NVML return codes.

Typical use::

    def test_power(fake_nvml: FakeNvml) -> None:
        fake_nvml.gpus[0].power_mw = 250_000
        fake_nvml.fail("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=1)
        ...

To use the fixture from another test module write ``fake_nvml = fakenvml.fake_nvml`` at module level
(importing it by name trips ruff's F811 on every test parameter) or import it in a ``conftest.py``.

Model attributes may be changed at any time; wrap multi-attribute updates in ``with fake.lock:`` when
backend threads are running.  Most scalar attributes accept ``None`` to mean "not supported".

GPM is modelled the way the hardware counts: each device keeps cumulative ``gpm_counters`` (metric id ->
the metric integrated over time: percent-seconds for utilisation metrics, MiB for the ``*_PER_SEC``
bandwidths).  ``nvmlGpmSampleGet`` records the counters and ``FakeNvml.clock()``; ``nvmlGpmMetricsGet``
computes each metric from the recorded pair as (counter2 - counter1) / (time2 - time1).  A test drives it
with :meth:`_FakeDevice.gpm_run` and a controllable clock::

    fake.clock = lambda: now[0]
    gpu.gpm_run(1.0, {pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 62.5})  # 62.5 % busy for one second
    now[0] += 1.0
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pynvml
import pytest

NO_ID = 0xFFFFFFFF
"""Unset GPU/compute instance id in events and processes; also the "all links" NVLink field scope."""

MIB = 1024 * 1024

# MIG profile -> (gi slices, ci slices, SMs, memory MB, copy engines, decoders, encoders, jpeg, ofa)
# for an H100 80GB HBM3.
MIG_PROFILES: dict[str, tuple[int, int, int, int, int, int, int, int, int]] = {
    "1g.10gb": (1, 1, 16, 9856, 1, 1, 0, 1, 0),
    "1g.20gb": (1, 1, 26, 19968, 1, 1, 0, 1, 0),
    "2g.20gb": (2, 2, 32, 20096, 2, 2, 0, 2, 0),
    "3g.40gb": (3, 3, 60, 40320, 3, 3, 0, 3, 0),
    "4g.40gb": (4, 4, 64, 40320, 4, 4, 0, 4, 0),
    "7g.80gb": (7, 7, 132, 80896, 8, 7, 0, 7, 1),
}

_DGX_H100_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_DEFAULT_EVENTS = (
    pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypePState
    | pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeClock
    | pynvml.nvmlEventTypePowerSourceChange
    | pynvml.nvmlEventMigConfigChange
)
_VALUE_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}
_OK = pynvml.NVML_SUCCESS

FieldKey = int | tuple[int, int]
"""A field id, or ``(field id, scope id)`` for a scoped entry."""


def _new_handle_memory() -> ctypes.Array[ctypes.c_ubyte]:
    return (ctypes.c_ubyte * 8)()


# --------------------------------------------------------------------------- model


@dataclass(kw_only=True)
class FakeMemory:
    """Frame-buffer memory in bytes; ``free`` is derived."""

    total: int
    reserved: int = 0
    used: int = 0

    @property
    def free(self) -> int:
        """Bytes neither reserved nor used."""
        return max(self.total - self.reserved - self.used, 0)


@dataclass(kw_only=True)
class FakeProcess:
    """A process in one of NVML's process lists; gi/ci locate it in a MIG instance (``NO_ID`` outside MIG).

    ``kind`` picks the list: ``compute``, ``graphics`` or ``mps`` (MPS clients); a C+G process is two entries.
    ``used_memory`` None is NVML_VALUE_NOT_AVAILABLE (WDDM).
    """

    pid: int
    used_memory: int | None
    gpu_instance_id: int = NO_ID
    compute_instance_id: int = NO_ID
    kind: str = "compute"


@dataclass(kw_only=True)
class FakeProcessSample:
    """One ``nvmlProcessUtilizationSample_t`` (timestamp in microseconds)."""

    pid: int
    timestamp_us: int
    sm: int = 0
    mem: int = 0
    enc: int = 0
    dec: int = 0


@dataclass(kw_only=True)
class FakeGridFeature:
    """One entry of ``nvmlGridLicensableFeatures_v4_t``."""

    code: int = pynvml.NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE
    state: int = 1
    license_info: str = ""
    product_name: str = "NVIDIA Virtual Compute Server"
    enabled: bool = True


@dataclass(kw_only=True)
class _FakeDevice:
    """What GPUs and MIG devices share: identity, memory, field values, an NVML handle."""

    uuid: str = ""
    name: str = ""
    memory: FakeMemory | None = None
    fields: dict[FieldKey, tuple[int, float]] = field(default_factory=dict)
    field_errors: dict[FieldKey, int] = field(default_factory=dict)
    gpm_counters: dict[int, float] = field(default_factory=dict)
    """Cumulative GPM counters (see the module docstring); a metric without a counter is NOT_SUPPORTED."""
    _handle_mem: ctypes.Array[ctypes.c_ubyte] = field(
        default_factory=_new_handle_memory, init=False, repr=False, compare=False
    )

    @property
    def handle_address(self) -> int:
        """Address the NVML handle of this device points to."""
        return ctypes.addressof(self._handle_mem)

    def _builtin_field(self, fid: int, scope: int) -> tuple[int, int, float] | None:
        return None

    def gpm_run(self, seconds: float, rates: dict[int, float]) -> None:
        """Let the device run ``seconds`` at the given metric values (percent, or MiB/s for bandwidths)."""
        for metric, rate in rates.items():
            self.gpm_counters[metric] = self.gpm_counters.get(metric, 0.0) + rate * seconds

    def field_value(self, fid: int, scope: int) -> tuple[int, int, float]:
        """``(nvmlReturn, valueType, value)`` for one field request."""
        for key in ((fid, scope), fid):
            if key in self.field_errors:
                return self.field_errors[key], pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 0
        for key in ((fid, scope), fid):
            if key in self.fields:
                vtype, value = self.fields[key]
                return _OK, vtype, value
        builtin = self._builtin_field(fid, scope)
        if builtin is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 0
        return builtin


@dataclass(kw_only=True)
class FakeMigDevice(_FakeDevice):
    """A MIG device (compute instance) under a parent GPU; ``index`` is its MIG handle slot."""

    index: int
    gpu_instance_id: int
    compute_instance_id: int = 0
    gpu_instance_slice_count: int = 1
    compute_instance_slice_count: int = 1
    multiprocessor_count: int = 16
    memory_size_mb: int = 9856
    shared_copy_engines: int = 1
    shared_decoders: int = 1
    shared_encoders: int = 0
    shared_jpeg: int = 1
    shared_ofa: int = 0


@dataclass(kw_only=True)
class FakeGpu(_FakeDevice):
    """A physical GPU; defaults describe an idle-ish H100 SXM5 80GB (units as NVML reports them)."""

    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = ""
    pci_device_id: int = 0x233010DE
    pci_subsystem_id: int = 0x16C110DE
    serial: str | None = ""
    vbios_version: str | None = "96.00.74.00.0F"
    brand: int | None = pynvml.NVML_BRAND_NVIDIA
    minor_number: int | None = None
    sm_clock_mhz: int | None = 1980
    mem_clock_mhz: int | None = 2619
    max_sm_clock_mhz: int | None = 1980
    max_mem_clock_mhz: int | None = 2619
    video_clock_mhz: int | None = 1755
    max_video_clock_mhz: int | None = 1980
    app_sm_clock_mhz: int | None = 1755
    app_mem_clock_mhz: int | None = 2619
    clocks_event_reasons: int | None = 0x1  # GPU idle
    pstate: int | None = 0
    fan_speed_pct: int | None = None  # SXM boards have no fan NVML can read
    temp_thresholds_c: dict[int, int] = field(default_factory=lambda: {
        pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: 92, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: 89,
        pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: 87, pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: 95})
    default_power_limit_mw: int | None = 700_000
    power_limit_range_mw: tuple[int, int] | None = (200_000, 700_000)
    compute_capability: tuple[int, int] | None = (9, 0)
    ecc_errors: dict[tuple[int, int, int], int] = field(default_factory=dict)
    """(NVML_MEMORY_ERROR_TYPE_*, NVML_VOLATILE/AGGREGATE_ECC, NVML_MEMORY_LOCATION_*) -> count; 0 when not set."""
    bar1_bytes: tuple[int, int] | None = (128 * 1024 * MIB, 2 * MIB + 5)  # total, used
    compute_mode: int | None = pynvml.NVML_COMPUTEMODE_DEFAULT
    persistence_mode: int | None = pynvml.NVML_FEATURE_ENABLED
    ecc_mode: tuple[int, int] | None = (pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED)  # current, pending
    pcie_link: tuple[int, int, int, int] | None = (5, 16, 5, 16)  # current gen, width, max gen, max width
    gpu_temp_c: int | None = 36
    memory_temp_c: int | None = 44
    power_mw: int | None = 118_512
    power_limit_mw: int | None = 700_000
    energy_mj: int | None = 1_234_567_890
    pcie_replay_counter: int | None = 0
    gpu_util: int = 42
    mem_util: int = 17
    enc_util: int | None = 0
    dec_util: int | None = 0
    enc_sampling_us: int = 167_000
    dec_sampling_us: int = 167_000
    pcie_tx_kbps: int | None = 12_345
    pcie_rx_kbps: int | None = 67_890
    nvlink_tx_kib: list[int] = field(default_factory=lambda: [1000 + i for i in range(18)])
    nvlink_rx_kib: list[int] = field(default_factory=lambda: [2000 + i for i in range(18)])
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    """(link, NVML_NVLINK_ERROR_DL_* counter) -> count; links are those of ``nvlink_tx_kib``; 0 when not set."""
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    grid_license_supported: bool = False
    grid_features: list[FakeGridFeature] = field(default_factory=list)
    mig_capable: bool = True
    mig_mode: int = pynvml.NVML_DEVICE_MIG_DISABLE
    mig_pending: int = pynvml.NVML_DEVICE_MIG_DISABLE
    max_mig_devices: int = 7
    migs: list[FakeMigDevice] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    process_samples: list[FakeProcessSample] = field(default_factory=list)
    supported_events: int = _DEFAULT_EVENTS
    gpm_supported: bool = False

    def __post_init__(self) -> None:
        """Derive per-index identity (uuid, bus id, serial, minor) and memory when not given."""
        i = self.index
        self.uuid = self.uuid or f"GPU-{0x1A2B3C4D + i:08x}-5e6f-7a8b-9c0d-{0xE1F2A3B4C5D6 + i:012x}"
        self.pci_bus_id = self.pci_bus_id or f"00000000:{_DGX_H100_BUSES[i % 8] + i // 8:02X}:00.0"
        self.serial = f"165322{i:07d}" if self.serial == "" else self.serial
        self.minor_number = i if self.minor_number is None else self.minor_number
        if self.memory is None:
            self.memory = FakeMemory(total=81559 * MIB, reserved=567 * MIB, used=20480 * MIB)

    def add_mig(
        self,
        profile: str = "1g.10gb",
        *,
        gpu_instance_id: int | None = None,
        compute_instance_id: int = 0,
        index: int | None = None,
        used: int = 0,
    ) -> FakeMigDevice:
        """Create a MIG device from an H100 profile, turning MIG mode on; returns it."""
        gis, cis, sms, mem_mb, ce, dec, enc, jpg, ofa = MIG_PROFILES[profile]
        slot = index if index is not None else len(self.migs)
        gi = gpu_instance_id if gpu_instance_id is not None else 1 + len(self.migs)
        mig = FakeMigDevice(
            index=slot,
            gpu_instance_id=gi,
            compute_instance_id=compute_instance_id,
            uuid=f"MIG-{0xA0B0C0D0 + self.index * 16 + slot:08x}-1111-2222-3333-{0x444455556666 + gi:012x}",
            name=f"{self.name} MIG {profile}",
            memory=FakeMemory(total=mem_mb * MIB, reserved=0, used=used),
            gpu_instance_slice_count=gis,
            compute_instance_slice_count=cis,
            multiprocessor_count=sms,
            memory_size_mb=mem_mb,
            shared_copy_engines=ce,
            shared_decoders=dec,
            shared_encoders=enc,
            shared_jpeg=jpg,
            shared_ofa=ofa,
        )
        self.migs.append(mig)
        self.mig_mode = self.mig_pending = pynvml.NVML_DEVICE_MIG_ENABLE
        return mig

    def mig_at(self, index: int) -> FakeMigDevice | None:
        """The MIG device in handle slot ``index``, if any."""
        return next((m for m in self.migs if m.index == index), None)

    def _builtin_field(self, fid: int, scope: int) -> tuple[int, int, float] | None:
        uint, ull = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        rows = self.remapped_rows
        simple: dict[int, tuple[int, int | None]] = {
            pynvml.NVML_FI_DEV_MEMORY_TEMP: (uint, self.memory_temp_c),
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: (ull, self.energy_mj),
            pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: (ull, self.pcie_replay_counter),
            pynvml.NVML_FI_DEV_POWER_INSTANT: (uint, self.power_mw),
        }
        if rows is not None:
            for k, fi in enumerate((142, 143, 144, 145)):  # NVML_FI_DEV_REMAPPED_COR .. _FAILURE
                simple[fi] = (uint, rows[k])
        if fid in simple:
            vtype, value = simple[fid]
            return None if value is None else (_OK, vtype, value)
        links = {
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: self.nvlink_tx_kib,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: self.nvlink_rx_kib,
        }.get(fid)
        if links is None or not links:
            return None
        if scope == NO_ID:
            return _OK, ull, sum(links)
        if scope < len(links):
            return _OK, ull, links[scope]
        return pynvml.NVML_ERROR_INVALID_ARGUMENT, ull, 0


# --------------------------------------------------------------------------- simulated library


class _Spec(NamedTuple):
    func: Callable[..., int]
    locate: str | None  # "handle" (args[0] is a device), "index", "uuid" or None
    mig_ok: bool
    lifecycle: bool  # callable while uninitialised, exempt from "*" failures


_SPECS: dict[str, _Spec] = {}


def _sym(
    name: str, locate: str | None = "handle", *, mig_ok: bool = False, lifecycle: bool = False
) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Register a method as the simulation of C symbol ``name``."""

    def deco(func: Callable[..., int]) -> Callable[..., int]:
        _SPECS[name] = _Spec(func, locate, mig_ok, lifecycle)
        return func

    return deco


def _target(arg: Any) -> Any:
    """The ctypes object behind an output argument (``byref(x)`` -> ``x``; arrays pass as is)."""
    return getattr(arg, "_obj", arg)


def _in(arg: Any) -> Any:
    """Python value of an input argument (ctypes scalar or plain int/bytes)."""
    return arg.value if hasattr(arg, "value") else arg


def address_of(handle: Any) -> int | None:
    """Address held by an opaque handle (``c_nvmlDevice_t``, event set, GPM sample ...)."""
    if handle is None or isinstance(handle, int):
        return handle
    return ctypes.cast(handle, ctypes.c_void_p).value


def _set_pointer(out: Any, address: int) -> None:
    obj = _target(out)
    ctypes.c_void_p.from_address(ctypes.addressof(obj)).value = address


def _put_str(buf: Any, length: Any, text: str) -> int:
    data = text.encode() + b"\0"
    if len(data) > _in(length):
        return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    ctypes.memmove(buf, data, len(data))
    return _OK


def _put(out: Any, value: int | None) -> int:
    if value is None:
        return pynvml.NVML_ERROR_NOT_SUPPORTED
    _target(out).value = value
    return _OK


@dataclass
class _Failure:
    code: int
    remaining: int | None


@dataclass
class _EventSet:
    memory: ctypes.Array[ctypes.c_ubyte]
    registrations: dict[int, int] = field(default_factory=dict)  # gpu index -> event mask
    queue: deque[tuple[int, int, int, int, int]] = field(default_factory=deque)


@dataclass
class _GpmSample:
    memory: ctypes.Array[ctypes.c_ubyte]
    source: _FakeDevice | None = None
    taken_at: float = 0.0
    counters: dict[int, float] = field(default_factory=dict)


class _FakeFunction:
    """Callable standing in for a ctypes function pointer (pynvml may set ``restype`` on it)."""

    def __init__(self, fake: FakeNvml, name: str) -> None:
        self.fake, self.__name__ = fake, name
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        return self.fake._dispatch(self.__name__, args)


class _FakeLib:
    """Stands in for the ``CDLL`` object in ``pynvml.nvmlLib``; unknown symbols raise AttributeError."""

    def __init__(self, fake: FakeNvml) -> None:
        self._fake = fake
        self._functions: dict[str, _FakeFunction] = {}

    def __getattr__(self, name: str) -> _FakeFunction:
        fake = self._fake
        if name not in _SPECS or name in fake.hidden_symbols:
            if name.startswith("nvml"):
                with fake.lock:
                    fake.missing_symbols[name] += 1
            raise AttributeError(name)
        return self._functions.setdefault(name, _FakeFunction(fake, name))


class FakeNvml:
    """The simulated driver: a list of :class:`FakeGpu`, error injection, call counters, events."""

    def __init__(
        self,
        gpus: int | Iterable[FakeGpu] = 2,
        *,
        driver_version: str = "550.90.07",
        nvml_version: str = "12.550.90.07",
        cuda_version: int = 12040,
    ) -> None:
        self.gpus: list[FakeGpu] = [FakeGpu(index=i) for i in range(gpus)] if isinstance(gpus, int) else list(gpus)
        for pos, gpu in enumerate(self.gpus):
            if gpu.index != pos:
                raise ValueError(f"FakeGpu at position {pos} has index {gpu.index}")
        self.driver_version = driver_version
        self.nvml_version = nvml_version
        self.cuda_version = cuda_version
        self.init_error: int | None = None
        """Return code for nvmlInit; ``NVML_ERROR_LIBRARY_NOT_FOUND`` fails the library load itself."""
        self.calls: Counter[str] = Counter()
        """Calls per C symbol (counted before any failure is returned)."""
        self.gpu_calls: Counter[tuple[str, int]] = Counter()
        """Calls per ``(C symbol, gpu index)`` for calls aimed at one GPU or its MIG devices."""
        self.missing_symbols: Counter[str] = Counter()
        """Lookups of symbols this fake lacks (pynvml raises ``NVMLError_FunctionNotFound``)."""
        self.hidden_symbols: set[str] = set()
        self.lock = threading.RLock()
        self._cond = threading.Condition(self.lock)
        self._init_count = 0
        self._failures: dict[tuple[str, int | None], _Failure] = {}
        self._event_sets: dict[int, _EventSet] = {}
        self._gpm_samples: dict[int, _GpmSample] = {}
        self.clock: Callable[[], float] = time.monotonic
        """Time (seconds) recorded in GPM samples."""
        self.pcie_sample_s = 0.0
        """How long ``nvmlDeviceGetPcieThroughput`` samples before it answers (the driver: 20 ms); other calls,
        from other threads, go on meanwhile."""
        self.pcie_in_flight = 0
        self.pcie_most_in_flight = 0
        """The most ``nvmlDeviceGetPcieThroughput`` calls seen sampling at once."""
        self.lib = _FakeLib(self)

    # ------------------------------------------------------------------ test-facing API

    @property
    def init_count(self) -> int:
        """NVML's own init reference count."""
        return self._init_count

    def fail(self, function: str, code: int, gpu: int | None = None, times: int | None = None) -> None:
        """Make C symbol ``function`` return ``code`` (for GPU ``gpu`` and its MIG devices, or always).

        ``function="*"`` matches every symbol except init/shutdown/errorString; ``times`` limits how
        many calls fail (``None``: until :meth:`clear_failures`).
        """
        with self.lock:
            self._failures[(function, gpu)] = _Failure(code, times)

    def clear_failures(self) -> None:
        """Remove all injected failures."""
        with self.lock:
            self._failures.clear()

    def hide_symbol(self, name: str) -> None:
        """Simulate an older driver without ``name`` (pynvml raises ``NVMLError_FunctionNotFound``)."""
        with self.lock:
            self.hidden_symbols.add(name)
            self.lib._functions.pop(name, None)
            pynvml._nvmlGetFunctionPointer_cache.pop(name, None)

    @property
    def gpm_samples_allocated(self) -> int:
        """GPM samples allocated and not yet freed."""
        with self.lock:
            return len(self._gpm_samples)

    def gpu_for_handle(self, handle: Any) -> FakeGpu | None:
        """The GPU a device handle (GPU or MIG) belongs to."""
        found = self._resolve(address_of(handle))
        return found[0] if found else None

    def device_for_handle(self, handle: Any) -> FakeGpu | FakeMigDevice | None:
        """The GPU or MIG device a handle designates."""
        found = self._resolve(address_of(handle))
        return (found[1] or found[0]) if found else None

    def inject_event(self, gpu_index: int, event_type: int, data: int, gi: int = NO_ID, ci: int = NO_ID) -> int:
        """Queue an event on every event set registered for it; returns how many sets got it."""
        with self.lock:
            delivered = 0
            for es in self._event_sets.values():
                if es.registrations.get(gpu_index, 0) & event_type:
                    es.queue.append((gpu_index, event_type, data, gi, ci))
                    delivered += 1
            self._cond.notify_all()
            return delivered

    def inject_xid(self, gpu_index: int, xid: int, gi: int = NO_ID, ci: int = NO_ID) -> int:
        """Queue an XID critical error event; returns how many event sets received it."""
        return self.inject_event(gpu_index, pynvml.nvmlEventTypeXidCriticalError, xid, gi, ci)

    def wait_for_event_registration(
        self, gpu_index: int, event_type: int = pynvml.nvmlEventTypeXidCriticalError, timeout: float = 5.0
    ) -> bool:
        """Block until some event set listens for ``event_type`` on the GPU (events sent before are lost)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not self._listening(gpu_index, event_type):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    # ------------------------------------------------------------------ dispatch

    def _listening(self, gpu_index: int, event_type: int) -> bool:
        return any(es.registrations.get(gpu_index, 0) & event_type for es in self._event_sets.values())

    def _resolve(self, address: int | None) -> tuple[FakeGpu, FakeMigDevice | None] | None:
        if not address:
            return None
        with self.lock:
            for gpu in self.gpus:
                if gpu.handle_address == address:
                    return gpu, None
                for mig in gpu.migs:
                    if mig.handle_address == address:
                        return gpu, mig
        return None

    def _injected(self, name: str, gpu: int | None, lifecycle: bool) -> int | None:
        patterns = [name] if lifecycle else [name, "*"]
        keys = [(p, gpu) for p in patterns] if gpu is not None else []
        keys += [(p, None) for p in patterns]
        for key in keys:
            failure = self._failures.get(key)
            if failure is None:
                continue
            if failure.remaining is not None:
                failure.remaining -= 1
                if failure.remaining <= 0:
                    del self._failures[key]
            return failure.code
        return None

    def _dispatch(self, name: str, args: tuple[Any, ...]) -> Any:
        spec = _SPECS[name]
        with self.lock:
            self.calls[name] += 1
            if not spec.lifecycle and self._init_count == 0:
                return pynvml.NVML_ERROR_UNINITIALIZED
            gpu: FakeGpu | None = None
            mig: FakeMigDevice | None = None
            if spec.locate == "handle":
                found = self._resolve(address_of(args[0]))
                if found is None:
                    return pynvml.NVML_ERROR_INVALID_ARGUMENT
                gpu, mig = found
            elif spec.locate == "index":
                idx = _in(args[0])
                gpu = self.gpus[idx] if 0 <= idx < len(self.gpus) else None
            elif spec.locate == "uuid":
                gpu, mig = self._by_uuid(_in(args[0]))
            if gpu is not None:
                self.gpu_calls[(name, gpu.index)] += 1
            code = self._injected(name, gpu.index if gpu else None, spec.lifecycle)
            if code is not None:
                return code
            if spec.locate == "handle":
                if mig is not None and not spec.mig_ok:
                    return pynvml.NVML_ERROR_NOT_SUPPORTED
                return spec.func(self, gpu, mig, *args[1:])
            return spec.func(self, *args)

    def _by_uuid(self, uuid: bytes | None) -> tuple[FakeGpu | None, FakeMigDevice | None]:
        text = (uuid or b"").decode()
        for gpu in self.gpus:
            if gpu.uuid == text:
                return gpu, None
            for mig in gpu.migs:
                if mig.uuid == text:
                    return gpu, mig
        return None, None

    # ------------------------------------------------------------------ init / system

    @_sym("nvmlInitWithFlags", None, lifecycle=True)
    def _init_with_flags(self, flags: Any) -> int:
        if self.init_error is not None:
            return self.init_error
        self._init_count += 1
        return _OK

    @_sym("nvmlInit_v2", None, lifecycle=True)
    def _init_v2(self) -> int:
        return self._init_with_flags(0)

    @_sym("nvmlShutdown", None, lifecycle=True)
    def _shutdown(self) -> int:
        if self._init_count == 0:
            return pynvml.NVML_ERROR_UNINITIALIZED
        self._init_count -= 1
        self._cond.notify_all()
        return _OK

    @_sym("nvmlErrorString", None, lifecycle=True)
    def _error_string(self, result: Any) -> bytes:
        code = _in(result)
        return pynvml.NVMLError._errcode_to_string.get(code, f"Unknown Error (fake code {code})").encode()

    @_sym("nvmlSystemGetDriverVersion", None)
    def _driver_version(self, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self.driver_version)

    @_sym("nvmlSystemGetNVMLVersion", None)
    def _nvml_version(self, buf: Any, length: Any) -> int:
        return _put_str(buf, length, self.nvml_version)

    @_sym("nvmlSystemGetCudaDriverVersion", None)
    @_sym("nvmlSystemGetCudaDriverVersion_v2", None)
    def _cuda_version(self, out: Any) -> int:
        return _put(out, self.cuda_version)

    @_sym("nvmlDeviceGetCount_v2", None)
    def _count(self, out: Any) -> int:
        return _put(out, len(self.gpus))

    @_sym("nvmlDeviceGetHandleByIndex_v2", "index")
    def _handle_by_index(self, index: Any, out: Any) -> int:
        idx = _in(index)
        if not 0 <= idx < len(self.gpus):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        _set_pointer(out, self.gpus[idx].handle_address)
        return _OK

    @_sym("nvmlDeviceGetHandleByUUID", "uuid")
    def _handle_by_uuid(self, uuid: Any, out: Any) -> int:
        gpu, mig = self._by_uuid(_in(uuid))
        if gpu is None:
            return pynvml.NVML_ERROR_NOT_FOUND
        _set_pointer(out, (mig or gpu).handle_address)
        return _OK

    # ------------------------------------------------------------------ identity

    @_sym("nvmlDeviceGetUUID", mig_ok=True)
    def _uuid(self, gpu: FakeGpu, mig: FakeMigDevice | None, buf: Any, length: Any) -> int:
        return _put_str(buf, length, (mig or gpu).uuid)

    @_sym("nvmlDeviceGetName", mig_ok=True)
    def _name(self, gpu: FakeGpu, mig: FakeMigDevice | None, buf: Any, length: Any) -> int:
        return _put_str(buf, length, (mig or gpu).name)

    @_sym("nvmlDeviceGetSerial")
    def _serial(self, gpu: FakeGpu, mig: None, buf: Any, length: Any) -> int:
        return pynvml.NVML_ERROR_NOT_SUPPORTED if gpu.serial is None else _put_str(buf, length, gpu.serial)

    @_sym("nvmlDeviceGetVbiosVersion")
    def _vbios(self, gpu: FakeGpu, mig: None, buf: Any, length: Any) -> int:
        if gpu.vbios_version is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        return _put_str(buf, length, gpu.vbios_version)

    @_sym("nvmlDeviceGetPciInfo_v3")
    def _pci_info(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        info = _target(out)
        domain, bus, rest = gpu.pci_bus_id.split(":")
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
        info.pciDeviceId, info.pciSubSystemId = gpu.pci_device_id, gpu.pci_subsystem_id
        info.busId = gpu.pci_bus_id.encode()
        info.busIdLegacy = f"{info.domain:04X}:{info.bus:02X}:{info.device:02X}.0".encode()
        return _OK

    @_sym("nvmlDeviceGetIndex")
    def _index(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.index)

    @_sym("nvmlDeviceGetMinorNumber")
    def _minor(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.minor_number)

    @_sym("nvmlDeviceGetBrand")
    def _brand(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.brand)

    # ------------------------------------------------------------------ telemetry

    @_sym("nvmlDeviceGetClockInfo")
    def _clock(self, gpu: FakeGpu, mig: None, kind: Any, out: Any) -> int:
        sm, mem = gpu.sm_clock_mhz, gpu.mem_clock_mhz
        clocks = {pynvml.NVML_CLOCK_GRAPHICS: sm, pynvml.NVML_CLOCK_SM: sm, pynvml.NVML_CLOCK_MEM: mem,
                  pynvml.NVML_CLOCK_VIDEO: gpu.video_clock_mhz}
        return _put(out, clocks.get(_in(kind)))

    @_sym("nvmlDeviceGetMaxClockInfo")
    def _max_clock(self, gpu: FakeGpu, mig: None, kind: Any, out: Any) -> int:
        sm, mem = gpu.max_sm_clock_mhz, gpu.max_mem_clock_mhz
        clocks = {pynvml.NVML_CLOCK_GRAPHICS: sm, pynvml.NVML_CLOCK_SM: sm, pynvml.NVML_CLOCK_MEM: mem,
                  pynvml.NVML_CLOCK_VIDEO: gpu.max_video_clock_mhz}
        return _put(out, clocks.get(_in(kind)))

    @_sym("nvmlDeviceGetApplicationsClock")
    def _app_clock(self, gpu: FakeGpu, mig: None, kind: Any, out: Any) -> int:
        clocks = {pynvml.NVML_CLOCK_SM: gpu.app_sm_clock_mhz, pynvml.NVML_CLOCK_MEM: gpu.app_mem_clock_mhz}
        return _put(out, clocks.get(_in(kind)))

    @_sym("nvmlDeviceGetCurrentClocksEventReasons")
    @_sym("nvmlDeviceGetCurrentClocksThrottleReasons")
    def _clocks_event_reasons(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.clocks_event_reasons)

    @_sym("nvmlDeviceGetPerformanceState")
    def _pstate(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.pstate)

    @_sym("nvmlDeviceGetFanSpeed")
    def _fan(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.fan_speed_pct)

    @_sym("nvmlDeviceGetTemperatureThreshold")
    def _temperature_threshold(self, gpu: FakeGpu, mig: None, kind: Any, out: Any) -> int:
        return _put(out, gpu.temp_thresholds_c.get(_in(kind)))

    @_sym("nvmlDeviceGetCurrPcieLinkGeneration")
    def _pcie_gen(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.pcie_link and gpu.pcie_link[0])

    @_sym("nvmlDeviceGetCurrPcieLinkWidth")
    def _pcie_width(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.pcie_link and gpu.pcie_link[1])

    @_sym("nvmlDeviceGetMaxPcieLinkGeneration")
    def _pcie_max_gen(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.pcie_link and gpu.pcie_link[2])

    @_sym("nvmlDeviceGetMaxPcieLinkWidth")
    def _pcie_max_width(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.pcie_link and gpu.pcie_link[3])

    @_sym("nvmlDeviceGetTemperature")
    def _temperature(self, gpu: FakeGpu, mig: None, sensor: Any, out: Any) -> int:
        if _in(sensor) != pynvml.NVML_TEMPERATURE_GPU:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        return _put(out, gpu.gpu_temp_c)

    @_sym("nvmlDeviceGetTemperatureV")
    def _temperature_v(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        info = _target(out)
        if info.version != pynvml.nvmlTemperature_v1:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if info.sensorType != pynvml.NVML_TEMPERATURE_GPU:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        if gpu.gpu_temp_c is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        info.temperature = gpu.gpu_temp_c
        return _OK

    @_sym("nvmlDeviceGetPowerUsage")
    def _power(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.power_mw)

    @_sym("nvmlDeviceGetPowerManagementLimit")
    @_sym("nvmlDeviceGetEnforcedPowerLimit")
    def _power_limit(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.power_limit_mw)

    @_sym("nvmlDeviceGetPowerManagementLimitConstraints")
    def _power_limit_range(self, gpu: FakeGpu, mig: None, low: Any, high: Any) -> int:
        limits = gpu.power_limit_range_mw
        return _put(low, limits and limits[0]) or _put(high, limits and limits[1])

    @_sym("nvmlDeviceGetBAR1MemoryInfo", mig_ok=True)
    def _bar1(self, gpu: FakeGpu, mig: FakeMigDevice | None, out: Any) -> int:
        if gpu.bar1_bytes is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        total, used = gpu.bar1_bytes
        if mig is not None:  # a GPU instance sees its share of the aperture
            total, used = total // 8, used // 8
        info = _target(out)
        info.bar1Total, info.bar1Used, info.bar1Free = total, used, total - used
        return _OK

    @_sym("nvmlDeviceGetCudaComputeCapability")
    def _compute_capability(self, gpu: FakeGpu, mig: None, major: Any, minor: Any) -> int:
        cc = gpu.compute_capability
        return _put(major, cc and cc[0]) or _put(minor, cc and cc[1])

    @_sym("nvmlDeviceGetMemoryErrorCounter")
    def _memory_errors(self, gpu: FakeGpu, mig: None, kind: Any, counter: Any, location: Any, out: Any) -> int:
        if gpu.ecc_mode is None or not gpu.ecc_mode[0]:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        return _put(out, gpu.ecc_errors.get((_in(kind), _in(counter), _in(location)), 0))

    @_sym("nvmlDeviceGetComputeMode")
    def _compute_mode(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.compute_mode)

    @_sym("nvmlDeviceGetPersistenceMode")
    def _persistence_mode(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.persistence_mode)

    @_sym("nvmlDeviceGetEccMode")
    def _ecc_mode(self, gpu: FakeGpu, mig: None, current: Any, pending: Any) -> int:
        modes = gpu.ecc_mode
        return _put(current, modes and modes[0]) or _put(pending, modes and modes[1])

    @_sym("nvmlDeviceGetPowerManagementDefaultLimit")
    def _default_power_limit(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.default_power_limit_mw)

    @_sym("nvmlDeviceGetTotalEnergyConsumption")
    def _energy(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.energy_mj)

    @_sym("nvmlDeviceGetPcieReplayCounter")
    def _replay(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.pcie_replay_counter)

    @_sym("nvmlDeviceGetPcieThroughput")
    def _pcie_throughput(self, gpu: FakeGpu, mig: None, counter: Any, out: Any) -> int:
        values = {
            pynvml.NVML_PCIE_UTIL_TX_BYTES: gpu.pcie_tx_kbps,
            pynvml.NVML_PCIE_UTIL_RX_BYTES: gpu.pcie_rx_kbps,
        }
        if _in(counter) not in values:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        if self.pcie_sample_s > 0:  # the window: the lock is let go, as the driver lets other calls through
            self.pcie_in_flight += 1
            self.pcie_most_in_flight = max(self.pcie_most_in_flight, self.pcie_in_flight)
            end = time.monotonic() + self.pcie_sample_s
            while (left := end - time.monotonic()) > 0:
                self._cond.wait(left)
            self.pcie_in_flight -= 1
        return _put(out, values[_in(counter)])

    @_sym("nvmlDeviceGetUtilizationRates")
    def _utilization(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        util = _target(out)
        util.gpu, util.memory = gpu.gpu_util, gpu.mem_util
        return _OK

    @_sym("nvmlDeviceGetEncoderUtilization")
    def _encoder(self, gpu: FakeGpu, mig: None, util: Any, period: Any) -> int:
        return _put(util, gpu.enc_util) or _put(period, gpu.enc_sampling_us)

    @_sym("nvmlDeviceGetDecoderUtilization")
    def _decoder(self, gpu: FakeGpu, mig: None, util: Any, period: Any) -> int:
        return _put(util, gpu.dec_util) or _put(period, gpu.dec_sampling_us)

    @_sym("nvmlDeviceGetMemoryInfo", mig_ok=True)
    def _memory_v1(self, gpu: FakeGpu, mig: FakeMigDevice | None, out: Any) -> int:
        mem = (mig or gpu).memory
        if mem is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        info = _target(out)
        info.total, info.free, info.used = mem.total, mem.free, mem.total - mem.free  # v1 counts reserved
        return _OK

    @_sym("nvmlDeviceGetMemoryInfo_v2", mig_ok=True)
    def _memory_v2(self, gpu: FakeGpu, mig: FakeMigDevice | None, out: Any) -> int:
        mem, info = (mig or gpu).memory, _target(out)
        if info.version != pynvml.nvmlMemory_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if mem is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        info.total, info.reserved, info.free, info.used = mem.total, mem.reserved, mem.free, mem.used
        return _OK

    @_sym("nvmlDeviceGetFieldValues", mig_ok=True)
    def _field_values(self, gpu: FakeGpu, mig: FakeMigDevice | None, count: Any, out: Any) -> int:
        values, now_us = _target(out), int(time.time() * 1e6)
        for i in range(_in(count)):
            slot = values[i]
            ret, vtype, value = (mig or gpu).field_value(slot.fieldId, slot.scopeId)
            slot.nvmlReturn, slot.valueType, slot.timestamp, slot.latencyUsec = ret, vtype, now_us, 0
            if ret == _OK:
                setattr(slot.value, _VALUE_MEMBER[vtype], value)
        return _OK

    @_sym("nvmlDeviceGetNvLinkErrorCounter")
    def _nvlink_error(self, gpu: FakeGpu, mig: None, link: Any, counter: Any, out: Any) -> int:
        if not gpu.nvlink_tx_kib:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        if _in(link) >= len(gpu.nvlink_tx_kib):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        return _put(out, gpu.nvlink_errors.get((_in(link), _in(counter)), 0))

    @_sym("nvmlDeviceGetRemappedRows")
    def _remapped_rows(self, gpu: FakeGpu, mig: None, corr: Any, unc: Any, pend: Any, fail: Any) -> int:
        if gpu.remapped_rows is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        for out, value in zip((corr, unc, pend, fail), gpu.remapped_rows, strict=True):
            _put(out, value)
        return _OK

    @_sym("nvmlDeviceGetGridLicensableFeatures_v4")
    def _grid(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        info = _target(out)
        info.isGridLicenseSupported = int(gpu.grid_license_supported)
        features = gpu.grid_features[: pynvml.NVML_GRID_LICENSE_FEATURE_MAX_COUNT]
        info.licensableFeaturesCount = len(features)
        for slot, feat in zip(info.gridLicensableFeatures, features, strict=False):
            slot.featureCode, slot.featureState = feat.code, feat.state
            slot.licenseInfo, slot.productName = feat.license_info.encode(), feat.product_name.encode()
            slot.featureEnabled = int(feat.enabled)
        return _OK

    # ------------------------------------------------------------------ MIG

    @_sym("nvmlDeviceIsMigDeviceHandle", mig_ok=True)
    def _is_mig(self, gpu: FakeGpu, mig: FakeMigDevice | None, out: Any) -> int:
        return _put(out, int(mig is not None))

    @_sym("nvmlDeviceGetMigMode")
    def _mig_mode(self, gpu: FakeGpu, mig: None, current: Any, pending: Any) -> int:
        if not gpu.mig_capable:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        return _put(current, gpu.mig_mode) or _put(pending, gpu.mig_pending)

    @_sym("nvmlDeviceGetMaxMigDeviceCount")
    def _max_mig(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        if not gpu.mig_capable:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        return _put(out, gpu.max_mig_devices if gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE else 0)

    @_sym("nvmlDeviceGetMigDeviceHandleByIndex", mig_ok=True)
    def _mig_by_index(self, gpu: FakeGpu, mig: FakeMigDevice | None, index: Any, out: Any) -> int:
        if mig is not None or not gpu.mig_capable:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT if gpu.mig_capable else pynvml.NVML_ERROR_NOT_SUPPORTED
        idx = _in(index)
        if gpu.mig_mode != pynvml.NVML_DEVICE_MIG_ENABLE or idx >= gpu.max_mig_devices:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        found = gpu.mig_at(idx)
        if found is None:
            return pynvml.NVML_ERROR_NOT_FOUND
        _set_pointer(out, found.handle_address)
        return _OK

    @_sym("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig_ok=True)
    def _parent(self, gpu: FakeGpu, mig: FakeMigDevice | None, out: Any) -> int:
        if mig is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        _set_pointer(out, gpu.handle_address)
        return _OK

    @_sym("nvmlDeviceGetGpuInstanceId", mig_ok=True)
    def _gi_id(self, gpu: FakeGpu, mig: FakeMigDevice | None, out: Any) -> int:
        return _put(out, mig.gpu_instance_id if mig else None)

    @_sym("nvmlDeviceGetComputeInstanceId", mig_ok=True)
    def _ci_id(self, gpu: FakeGpu, mig: FakeMigDevice | None, out: Any) -> int:
        return _put(out, mig.compute_instance_id if mig else None)

    @_sym("nvmlDeviceGetAttributes_v2", mig_ok=True)
    def _attributes(self, gpu: FakeGpu, mig: FakeMigDevice | None, out: Any) -> int:
        if mig is None:  # NVML documents this call for MIG device handles only
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        a = _target(out)
        a.multiprocessorCount, a.memorySizeMB = mig.multiprocessor_count, mig.memory_size_mb
        a.gpuInstanceSliceCount = mig.gpu_instance_slice_count
        a.computeInstanceSliceCount = mig.compute_instance_slice_count
        a.sharedCopyEngineCount, a.sharedDecoderCount = mig.shared_copy_engines, mig.shared_decoders
        a.sharedEncoderCount, a.sharedJpegCount = mig.shared_encoders, mig.shared_jpeg
        a.sharedOfaCount = mig.shared_ofa
        return _OK

    # ------------------------------------------------------------------ processes

    def _process_list(self, kind: str, gpu: FakeGpu, mig: FakeMigDevice | None, count: Any, infos: Any) -> int:
        procs = [
            p
            for p in gpu.processes
            if p.kind == kind
            and (mig is None
                 or (p.gpu_instance_id, p.compute_instance_id) == (mig.gpu_instance_id, mig.compute_instance_id))
        ]
        counter = _target(count)
        capacity, counter.value = counter.value, len(procs)
        if infos is None or capacity < len(procs):
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE if procs else _OK
        not_available = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        for slot, proc in zip(infos, procs, strict=False):
            slot.pid = proc.pid
            slot.usedGpuMemory = not_available if proc.used_memory is None else proc.used_memory
            slot.gpuInstanceId, slot.computeInstanceId = proc.gpu_instance_id, proc.compute_instance_id
        return _OK

    @_sym("nvmlDeviceGetComputeRunningProcesses_v3", mig_ok=True)
    def _compute_processes(self, gpu: FakeGpu, mig: FakeMigDevice | None, count: Any, infos: Any) -> int:
        return self._process_list("compute", gpu, mig, count, infos)

    @_sym("nvmlDeviceGetGraphicsRunningProcesses_v3", mig_ok=True)
    def _graphics_processes(self, gpu: FakeGpu, mig: FakeMigDevice | None, count: Any, infos: Any) -> int:
        return self._process_list("graphics", gpu, mig, count, infos)

    @_sym("nvmlDeviceGetMPSComputeRunningProcesses_v3", mig_ok=True)
    def _mps_processes(self, gpu: FakeGpu, mig: FakeMigDevice | None, count: Any, infos: Any) -> int:
        return self._process_list("mps", gpu, mig, count, infos)

    @_sym("nvmlDeviceGetProcessUtilization")
    def _process_util(self, gpu: FakeGpu, mig: None, samples: Any, count: Any, since: Any) -> int:
        if gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE:  # per-process utilisation does not exist under MIG
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        fresh = [s for s in gpu.process_samples if s.timestamp_us > _in(since)]
        counter = _target(count)
        if not fresh:
            counter.value = 0
            return pynvml.NVML_ERROR_NOT_FOUND
        if samples is None or counter.value < len(fresh):
            counter.value = len(fresh)
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        for slot, s in zip(samples, fresh, strict=False):
            slot.pid, slot.timeStamp, slot.smUtil, slot.memUtil = s.pid, s.timestamp_us, s.sm, s.mem
            slot.encUtil, slot.decUtil = s.enc, s.dec
        counter.value = len(fresh)
        return _OK

    # ------------------------------------------------------------------ events

    def _alloc(self) -> tuple[ctypes.Array[ctypes.c_ubyte], int]:
        memory = _new_handle_memory()
        return memory, ctypes.addressof(memory)

    @_sym("nvmlEventSetCreate", None)
    def _event_set_create(self, out: Any) -> int:
        memory, address = self._alloc()
        self._event_sets[address] = _EventSet(memory)
        _set_pointer(out, address)
        return _OK

    @_sym("nvmlEventSetFree", None)
    def _event_set_free(self, event_set: Any) -> int:
        if self._event_sets.pop(address_of(event_set) or 0, None) is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        self._cond.notify_all()
        return _OK

    @_sym("nvmlDeviceGetSupportedEventTypes")
    def _supported_events(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        return _put(out, gpu.supported_events)

    @_sym("nvmlDeviceRegisterEvents")
    def _register(self, gpu: FakeGpu, mig: None, types: Any, event_set: Any) -> int:
        es = self._event_sets.get(address_of(event_set) or 0)
        mask = _in(types)
        if es is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        if mask & ~gpu.supported_events:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        es.registrations[gpu.index] = es.registrations.get(gpu.index, 0) | mask
        self._cond.notify_all()
        return _OK

    @_sym("nvmlEventSetWait_v2", None)
    def _event_wait(self, event_set: Any, out: Any, timeout_ms: Any) -> int:
        address = address_of(event_set) or 0
        deadline = time.monotonic() + _in(timeout_ms) / 1000
        while True:  # the condition releases self.lock while sleeping
            es = self._event_sets.get(address)
            if es is None:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            if self._init_count == 0:
                return pynvml.NVML_ERROR_UNINITIALIZED
            if es.queue:
                gpu_index, event_type, data, gi, ci = es.queue.popleft()
                ev = _target(out)
                ev.device = ctypes.cast(self.gpus[gpu_index].handle_address, pynvml.c_nvmlDevice_t)
                ev.eventType, ev.eventData, ev.gpuInstanceId, ev.computeInstanceId = event_type, data, gi, ci
                return _OK
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return pynvml.NVML_ERROR_TIMEOUT
            self._cond.wait(remaining)

    # ------------------------------------------------------------------ GPM

    @_sym("nvmlGpmQueryDeviceSupport")
    def _gpm_support(self, gpu: FakeGpu, mig: None, out: Any) -> int:
        info = _target(out)
        if info.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        info.isSupportedDevice = int(gpu.gpm_supported)
        return _OK

    @_sym("nvmlGpmSampleAlloc", None)
    def _gpm_alloc(self, out: Any) -> int:
        memory, address = self._alloc()
        self._gpm_samples[address] = _GpmSample(memory)
        _set_pointer(out, address)
        return _OK

    @_sym("nvmlGpmSampleFree", None)
    def _gpm_free(self, sample: Any) -> int:
        found = self._gpm_samples.pop(address_of(sample) or 0, None)
        return _OK if found else pynvml.NVML_ERROR_INVALID_ARGUMENT

    def _gpm_take(self, gpu: FakeGpu, source: _FakeDevice | None, sample: Any) -> int:
        slot = self._gpm_samples.get(address_of(sample) or 0)
        if slot is None or source is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        if not gpu.gpm_supported:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        slot.source, slot.taken_at, slot.counters = source, self.clock(), dict(source.gpm_counters)
        return _OK

    @_sym("nvmlGpmSampleGet")
    def _gpm_sample(self, gpu: FakeGpu, mig: None, sample: Any) -> int:
        return self._gpm_take(gpu, gpu, sample)

    @_sym("nvmlGpmMigSampleGet")
    def _gpm_mig_sample(self, gpu: FakeGpu, mig: None, gi: Any, sample: Any) -> int:
        source = next((m for m in gpu.migs if m.gpu_instance_id == _in(gi)), None)
        return self._gpm_take(gpu, source, sample)

    @_sym("nvmlGpmMetricsGet", None)
    def _gpm_metrics(self, out: Any) -> int:
        req = _target(out)
        if req.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        s1, s2 = (self._gpm_samples.get(address_of(s) or 0) for s in (req.sample1, req.sample2))
        if s1 is None or s2 is None or s1.source is None or s1.source is not s2.source:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        elapsed = s2.taken_at - s1.taken_at
        if elapsed <= 0:  # this fake insists on (older, newer); what real NVML does with a reversed pair is unknown
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        for i in range(req.numMetrics):
            metric = req.metrics[i]
            before, after = s1.counters.get(metric.metricId), s2.counters.get(metric.metricId)
            supported = before is not None and after is not None
            metric.nvmlReturn = _OK if supported else pynvml.NVML_ERROR_NOT_SUPPORTED
            metric.value = (after - before) / elapsed if supported else 0.0  # type: ignore[operator]
        return _OK


# --------------------------------------------------------------------------- installation


@contextmanager
def install_fake_nvml(fake: FakeNvml) -> Iterator[FakeNvml]:
    """Put ``fake`` underneath pynvml for the duration; pynvml's module state is restored afterwards.

    pynvml starts unloaded and uninitialised (``nvmlLib is None``, refcount 0), exactly like a fresh
    process: calls before ``nvmlInit()`` raise ``NVMLError_Uninitialized``.
    """

    def load_library() -> None:
        if fake.init_error == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            pynvml._nvmlCheckReturn(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        with pynvml.libLoadLock:
            if pynvml.nvmlLib is None:
                pynvml.nvmlLib = fake.lib

    with pynvml.libLoadLock:
        saved = (
            pynvml.nvmlLib,
            pynvml._nvmlLib_refcount,
            dict(pynvml._nvmlGetFunctionPointer_cache),
            pynvml._LoadNvmlLibrary,
            dict(pynvml.NVMLError._errcode_to_string),
        )
        pynvml.nvmlLib, pynvml._nvmlLib_refcount = None, 0
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._LoadNvmlLibrary = load_library
    try:
        yield fake
    finally:
        with pynvml.libLoadLock:
            pynvml.nvmlLib, pynvml._nvmlLib_refcount, cache, pynvml._LoadNvmlLibrary, errs = saved
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlGetFunctionPointer_cache.update(cache)
            pynvml.NVMLError._errcode_to_string.clear()
            pynvml.NVMLError._errcode_to_string.update(errs)
        with fake.lock:
            fake._cond.notify_all()


@pytest.fixture
def fake_nvml() -> Iterator[FakeNvml]:
    """Two simulated H100 80GB GPUs installed under pynvml (not yet initialised)."""
    with install_fake_nvml(FakeNvml(2)) as fake:
        yield fake
