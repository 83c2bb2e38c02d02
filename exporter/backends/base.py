"""The contract every backend meets, and the backend-neutral errors the collector handles."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

from exporter.fields.entities import GpuEntity
from exporter.fields.table import Field, Value

DeviceMode = Literal["f", "g", "i", "g+i"]


class BackendUnavailable(Exception):
    """The whole backend is down (NVML not initialised, driver not loaded, library mismatch)."""


class FieldNotSupported(Exception):
    """This field can never be read on this entity; probe once, then omit it."""


class FieldUnavailable(Exception):
    """This field has no value right now (no data yet, implausible reading); skip it this collection."""


class DeviceLost(Exception):
    """The GPU behind this entity failed (fallen off the bus, unknown error); drop its series and retry."""


@dataclass(frozen=True)
class GpuProcess:
    """One process using a GPU entity, as the driver reports it.

    ``pid`` is in the exporter's PID namespace. ``fb_used_bytes`` is None when the driver cannot tell (WDDM).
    ``sm_util`` is the process's SM utilisation in percent from the newest driver sample since the previous
    collection; 0 when the driver had no sample for it (the process did not run kernels).
    """

    pid: int
    fb_used_bytes: int | None
    sm_util: int = 0


@dataclass(frozen=True)
class ProcessReport:
    """The processes on one entity; ``sm_util_supported`` is False where the driver has no per-process
    utilisation (MIG), and then every ``sm_util`` is meaningless and must not be reported."""

    processes: tuple[GpuProcess, ...]
    sm_util_supported: bool


@dataclass(frozen=True)
class XidEvent:
    """One XID the driver reported for a GPU, at ``at`` (``time.monotonic()``)."""

    gpu: int
    xid: int
    at: float


class Backend(ABC):
    """Reads fields for GPU entities.

    ``open``/``entities`` raise BackendUnavailable; ``read``/``label`` raise FieldNotSupported,
    FieldUnavailable or DeviceLost. Calls come from the collector thread only, except ``start_events``
    which may run its own thread.
    """

    name: str

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def begin_collection(self) -> None:
        """Called once before each collection (e.g. to re-read simulated state, reset memoised calls)."""

    @abstractmethod
    def entities(self, mode: DeviceMode) -> list[GpuEntity]:
        """Enumerate what to report on: GPUs and/or MIG GPU instances, per dcgm-exporter's ``-d`` mode."""

    @abstractmethod
    def read(self, entity: GpuEntity, field: Field) -> Value: ...

    @abstractmethod
    def label(self, entity: GpuEntity, field: Field) -> str: ...

    def processes(self, entity: GpuEntity) -> ProcessReport:
        """Per-process framebuffer and SM utilisation; raises like ``read`` (FieldNotSupported when the backend
        cannot list processes at all)."""
        raise FieldNotSupported(f"the {self.name} backend cannot list GPU processes")

    def start_events(self) -> None:
        """Start watching for XID events, if the backend has them."""

    def xid_events(self) -> list[XidEvent]:
        """XID events received since the previous call (they feed ``DCGM_EXP_XID_ERRORS_COUNT``)."""
        return []

    def stop_events(self) -> None: ...


def select_entities(gpus: list[GpuEntity], instances: dict[int, list[GpuEntity]], mode: DeviceMode) -> list[GpuEntity]:
    """Apply dcgm-exporter's device mode: ``f`` (flex) reports a GPU's instances when it has any, else the GPU."""
    chosen: list[GpuEntity] = []
    for gpu in gpus:
        own = instances.get(gpu.gpu, [])
        if mode == "f":
            chosen.extend(own or [gpu])
            continue
        if "g" in mode:
            chosen.append(gpu)
        if "i" in mode:
            chosen.extend(own)
    return chosen


def mig_profile_name(slice_count: int, memory_mb: int) -> str:
    """DCGM's GPU_I_PROFILE string: slices and memory in GB rounded up, e.g. ``1g.10gb``."""
    return f"{slice_count}g.{-(-memory_mb // 1024)}gb"
