"""Real GPUs through NVML (the ``pynvml`` module of nvidia-ml-py). Needs no root and no SYS_ADMIN."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml  # the binding and its constants; the NVML library itself loads at nvmlInit

from exporter.backends.base import (
    Backend,
    BackendUnavailable,
    DeviceLost,
    DeviceMode,
    FieldNotSupported,
    FieldUnavailable,
    GpuProcess,
    ProcessReport,
    XidEvent,
    mig_profile_name,
    select_entities,
)
from exporter.backends.gpm import GpmSampler, Results
from exporter.backends.sampled import SampledCalls
from exporter.fields.entities import GpuEntity
from exporter.fields.table import Field, Value

log = logging.getLogger("exporter.nvml")

# NVML return codes by what they mean for the exporter (the binding's names for nvml.h's numbers).
_BACKEND_DOWN = {pynvml.NVML_ERROR_UNINITIALIZED, pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
                 pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH}
_NOT_SUPPORTED = {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION,
                  pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_DEPRECATED}
_DEVICE_LOST = {pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED, pynvml.NVML_ERROR_UNKNOWN}
_NO_INSTANCE = pynvml.NVML_VALUE_NOT_AVAILABLE_uint.value  # an event's gpuInstanceId when not on a MIG instance
# nvmlFieldValue_t.value's member for each nvmlValueType_t
_FIELD_MEMBERS = {pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
                  pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
                  pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
                  pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal"}


class NvmlMissing(Exception):
    """NVML cannot be loaded at all: a deployment problem (no NVIDIA runtime), not a transient failure."""


def _load_pynvml() -> Any:
    """The binding whose calls the backend makes (tests give the backend a fake of it instead)."""
    return pynvml


def translate(exc: BaseException) -> Exception:
    """Map an NVML exception to the backend-neutral error the collector acts on."""
    code = getattr(exc, "value", None)
    text = str(exc)
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        return FieldNotSupported(f"driver lacks this call: {text}")
    if code in _NOT_SUPPORTED:
        return FieldNotSupported(text)
    if code in _DEVICE_LOST:
        return DeviceLost(text)
    if code in _BACKEND_DOWN:
        return BackendUnavailable(f"NVML: {text}")
    return FieldUnavailable(text)


class DeviceContext:
    """What field readers see: the NVML module, the GPU handle, the MIG (or GPU) handle, memoised calls."""

    def __init__(self, nv: Any, gpu: Any, dev: Any, xid: Callable[[], int | None],
                 rates: dict[str, tuple[float, float]],
                 gpm: Callable[[bool], Results] | None = None,
                 sampled: Callable[[str, Callable[[], Any]], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.nv, self.gpu, self.dev = nv, gpu, dev
        self._xid = xid
        self._rates = rates
        self._clock = clock
        self._gpm = gpm
        self._sampled = sampled
        self._memo: dict[Any, Any] = {}

    def _once(self, key: Any, call: Callable[[], Any]) -> Any:
        if key not in self._memo:
            try:
                self._memo[key] = call()
            except Exception as exc:  # remember failures too, so sibling fields do not retry the call
                self._memo[key] = exc
        result = self._memo[key]
        if isinstance(result, Exception):
            raise result
        return result

    def memory(self) -> Any:
        """Memory info v2 (``used`` excludes ``reserved``, as DCGM reads it on R510+ drivers)."""
        return self._once("memory", lambda: self.nv.nvmlDeviceGetMemoryInfo(self.dev, version=self.nv.nvmlMemory_v2))

    def utilization(self) -> Any:
        return self._once("util", lambda: self.nv.nvmlDeviceGetUtilizationRates(self.dev))

    def pci_info(self) -> Any:
        return self._once("pci", lambda: self.nv.nvmlDeviceGetPciInfo(self.gpu))

    def power_limit_constraints(self) -> Any:
        return self._once("limits", lambda: self.nv.nvmlDeviceGetPowerManagementLimitConstraints(self.gpu))

    def remapped_rows(self) -> Any:
        return self._once("remap", lambda: self.nv.nvmlDeviceGetRemappedRows(self.gpu))

    def temperature(self) -> int:
        nv = self.nv
        try:
            return nv.nvmlDeviceGetTemperatureV(self.gpu, nv.NVML_TEMPERATURE_GPU)
        except nv.NVMLError_FunctionNotFound:
            return nv.nvmlDeviceGetTemperature(self.gpu, nv.NVML_TEMPERATURE_GPU)

    def clock_event_reasons(self) -> int:
        """The clock-event (throttle) reasons bitmask; drivers before R535 only have the throttle-named call."""
        nv = self.nv
        try:
            return nv.nvmlDeviceGetCurrentClocksEventReasons(self.gpu)
        except nv.NVMLError_FunctionNotFound:
            return nv.nvmlDeviceGetCurrentClocksThrottleReasons(self.gpu)

    def field_value(self, field_id: int, *, scope: int | None = None, as_uint: bool = False) -> Value:
        """One NVML field value, decoded by its value type; a per-field error raises like a call would."""
        request = (field_id, scope) if scope is not None else field_id
        fv = self._once(("fv", field_id, scope), lambda: self.nv.nvmlDeviceGetFieldValues(self.gpu, [request])[0])
        if fv.nvmlReturn != pynvml.NVML_SUCCESS:
            raise self.nv.NVMLError(fv.nvmlReturn)
        if as_uint:  # DCGM's work-around for drivers that mislabel the value type (r545)
            return int(fv.value.uiVal)
        value = getattr(fv.value, _FIELD_MEMBERS[fv.valueType])
        return float(value) if fv.valueType == pynvml.NVML_VALUE_TYPE_DOUBLE else int(value)

    def sampled(self, name: str, call: Callable[[], Any]) -> Any:
        """A call that samples over a window before it answers (see :mod:`exporter.backends.sampled`, which also
        makes it once per collection)."""
        return call() if self._sampled is None else self._sampled(name, call)

    def rate(self, key: str, counter: float) -> float:
        """Per-second rate of a monotonically increasing counter since the previous collection; 0 at first."""
        now = self._clock()
        previous = self._rates.get(key)
        self._rates[key] = (counter, now)
        if previous is None or now <= previous[1] or counter < previous[0]:
            return 0.0
        return (counter - previous[0]) / (now - previous[1])

    def gpm(self, metric_id: int, gpu_level: bool) -> float:
        """One GPM metric of this collection's sample pair: the GPU's (``gpu_level``) or this GPU instance's."""
        if self._gpm is None:
            raise FieldNotSupported("GPM is not available")
        code, value = self._gpm(gpu_level).get(metric_id, (pynvml.NVML_ERROR_NOT_SUPPORTED, math.nan))
        if code != pynvml.NVML_SUCCESS:
            raise self.nv.NVMLError(code)
        if math.isnan(value):  # DCGM turns NaN into a blank value
            raise FieldUnavailable("GPM metric has no value for this interval")
        return value

    def last_xid(self) -> int:
        xid = self._xid()
        if xid is None:
            raise FieldUnavailable("no XID seen since the exporter started")
        return xid

    @staticmethod
    def unavailable(reason: str) -> FieldUnavailable:
        return FieldUnavailable(reason)

    @staticmethod
    def not_supported(reason: str) -> FieldNotSupported:
        return FieldNotSupported(reason)


@dataclass
class _Handles:
    gpu: Any
    dev: Any
    members: tuple[Any, ...] = ()
    """Every MIG device (compute instance) of a GPU instance; empty for a GPU."""


class XidWatcher:
    """Waits for XID events on its own thread (NVML event sets are not thread-safe) and keeps the last one."""

    def __init__(self, nv: Any, gpu_handles: Callable[[], dict[int, Any]]) -> None:
        self._nv = nv
        self._gpu_handles = gpu_handles
        self._last: dict[tuple[int, int | None], tuple[int, float]] = {}
        self._pending: list[XidEvent] = []
        self._pending_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.events_total = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="xid-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def last(self, gpu: int, gpu_instance_id: int | None) -> int | None:
        """The newest XID for this entity: one attributed to its GPU instance, or one for the whole GPU."""
        candidates = [self._last.get((gpu, gpu_instance_id)), self._last.get((gpu, None))]
        found = [c for c in candidates if c is not None]
        return max(found, key=lambda c: c[1])[0] if found else None

    def record(self, gpu: int, gpu_instance_id: int | None, xid: int) -> None:
        now = time.monotonic()
        self._last[(gpu, gpu_instance_id)] = (xid, now)
        with self._pending_lock:
            self._pending.append(XidEvent(gpu, xid, now))
        self.events_total += 1

    def drain(self) -> list[XidEvent]:
        """Events recorded since the previous drain (the collector thread counts them in its windows)."""
        with self._pending_lock:
            events, self._pending = self._pending, []
        return events

    def _run(self) -> None:
        nv = self._nv
        while not self._stop.is_set():
            try:
                event_set = nv.nvmlEventSetCreate()
            except nv.NVMLError as exc:
                log.warning("XID events unavailable: %s", exc)
                self._stop.wait(30)
                continue
            try:
                by_address = self._register(event_set)
                if not by_address:
                    log.info("no GPU supports XID events; DCGM_FI_DEV_XID_ERRORS will stay absent")
                    self._stop.wait(60)
                    continue
                self._wait_loop(event_set, by_address)
            finally:
                with contextlib.suppress(nv.NVMLError):
                    nv.nvmlEventSetFree(event_set)

    def _register(self, event_set: Any) -> dict[int, int]:
        nv = self._nv
        by_address: dict[int, int] = {}
        for index, handle in self._gpu_handles().items():
            try:
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, event_set)
            except nv.NVMLError as exc:
                log.info("GPU %d: XID events not available: %s", index, exc)
                continue
            by_address[ctypes.cast(handle, ctypes.c_void_p).value or 0] = index
        return by_address

    def _wait_loop(self, event_set: Any, by_address: dict[int, int]) -> None:
        nv = self._nv
        while not self._stop.is_set():
            try:
                data = nv.nvmlEventSetWait_v2(event_set, 500)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) == pynvml.NVML_ERROR_TIMEOUT:
                    continue
                log.warning("XID event wait failed, re-registering: %s", exc)
                self._stop.wait(5)
                return
            index = by_address.get(ctypes.cast(data.device, ctypes.c_void_p).value or 0)
            if index is None:
                continue
            gi = None if data.gpuInstanceId == _NO_INSTANCE else int(data.gpuInstanceId)
            self.record(index, gi, int(data.eventData))
            log.warning("GPU %d%s: XID %d", index, f" GPU instance {gi}" if gi is not None else "", data.eventData)


class NvmlBackend(Backend):
    name = "nvml"

    def __init__(self, nv: Any | None = None, *, gpm_min_gap_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, accept_fake_gpus: bool = False) -> None:
        self._nv = nv
        # dcgm-exporter's --fake-gpus (deviceinfo/device_info.go): a GPU whose identity cannot be read is kept
        # as GPU i with UUID "fake<i>" instead of failing; here it is listed, and its fields read as unavailable.
        self._accept_fake_gpus = accept_fake_gpus
        self._fake: set[int] = set()
        self._gpm_min_gap_s = gpm_min_gap_s
        self._clock = clock
        self._gpm: GpmSampler | None = None
        self._sampled = SampledCalls()
        self._process_util: dict[int, tuple[dict[int, int], bool] | Exception] = {}
        self._util_seen_us: dict[int, int] = {}
        self._handles: dict[tuple[int, int | None], _Handles] = {}
        self._gpu_handles: dict[int, Any] = {}
        self._contexts: dict[tuple[int, int | None], DeviceContext] = {}
        self._rates: dict[tuple[int, int | None], dict[str, tuple[float, float]]] = {}
        self._initialised = False
        self._failing: set[int] = set()
        self.xid: XidWatcher | None = None

    @property
    def nv(self) -> Any:
        if self._nv is None:
            self._nv = _load_pynvml()
        return self._nv

    def open(self) -> None:
        """Initialise NVML. A missing library raises NvmlMissing; other failures BackendUnavailable."""
        nv = self.nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                raise NvmlMissing(
                    "NVML library libnvidia-ml.so.1 not found: run on a GPU node with the NVIDIA driver, and in "
                    "Kubernetes with the NVIDIA container runtime (runtimeClassName: nvidia)") from None
            raise BackendUnavailable(f"NVML init failed: {exc}") from None
        self._initialised = True
        if self._gpm is not None:  # samples from before a re-initialisation are not trusted
            self._gpm.close()
        self._sampled.close()  # nor calls on the handles of before
        self._gpm = GpmSampler(nv, self._gpm_min_gap_s, self._clock)

    def close(self) -> None:
        self.stop_events()
        self._sampled.close()
        if self._gpm is not None and self._initialised:
            self._gpm.close()
        if self._initialised:
            with contextlib.suppress(self.nv.NVMLError):
                self.nv.nvmlShutdown()
            self._initialised = False

    def _ensure_open(self) -> None:
        if not self._initialised:
            self.open()

    def begin_collection(self) -> None:
        self._contexts.clear()
        self._process_util.clear()
        if self._gpm is not None:
            self._gpm.begin_collection()
        self._sampled.begin()

    def entities(self, mode: DeviceMode) -> list[GpuEntity]:
        nv = self.nv
        try:
            self._ensure_open()
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            err = translate(exc)
            if isinstance(err, BackendUnavailable):
                self._initialised = False  # re-initialise on the next attempt
            raise BackendUnavailable(str(err) or str(exc)) from None
        gpus: list[GpuEntity] = []
        instances: dict[int, list[GpuEntity]] = {}
        handles: dict[tuple[int, int | None], _Handles] = {}
        gpu_handles: dict[int, Any] = {}
        for index in range(count):
            try:
                gpu, handle = self._describe_gpu(index)
                gpu_handles[index] = handle
                handles[gpu.key] = _Handles(handle, handle)
                gpus.append(gpu)
                for entity, members in self._describe_instances(gpu, handle):
                    instances.setdefault(index, []).append(entity)
                    handles[entity.key] = _Handles(handle, members[0], members)
            except nv.NVMLError as exc:
                err = translate(exc)
                if isinstance(err, BackendUnavailable):
                    raise err from None
                if self._accept_fake_gpus:
                    if index not in self._fake:
                        log.warning("GPU %d cannot be described (%s); listed as fake%d (--fake-gpus)", index, exc,
                                    index)
                    self._fake.add(index)
                    gpus.append(GpuEntity(gpu=index, uuid=f"fake{index}", pci_bus_id="", model_name=""))
                    continue
                if index not in self._failing:
                    log.warning("GPU %d cannot be enumerated, retrying every collection: %s", index, exc)
                self._failing.add(index)
                continue
            self._failing.discard(index)
            self._fake.discard(index)
        self._handles, self._gpu_handles = handles, gpu_handles
        if self._gpm is not None:
            self._gpm.retain(set(handles))
        return select_entities(gpus, instances, mode)

    def _describe_gpu(self, index: int) -> tuple[GpuEntity, Any]:
        nv = self.nv
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        return GpuEntity(
            gpu=index,
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            pci_bus_id=_text(nv.nvmlDeviceGetPciInfo(handle).busId),
            model_name=_text(nv.nvmlDeviceGetName(handle)),
        ), handle

    def _describe_instances(self, gpu: GpuEntity, handle: Any) -> list[tuple[GpuEntity, tuple[Any, ...]]]:
        """MIG GPU instances of a GPU, compute instances folded into their GPU instance (as DCGM does)."""
        nv = self.nv
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
        except nv.NVMLError as exc:
            if isinstance(translate(exc), FieldNotSupported):
                return []
            raise
        if current != nv.NVML_DEVICE_MIG_ENABLE:
            return []
        by_gi: dict[int, dict[str, Any]] = {}
        for slot in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) in (pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                    continue
                raise
            gi = int(nv.nvmlDeviceGetGpuInstanceId(mig))
            entry = by_gi.setdefault(gi, {"handles": [], "uuids": [], "profile": None})
            entry["handles"].append(mig)
            entry["uuids"].append(_text(nv.nvmlDeviceGetUUID(mig)))
            if entry["profile"] is None:
                attrs = nv.nvmlDeviceGetAttributes(mig)
                entry["profile"] = mig_profile_name(attrs.gpuInstanceSliceCount, attrs.memorySizeMB)
        return [
            (GpuEntity(gpu=gpu.gpu, uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id, model_name=gpu.model_name,
                       gpu_instance_id=gi, gpu_instance_profile=entry["profile"],
                       mig_uuids=tuple(sorted(entry["uuids"]))), tuple(entry["handles"]))
            for gi, entry in sorted(by_gi.items())
        ]

    def _context(self, entity: GpuEntity) -> DeviceContext:
        ctx = self._contexts.get(entity.key)
        if ctx is None:
            handles = self._handles.get(entity.key)
            if handles is None:
                raise DeviceLost("not enumerated")
            xid = self.xid
            gpm = self._gpm
            sampled = self._sampled
            ctx = DeviceContext(
                self.nv, handles.gpu, handles.dev,
                (lambda: xid.last(entity.gpu, entity.gpu_instance_id)) if xid else (lambda: None),
                self._rates.setdefault(entity.key, {}),
                (lambda gpu_level: gpm.metrics((entity.gpu, None if gpu_level else entity.gpu_instance_id),
                                               handles.gpu)) if gpm else None,
                lambda name, call: sampled.get((entity.gpu, name), call),  # a GPU's, MIG or not
                self._clock)
            self._contexts[entity.key] = ctx
        return ctx

    def read(self, entity: GpuEntity, field: Field) -> Value:
        return self._call(entity, field)

    def label(self, entity: GpuEntity, field: Field) -> str:
        return str(self._call(entity, field))

    def _call(self, entity: GpuEntity, field: Field) -> Any:
        if field.nvml is None:
            raise FieldNotSupported(f"{field.name} has no NVML source in this exporter")
        if entity.gpu in self._fake and entity.key not in self._handles:
            raise FieldUnavailable(f"GPU {entity.gpu} is a fake GPU (--fake-gpus): NVML cannot read it")
        ctx = self._context(entity)
        try:
            return field.nvml(ctx)
        except (FieldNotSupported, FieldUnavailable, DeviceLost, BackendUnavailable):
            raise
        except Exception as exc:
            if isinstance(exc, self.nv.NVMLError) or type(exc).__name__ == "NVMLLibraryMismatchError":
                err = translate(exc)
                if isinstance(err, BackendUnavailable):
                    self._initialised = False
                raise err from None
            raise

    def processes(self, entity: GpuEntity) -> ProcessReport:
        """Compute, graphics and MPS-client processes with their framebuffer, joined with the newest SM
        utilisation sample per process since the previous collection (none under MIG)."""
        handles = self._handles.get(entity.key)
        if handles is None:
            raise DeviceLost("not enumerated")
        nv = self.nv
        try:
            memory = self._process_memory(handles.members or (handles.gpu,))
            util, supported = self._utilisation(entity.gpu, handles.gpu) if not entity.is_mig else ({}, False)
        except (FieldNotSupported, FieldUnavailable, DeviceLost, BackendUnavailable):
            raise
        except Exception as exc:
            if isinstance(exc, nv.NVMLError) or type(exc).__name__ == "NVMLLibraryMismatchError":
                err = translate(exc)
                if isinstance(err, BackendUnavailable):
                    self._initialised = False
                raise err from None
            raise
        return ProcessReport(tuple(GpuProcess(pid, used, util.get(pid, 0)) for pid, used in sorted(memory.items())),
                             supported)

    def _process_memory(self, devices: tuple[Any, ...]) -> dict[int, int | None]:
        """PID -> bytes over NVML's three process lists; a list the driver does not support is skipped."""
        nv = self.nv
        calls = (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses,
                 nv.nvmlDeviceGetMPSComputeRunningProcesses)
        memory: dict[int, int | None] = {}
        answered = False
        for device in devices:
            for call in calls:
                try:
                    processes = call(device)
                except Exception as exc:
                    if isinstance(translate(exc), FieldNotSupported):
                        continue
                    raise
                answered = True
                for proc in processes:  # a process in two lists (C+G) holds one allocation: never add twice
                    pid, used = int(proc.pid), proc.usedGpuMemory
                    if used is None:  # WDDM: the driver cannot tell
                        memory.setdefault(pid, None)
                    else:
                        memory[pid] = max(memory.get(pid) or 0, int(used))
        if not answered:
            raise FieldNotSupported("no NVML process list is supported")
        return memory

    def _utilisation(self, index: int, gpu_handle: Any) -> tuple[dict[int, int], bool]:
        """PID -> SM % of its newest sample since the last call, once per GPU and collection."""
        if index not in self._process_util:
            try:
                self._process_util[index] = self._read_utilisation(index, gpu_handle)
            except Exception as exc:
                self._process_util[index] = exc
        found = self._process_util[index]
        if isinstance(found, Exception):
            raise found
        return found

    def _read_utilisation(self, index: int, gpu_handle: Any) -> tuple[dict[int, int], bool]:
        nv = self.nv
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(gpu_handle, self._util_seen_us.get(index, 0))
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_FOUND):  # no sample since the last call: nothing ran
                return {}, True
            if isinstance(translate(exc), FieldNotSupported):
                return {}, False
            raise
        newest: dict[int, tuple[int, int]] = {}
        for sample in samples:
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            if pid not in newest or stamp >= newest[pid][0]:
                newest[pid] = (stamp, int(sample.smUtil))
        if newest:
            self._util_seen_us[index] = max(stamp for stamp, _ in newest.values())
        return {pid: util for pid, (_, util) in newest.items()}, True

    def start_events(self) -> None:
        if self.xid is None:
            self.xid = XidWatcher(self.nv, lambda: dict(self._gpu_handles))
            self.xid.start()

    def xid_events(self) -> list[XidEvent]:
        return self.xid.drain() if self.xid is not None else []

    def stop_events(self) -> None:
        if self.xid is not None:
            self.xid.stop()
            self.xid = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
