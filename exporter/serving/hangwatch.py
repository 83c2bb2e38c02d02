"""Backend calls that never return: which GPU they are for, and how the collector carries on without that GPU.

An NVML call can block for ever (a wedged driver, a GPU falling off the bus). Python cannot interrupt a thread
inside a C call, so the collector instead *abandons* the worker thread that is stuck: every GPU-specific backend
call goes through :class:`WatchedBackend`, which records what each thread is in. When the current worker has been
in one GPU's call longer than the hang limit, :meth:`HangWatch.abandon` marks that GPU hung and bumps the
generation; the collector starts a fresh worker that skips hung GPUs. If the stuck call ever returns, the
abandoned thread notices it belongs to an old generation (:class:`WorkerAbandoned`), clears the GPU's hung mark
(:meth:`HangWatch.release`) and exits without publishing anything. A stuck call that is for no particular GPU
(enumeration, initialisation) blocks every GPU alike; then nothing is abandoned and the values age out at scrape
time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from exporter.backends.base import Backend, DeviceMode, ProcessReport
from exporter.fields.entities import GpuEntity
from exporter.fields.table import Field, Value

T = TypeVar("T")


class WorkerAbandoned(BaseException):
    """Raised in an abandoned worker when its stuck call returns: the thread unwinds and exits. A BaseException,
    so no ``except Exception`` on the way (field readers, process attribution) swallows it."""


@dataclass(frozen=True)
class InFlight:
    gpu: int | None
    call: str
    since: float  # monotonic
    thread: int  # ident of the worker thread making the call

    def describe(self, now: float) -> str:
        return f"backend call {self.call} has not returned for {now - self.since:.0f}s"


class HangWatch:
    def __init__(self) -> None:
        self.generation = 0
        self._local = threading.local()
        self._in_flight: dict[int, tuple[int | None, str, str, float]] = {}  # by thread ident; cheap tuples
        self.hung: dict[int, InFlight] = {}  # GPU index -> the call that hangs

    def bind(self, generation: int) -> None:
        """Called first in each worker thread."""
        self._local.generation = generation

    def abandoned(self) -> bool:
        mine = getattr(self._local, "generation", None)
        return mine is not None and mine != self.generation

    def in_flight(self, thread: threading.Thread | None) -> InFlight | None:
        ident = None if thread is None else thread.ident
        found = None if ident is None else self._in_flight.get(ident)
        if ident is None or found is None:
            return None
        gpu, kind, name, since = found
        return InFlight(gpu, f"{kind} {name}".strip(), since, ident)

    def abandon(self, stuck: InFlight) -> int:
        """Mark ``stuck.gpu`` hung and start a new generation; returns it for the replacement worker."""
        if stuck.gpu is not None:
            self.hung[stuck.gpu] = stuck
        self.generation += 1
        return self.generation

    def release(self) -> None:
        """An abandoned worker is leaving: the GPUs it was stuck on are collected again."""
        me = threading.get_ident()
        for gpu, stuck in list(self.hung.items()):
            if stuck.thread == me:
                self.hung.pop(gpu, None)

    def call(self, gpu: int | None, kind: str, name: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, recorded as this thread's call ``kind name`` for ``gpu`` while it runs."""
        me = threading.get_ident()
        self._in_flight[me] = (gpu, kind, name, time.monotonic())
        try:
            return fn(*args)
        finally:
            self._in_flight.pop(me, None)
            if self.abandoned():
                raise WorkerAbandoned  # the abandoned thread's result goes nowhere


class WatchedBackend(Backend):
    """The backend as the collector's workers call it: GPU-specific calls are recorded in a :class:`HangWatch`."""

    def __init__(self, backend: Backend, watch: HangWatch) -> None:
        self.inner = backend
        self.name = backend.name
        self.watch = watch

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def begin_collection(self) -> None:
        self.watch.call(None, "begin_collection", "", self.inner.begin_collection)

    def entities(self, mode: DeviceMode) -> list[GpuEntity]:
        return self.watch.call(None, "entities", "", self.inner.entities, mode)

    def read(self, entity: GpuEntity, field: Field) -> Value:
        return self.watch.call(entity.gpu, "read", field.name, self.inner.read, entity, field)

    def label(self, entity: GpuEntity, field: Field) -> str:
        return self.watch.call(entity.gpu, "label", field.name, self.inner.label, entity, field)

    def processes(self, entity: GpuEntity) -> ProcessReport:
        return self.watch.call(entity.gpu, "processes", "", self.inner.processes, entity)

    def start_events(self) -> None:
        self.inner.start_events()

    def stop_events(self) -> None:
        self.inner.stop_events()
