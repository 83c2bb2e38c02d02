"""Simulated GPUs driven by a JSON state file that is re-read at every collection.

State file (every key optional; a field not given keeps its idle value from the field table)::

    {
      "gpus": {
        "0": {"DCGM_FI_DEV_GPU_UTIL": 85, "DCGM_FI_DEV_FB_USED": 30000},
        "1": {"lost": true},
        "2": {"unsupported": ["DCGM_FI_DEV_MEMORY_TEMP"], "xid": 79},
        "3": {"mig": [{"gpu_instance_id": 1, "profile": "3g.40gb", "DCGM_FI_DEV_FB_USED": 1200},
                      {"gpu_instance_id": 2, "profile": "1g.10gb", "compute_instances": 2,
                       "processes": [{"pid": 5150, "fb_used_mib": 900}]}]},
        "4": {"processes": [{"pid": 4242, "sm_util": 35, "fb_used_mib": 2048},
                            {"pid": 4343, "sm_util": 20, "fb_used_mib": 1024}]}
      },
      "nvml_error": null,
      "hang": false
    }

- ``lost``: the GPU behaves like NVML's GpuIsLost: its series disappear until it is back.
- ``unsupported``: fields that answer NotSupported, as on hardware that lacks them.
- ``xid``: the last XID error (no XID series until one is set, as with NVML events).
- ``xid_events``: XID events as an append-only log of codes (GPU level). Entries not seen before are events
  happening when the file is (re)read; they feed ``DCGM_EXP_XID_ERRORS_COUNT``, and the newest is the GPU's last
  XID unless ``xid`` says otherwise. Rewriting the list shorter starts a new log.
- Clock events: set ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` to a bitmask (e.g. 4, power cap); every collection
  samples it for ``DCGM_EXP_CLOCK_EVENTS_COUNT``.
- ``mig``: GPU instances (dcgm-exporter flex mode then reports them instead of the GPU). GPU-level fields
  come from the GPU's own keys; instance-level fields (framebuffer, XID, profiling) from the instance's keys.
  Utilisation, encoder and decoder answer NotSupported under MIG, as NVML does.
- ``processes``: what the driver's process APIs report for the GPU (or GPU instance): ``pid`` (required, as the
  exporter's /proc sees it), ``fb_used_mib`` (framebuffer in MiB, default 0) and ``sm_util`` (the process's SM
  utilisation in percent, an integer 0-100, default 0; not allowed under MIG, where NVML has no per-process
  utilisation).
- ``nvml_error``: a string makes the whole backend unavailable with that reason (``/health`` answers 503).
- ``hang`` (per GPU): every read of that GPU blocks, as a hung NVML call does, until a rewrite of the file clears
  it (the blocked call polls the file). ``hang`` at the top level: each collection blocks at its start (the whole
  driver hung).

Derived values: ``DCGM_FI_DEV_FB_FREE`` = total - used - reserved, ``DCGM_FI_DEV_FB_USED_PERCENT`` = used /
(total - reserved); ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` =
``DCGM_FI_DEV_GPU_UTIL`` / 100; ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` integrates the power draw over time;
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` is 1 (GPU idle) while ``DCGM_FI_DEV_GPU_UTIL`` is 0, else 0;
``DCGM_FI_DEV_MIG_MODE`` is 1 on a GPU with ``mig`` instances; ``DCGM_FI_DEV_COUNT`` is the GPU count.
Where ``processes`` are given, ``DCGM_FI_DEV_FB_USED`` defaults to their framebuffer sum and (outside MIG)
``DCGM_FI_DEV_GPU_UTIL`` to their SM utilisation sum, capped at 100.

Identities are deterministic: GPU ``i`` has UUID ``GPU-<uuid5(URL, "gpu-autoscaler/fake/<seed>/<i>")>``, PCI bus
id ``00000000:<0x10+i as 2 hex digits>:00.0``; MIG devices ``MIG-<uuid5(URL, ".../<i>/gi<g>/ci<c>")>``
(:mod:`clikit.fake_gpus`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clikit.fake_gpus import fake_gpu_uuid, fake_mig_uuid
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
    select_entities,
)
from exporter.fields.entities import GpuEntity
from exporter.fields.table import FIELDS_BY_NAME, MIB, Field, Value

log = logging.getLogger("exporter.fake")

DEFAULT_MODEL = "NVIDIA H100 80GB HBM3"
_GPU_KEYS = {"lost", "unsupported", "xid", "xid_events", "mig", "processes", "hang"}
_MIG_KEYS = {"gpu_instance_id", "profile", "compute_instances", "unsupported", "xid", "processes"}
_PROCESS_KEYS = {"pid", "fb_used_mib", "sm_util"}
_IDENTITY_LABELS = {"DCGM_FI_DEV_NAME": "model_name", "DCGM_FI_DEV_UUID": "uuid", "DCGM_FI_DEV_PCI_BUSID": "pci_bus_id"}
_NOT_ON_MIG = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL"}


class FakeStateError(ValueError):
    """The state file cannot be used; the message names the file and the offending key."""


def fake_pci_bus_id(index: int) -> str:
    return f"00000000:{0x10 + index:02X}:00.0"


@dataclass(frozen=True)
class _ProcessState:
    pid: int
    fb_used_mib: float
    sm_util: int


@dataclass(frozen=True)
class _MigState:
    gpu_instance_id: int
    profile: str
    compute_instances: int
    values: dict[str, Value]
    unsupported: frozenset[str]
    xid: int | None
    processes: tuple[_ProcessState, ...] = ()


@dataclass(frozen=True)
class _GpuState:
    values: dict[str, Value] = field(default_factory=dict)
    lost: bool = False
    hang: bool = False
    unsupported: frozenset[str] = frozenset()
    xid: int | None = None
    xid_events: tuple[int, ...] = ()
    mig: tuple[_MigState, ...] = ()
    processes: tuple[_ProcessState, ...] = ()


@dataclass(frozen=True)
class FakeState:
    gpus: dict[int, _GpuState]
    nvml_error: str | None = None
    hang: bool = False


def parse_state(data: Any, source: str, gpu_count: int) -> FakeState:
    """Validate a decoded state document; every error names ``source`` and the key path."""

    def fail(where: str, msg: str) -> FakeStateError:
        return FakeStateError(f"{source}: {where}: {msg}")

    if not isinstance(data, dict):
        raise FakeStateError(f"{source}: top level must be a JSON object")
    unknown = set(data) - {"gpus", "nvml_error", "hang"}
    if unknown:
        raise fail(sorted(unknown)[0], "unknown key (expected 'gpus', 'nvml_error', 'hang')")
    nvml_error = data.get("nvml_error")
    if nvml_error is not None and not isinstance(nvml_error, str):
        raise fail("nvml_error", "must be a string or null")
    gpus_doc = data.get("gpus", {})
    if not isinstance(gpus_doc, dict):
        raise fail("gpus", "must be an object keyed by GPU index")
    gpus: dict[int, _GpuState] = {}
    for key, doc in gpus_doc.items():
        where = f"gpus.{key}"
        if not (isinstance(key, str) and key.isdigit()):
            raise fail(where, "GPU keys must be indexes like \"0\"")
        index = int(key)
        if index >= gpu_count:
            raise fail(where, f"GPU {index} does not exist ({gpu_count} simulated GPUs, see --fake-gpu-count)")
        if not isinstance(doc, dict):
            raise fail(where, "must be an object")
        values = _field_values(doc, _GPU_KEYS, where, fail)
        migs = doc.get("mig", [])
        if not isinstance(migs, list):
            raise fail(f"{where}.mig", "must be a list of GPU instances")
        gpus[index] = _GpuState(
            values=values,
            lost=_typed(doc, "lost", bool, False, where, fail),
            hang=_typed(doc, "hang", bool, False, where, fail),
            unsupported=_unsupported(doc, where, fail),
            xid=_typed(doc, "xid", int, None, where, fail),
            xid_events=_xid_events(doc, where, fail),
            mig=tuple(_parse_mig(m, f"{where}.mig[{i}]", fail) for i, m in enumerate(migs)),
            processes=_parse_processes(doc, where, fail, utilisation=True),
        )
        ids = [m.gpu_instance_id for m in gpus[index].mig]
        if len(ids) != len(set(ids)):
            raise fail(f"{where}.mig", "gpu_instance_id values must be unique")
    hang = data.get("hang", False)
    if not isinstance(hang, bool):
        raise fail("hang", f"must be bool, got {hang!r}")
    return FakeState(gpus=gpus, nvml_error=nvml_error, hang=hang)


def _xid_events(doc: dict[str, Any], where: str, fail: Callable[[str, str], FakeStateError]) -> tuple[int, ...]:
    events = doc.get("xid_events", [])
    if not isinstance(events, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                               for x in events):
        raise fail(f"{where}.xid_events", "must be a list of XID codes (non-negative integers)")
    return tuple(events)


def _parse_mig(doc: Any, where: str, fail: Callable[[str, str], FakeStateError]) -> _MigState:
    if not isinstance(doc, dict):
        raise fail(where, "must be an object")
    gi = doc.get("gpu_instance_id")
    if not isinstance(gi, int) or isinstance(gi, bool) or gi < 0:
        raise fail(f"{where}.gpu_instance_id", "required, a non-negative integer")
    profile = _typed(doc, "profile", str, "1g.10gb", where, fail)
    cis = _typed(doc, "compute_instances", int, 1, where, fail)
    if cis < 1:
        raise fail(f"{where}.compute_instances", "must be at least 1")
    return _MigState(gi, profile, cis, _field_values(doc, _MIG_KEYS, where, fail),
                     _unsupported(doc, where, fail), _typed(doc, "xid", int, None, where, fail),
                     _parse_processes(doc, where, fail, utilisation=False))


def _parse_processes(doc: dict[str, Any], where: str, fail: Callable[[str, str], FakeStateError], *,
                     utilisation: bool) -> tuple[_ProcessState, ...]:
    docs = doc.get("processes", [])
    if not isinstance(docs, list):
        raise fail(f"{where}.processes", "must be a list of processes")
    processes = []
    for i, proc in enumerate(docs):
        at = f"{where}.processes[{i}]"
        if not isinstance(proc, dict):
            raise fail(at, "must be an object")
        unknown = set(proc) - _PROCESS_KEYS
        if unknown:
            raise fail(f"{at}.{sorted(unknown)[0]}", "unknown key (expected pid, fb_used_mib, sm_util)")
        pid = proc.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid < 1:
            raise fail(f"{at}.pid", "required, a positive integer")
        fb = proc.get("fb_used_mib", 0)
        if isinstance(fb, bool) or not isinstance(fb, int | float) or not math.isfinite(fb) or fb < 0:
            raise fail(f"{at}.fb_used_mib", f"must be a non-negative number, got {fb!r}")
        if "sm_util" in proc and not utilisation:
            raise fail(f"{at}.sm_util", "NVML has no per-process utilisation under MIG")
        sm = proc.get("sm_util", 0)
        if isinstance(sm, bool) or not isinstance(sm, int) or not 0 <= sm <= 100:
            raise fail(f"{at}.sm_util", f"must be an integer percentage 0-100, got {sm!r}")
        processes.append(_ProcessState(pid, fb, sm))
    pids = [p.pid for p in processes]
    if len(pids) != len(set(pids)):
        raise fail(f"{where}.processes", "pid values must be unique")
    return tuple(processes)


def _with_process_defaults(values: dict[str, Value], processes: tuple[_ProcessState, ...],
                           utilisation: bool) -> dict[str, Value]:
    """Framebuffer used (and utilisation) default to what the simulated processes add up to."""
    if not processes:
        return values
    derived: dict[str, Value] = {"DCGM_FI_DEV_FB_USED": int(sum(p.fb_used_mib for p in processes))}
    if utilisation:
        derived["DCGM_FI_DEV_GPU_UTIL"] = min(100, sum(p.sm_util for p in processes))
    return derived | values


def _field_values(doc: dict[str, Any], special: set[str], where: str,
                  fail: Callable[[str, str], FakeStateError]) -> dict[str, Value]:
    values: dict[str, Value] = {}
    for key, value in doc.items():
        if key in special:
            continue
        f = FIELDS_BY_NAME.get(key)
        if f is None:
            raise fail(f"{where}.{key}", "unknown key (not a DCGM field or one of " + ", ".join(sorted(special)) + ")")
        if f.is_label:
            raise fail(f"{where}.{key}", "label fields are not simulated per GPU")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise fail(f"{where}.{key}", f"must be a finite number, got {value!r}")
        values[key] = value
    return values


def _unsupported(doc: dict[str, Any], where: str, fail: Callable[[str, str], FakeStateError]) -> frozenset[str]:
    names = doc.get("unsupported", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise fail(f"{where}.unsupported", "must be a list of field names")
    for name in names:
        if name not in FIELDS_BY_NAME:
            raise fail(f"{where}.unsupported", f"unknown field {name!r}")
    return frozenset(names)


def _typed(doc: dict[str, Any], key: str, kind: type, default: Any, where: str,
           fail: Callable[[str, str], FakeStateError]) -> Any:
    value = doc.get(key, default)
    if value is default:
        return value
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise fail(f"{where}.{key}", f"must be {kind.__name__}, got {value!r}")
    return value


def _instance_values(mig: _MigState) -> dict[str, Value]:
    """A GPU instance's values, its framebuffer sized from its profile (``3g.40gb`` -> 40 GiB) unless given."""
    values: dict[str, Value] = {"DCGM_FI_DEV_FB_RESERVED": 0}
    with contextlib.suppress(IndexError, ValueError):
        values["DCGM_FI_DEV_FB_TOTAL"] = int(mig.profile.split(".")[1].removesuffix("gb")) * 1024
    return values | mig.values


def _idle(field: Field) -> Value:
    """A numeric field's idle value (a label field's is text: ``FakeBackend.label`` answers those)."""
    if isinstance(field.idle, str):
        raise TypeError(f"{field.name} is a label field, not a value")
    return field.idle


def read_state_file(path: str, gpu_count: int) -> FakeState:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise FakeStateError(f"{path}: cannot read fake state file: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FakeStateError(f"{path}: not valid JSON: {exc}") from None
    return parse_state(data, path, gpu_count)


class FakeBackend(Backend):
    name = "fake"

    def __init__(self, gpu_count: int, state_path: str | None = None, *, seed: str = "",
                 model: str = DEFAULT_MODEL, driver_version: str = "550.54.15",
                 clock: Callable[[], float] = time.monotonic) -> None:
        if gpu_count < 1:
            raise ValueError("--fake-gpu-count must be at least 1")
        self.gpu_count = gpu_count
        self.state_path = state_path
        self.seed = seed
        self.model = model
        self.driver_version = driver_version
        self._clock = clock
        self._state = FakeState(gpus={})
        self._state_stamp: tuple[int, int] | None = None
        self._energy_mj: dict[int, float] = {}
        self._energy_at: dict[int, float] = {}
        self._xid_seen: dict[int, int] = {}
        self._xid_new: list[XidEvent] = []
        self.state_errors_total = 0
        self.last_state_error: str | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        """Read the state file once; an unusable file at start is an error (FakeStateError)."""
        if self.state_path is not None:
            self._state = read_state_file(self.state_path, self.gpu_count)
            self._state_stamp = self._stamp(self.state_path)
            self._note_xid_events()

    def close(self) -> None:
        pass

    def begin_collection(self) -> None:
        """Re-read the state file when it changed; a bad rewrite keeps the last good state and is logged."""
        path = self.state_path
        if path is None:
            return
        stamp = self._stamp(path)
        if stamp is None or stamp != self._state_stamp:
            self._reread(path, stamp)
        if self._state.hang:
            self._state = self._block_while(path, lambda state: state.hang)
            self._state_stamp = self._stamp(path)

    def _reread(self, path: str, stamp: tuple[int, int] | None) -> None:
        try:
            self._state = read_state_file(path, self.gpu_count)
            self._state_stamp = stamp
            self.last_state_error = None
            self._note_xid_events()
        except FakeStateError as exc:
            self.state_errors_total += 1
            if str(exc) != self.last_state_error:
                log.warning("keeping the last good fake state: %s", exc)
            self.last_state_error = str(exc)

    def _block_while(self, path: str, hung: Callable[[FakeState], bool]) -> FakeState:
        """A driver call that does not return: block until a rewrite of the state file clears the condition."""
        state = self._state
        while hung(state):
            time.sleep(0.05)
            with contextlib.suppress(FakeStateError):
                state = read_state_file(path, self.gpu_count)
        return state

    def _unless_hung(self, index: int) -> None:
        if self.state_path is not None and self._gpu(index).hang:  # only a state file hangs a GPU
            self._block_while(self.state_path, lambda state: (state.gpus.get(index) or _GpuState()).hang)
    def _note_xid_events(self) -> None:
        """Entries appended to a GPU's ``xid_events`` since the last read are XID events happening now."""
        now = self._clock()
        for index in range(self.gpu_count):
            log_ = self._gpu(index).xid_events
            seen = self._xid_seen.get(index, 0)
            if len(log_) < seen:  # the log was rewritten: start over
                seen = 0
            self._xid_new.extend(XidEvent(index, xid, now) for xid in log_[seen:])
            self._xid_seen[index] = len(log_)

    def xid_events(self) -> list[XidEvent]:
        events, self._xid_new = self._xid_new, []
        return events

    def _stamp(self, path: str) -> tuple[int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    # -- enumeration ---------------------------------------------------------------------------------
    def entities(self, mode: DeviceMode) -> list[GpuEntity]:
        if self._state.nvml_error:
            raise BackendUnavailable(self._state.nvml_error)
        gpus: list[GpuEntity] = []
        instances: dict[int, list[GpuEntity]] = {}
        for i in range(self.gpu_count):
            gpu = GpuEntity(gpu=i, uuid=fake_gpu_uuid(self.seed, i), pci_bus_id=fake_pci_bus_id(i),
                            model_name=self.model)
            gpus.append(gpu)
            for mig in self._gpu(i).mig:
                instances.setdefault(i, []).append(GpuEntity(
                    gpu=i, uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id, model_name=self.model,
                    gpu_instance_id=mig.gpu_instance_id, gpu_instance_profile=mig.profile,
                    mig_uuids=tuple(fake_mig_uuid(self.seed, i, mig.gpu_instance_id, ci)
                                    for ci in range(mig.compute_instances))))
        return select_entities(gpus, instances, mode)

    def _gpu(self, index: int) -> _GpuState:
        return self._state.gpus.get(index) or _GpuState()

    def _mig(self, entity: GpuEntity) -> _MigState | None:
        if entity.gpu_instance_id is None:
            return None
        for mig in self._gpu(entity.gpu).mig:
            if mig.gpu_instance_id == entity.gpu_instance_id:
                return mig
        raise DeviceLost(f"GPU instance {entity.gpu_instance_id} no longer exists")

    # -- reading -----------------------------------------------------------------------------------
    def read(self, entity: GpuEntity, field: Field) -> Value:
        if self._state.nvml_error:
            raise BackendUnavailable(self._state.nvml_error)
        self._unless_hung(entity.gpu)
        gpu = self._gpu(entity.gpu)
        if gpu.lost:
            raise DeviceLost("GPU is lost (simulated)")
        mig = self._mig(entity)
        in_instance = mig is not None and field.level == "instance"
        if in_instance and mig:
            source = _with_process_defaults(_instance_values(mig), mig.processes, utilisation=False)
        else:
            source = _with_process_defaults(gpu.values, gpu.processes, utilisation=not gpu.mig)
        unsupported = mig.unsupported if in_instance and mig else gpu.unsupported
        if field.name in unsupported or field.name in gpu.unsupported:
            raise FieldNotSupported(field.name)
        if (mig is not None or gpu.mig) and field.name in _NOT_ON_MIG:
            raise FieldNotSupported(f"{field.name} is not supported on MIG-enabled GPUs")
        if field.name == "DCGM_FI_DEV_XID_ERRORS":
            xid = mig.xid if in_instance and mig else gpu.xid
            if xid is None and not in_instance and gpu.xid_events:
                xid = gpu.xid_events[-1]
            if xid is None:
                raise FieldUnavailable("no XID seen yet")
            return xid
        if field.name == "DCGM_FI_DEV_MIG_MODE" and field.name not in source:
            return int(bool(gpu.mig))
        if field.name == "DCGM_FI_DEV_COUNT" and field.name not in source:
            return self.gpu_count
        return self._value(entity.gpu, field, source, gpu.values)

    def _value(self, index: int, field: Field, source: dict[str, Value], gpu_values: dict[str, Value]) -> Value:
        if field.name in source:
            return source[field.name]

        def get(name: str) -> Value:
            return source[name] if name in source else _idle(FIELDS_BY_NAME[name])

        if field.name == "DCGM_FI_DEV_FB_FREE":
            return max(0, int(get("DCGM_FI_DEV_FB_TOTAL") - get("DCGM_FI_DEV_FB_USED")
                              - get("DCGM_FI_DEV_FB_RESERVED")))
        if field.name == "DCGM_FI_DEV_FB_USED_PERCENT":
            usable = get("DCGM_FI_DEV_FB_TOTAL") - get("DCGM_FI_DEV_FB_RESERVED")
            return get("DCGM_FI_DEV_FB_USED") / usable if usable > 0 else 0.0
        if field.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" and "DCGM_FI_DEV_GPU_UTIL" in source:
            return source["DCGM_FI_DEV_GPU_UTIL"] / 100.0
        if field.name == "DCGM_FI_DEV_CLOCKS_EVENT_REASONS":  # an idle GPU drops its clocks: reason "GPU idle"
            return 0x1 if get("DCGM_FI_DEV_GPU_UTIL") == 0 else 0
        if field.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
            power = gpu_values.get("DCGM_FI_DEV_POWER_USAGE", FIELDS_BY_NAME["DCGM_FI_DEV_POWER_USAGE"].idle)
            return self._energy(index, float(power))
        return _idle(field)

    def _energy(self, index: int, power_w: float) -> int:
        now = self._clock()
        last = self._energy_at.get(index)
        total = self._energy_mj.get(index, 0.0)
        if last is not None:
            total += power_w * (now - last) * 1000.0
        self._energy_mj[index], self._energy_at[index] = total, now
        return int(total)

    def processes(self, entity: GpuEntity) -> ProcessReport:
        """The simulated processes: a GPU instance's own, or a GPU's (with its instances' on a MIG GPU)."""
        if self._state.nvml_error:
            raise BackendUnavailable(self._state.nvml_error)
        self._unless_hung(entity.gpu)
        gpu = self._gpu(entity.gpu)
        if gpu.lost:
            raise DeviceLost("GPU is lost (simulated)")
        mig = self._mig(entity)
        if mig is not None:
            procs, utilisation = mig.processes, False
        else:
            procs, utilisation = gpu.processes + tuple(p for m in gpu.mig for p in m.processes), not gpu.mig
        return ProcessReport(tuple(GpuProcess(p.pid, int(p.fb_used_mib * MIB), p.sm_util if utilisation else 0)
                                   for p in procs), utilisation)

    def label(self, entity: GpuEntity, field: Field) -> str:
        self._unless_hung(entity.gpu)
        if field.name == "DCGM_FI_DRIVER_VERSION":
            return self.driver_version
        if field.name == "DCGM_FI_NVML_VERSION":
            return "12." + self.driver_version
        if field.name == "DCGM_FI_DEV_SERIAL":
            return f"{1650000000000 + entity.gpu}"
        if field.name in _IDENTITY_LABELS:
            return getattr(entity, _IDENTITY_LABELS[field.name])
        if isinstance(field.idle, str) and field.idle:
            return field.idle
        raise FieldNotSupported(field.name)
