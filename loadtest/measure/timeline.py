"""The per-second record of a load run, taken at the end of each second; CSV output."""

from __future__ import annotations

import asyncio
import csv
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

from loadtest.loadgen.open_loop import Recorder, SecondStats

__all__ = ["LoadShape", "TimelineRow", "build_rows", "each_second", "phase_of", "write_csv"]


class LoadShape(Protocol):
    """What a run's timeline needs of its load (a ``Profile``, or the closed loop's ``ClosedLoopShape``): how long
    it is planned to last, and each moment's phase and target rate (``None``: the load has no target rate, as a
    closed loop without a throughput cap)."""

    @property
    def duration(self) -> float: ...

    def phase_at(self, t: float) -> str: ...

    def rate_at(self, t: float) -> float | None: ...


@dataclass
class TimelineRow:
    """One second of a run, ``t`` seconds after the load started (the second ``[t, t+1)``).

    ``gpu_util`` is the simulated GPUs' true average (demo only); ``hpa_metric`` the per-pod average the HPA
    last read from the metrics API (demo: of the GPU metric, when it scales on it) or reported in its status
    (``run --hpa``); ``metric_value`` the average of a polled metrics API path and ``prom_value`` the ``--query``
    result from Prometheus (``run`` only). Demo only: ``waiting`` is the replicas' true mean of requests queued
    for the GPU, ``hpa_waiting`` the per-pod average of ``vllm:num_requests_waiting`` the HPA last read (when it
    scales on it) and ``waiting_target`` its target; ``pods`` the replicas holding a GPU (ready or still loading
    their model) and ``gpu_seconds`` the GPU time they used since the load started. With a gateway in front:
    ``gateway_queue`` the requests it held, ``hpa_gateway_queue`` that queue as the HPA last read it (the External
    metric's value, for an AverageValue target of ``waiting_target`` per replica), ``hpa_running`` the running
    requests per ready endpoint the HPA last read and ``running_target`` its Value target. With GPU nodes in the
    loop: ``nodes`` and ``node_gpus`` (nodes that exist, launching ones included, and their GPUs),
    ``gpus_allocatable`` (GPUs the device plugins report), ``pending_pods`` (the workload's pods waiting for a GPU),
    ``placeholders`` (headroom pods holding a GPU) and ``gpu_node_seconds`` (the nodes' GPU-seconds since the load
    started, in real-time equivalents, while ``t`` and ``gpu_seconds`` stay on the demo's clock). A closed loop
    (``run --taurus``): ``users`` the virtual users running at the end of the second; ``target_rps`` its throughput
    cap, empty without one.
    """

    t: float
    phase: str
    target_rps: float | None
    sent: int | None = 0  # None (and ok, errors, dropped): the load is not known (a cluster's capacity report)
    ok: int | None = 0
    errors: int | None = 0
    dropped: int | None = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    gpu_util: float | None = None
    hpa_metric: float | None = None
    metric_target: float | None = None
    desired_replicas: int | None = None
    current_replicas: int | None = None
    metric_value: float | None = None
    prom_value: float | None = None
    waiting: float | None = None
    hpa_waiting: float | None = None
    waiting_target: float | None = None
    pods: int | None = None
    gpu_seconds: float | None = None
    gateway_queue: float | None = None
    hpa_gateway_queue: float | None = None
    hpa_running: float | None = None
    running_target: float | None = None
    nodes: int | None = None
    node_gpus: int | None = None
    gpus_allocatable: int | None = None
    pending_pods: int | None = None
    placeholders: int | None = None
    gpu_node_seconds: float | None = None
    users: int | None = None
    latencies_s: list[float] = field(default_factory=list, repr=False, metadata={"csv": False})

    @property
    def failed(self) -> int:
        """Errors and drops (0 where the load is not known)."""
        return (self.errors or 0) + (self.dropped or 0)


def _csv_value(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def write_csv(rows: Sequence[TimelineRow], path: str | Path, unknown: Collection[str] = ()) -> None:
    """One line per row; an empty cell has no value. A column named in ``unknown`` (what a cluster's records do not
    hold: the load, for the capacity report) reads ``unknown`` where it has no value."""
    names = [f.name for f in fields(TimelineRow) if f.metadata.get("csv", True)]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(names)
        for row in rows:
            writer.writerow(["unknown" if name in unknown and getattr(row, name) is None
                             else _csv_value(getattr(row, name)) for name in names])


async def each_second(load: Recorder, record: Callable[[int], None]) -> None:
    """``record(k)`` at the end of each second ``k`` of ``load``, counted from its start (from now, while it has not
    started)."""
    loop = asyncio.get_running_loop()
    k = 0
    while True:
        k += 1
        start = load.started_at if load.started_at is not None else loop.time()
        await asyncio.sleep(max(start + k - loop.time(), 0.0))
        record(k - 1)


def phase_of(profile: LoadShape, second: int) -> str:
    """The row's phase: the profile's, or ``drain`` after it while sent requests still finish."""
    return profile.phase_at(second) if second < profile.duration else "drain"


def build_rows(profile: LoadShape, seconds: Sequence[SecondStats],
               state: Mapping[int, Mapping[str, Any]]) -> list[TimelineRow]:
    """One row per second of ``profile``, then ``drain`` rows while requests sent during it still finished: the
    load generator's buckets plus whatever was observed at the end of that second (``state[k]``: values for the
    row's optional fields)."""
    rows = []
    in_profile = math.ceil(profile.duration)
    for k in range(max(in_profile, len(seconds))):
        load = seconds[k] if k < len(seconds) else SecondStats()
        during = k < in_profile
        rows.append(TimelineRow(
            t=float(k), phase=phase_of(profile, k),
            target_rps=_target(profile, k, during),
            sent=load.sent, ok=load.ok, errors=load.errors, dropped=load.dropped,
            p50_ms=_ms(load.p(50)), p95_ms=_ms(load.p(95)), latencies_s=list(load.latencies), **state.get(k, {})))
    return rows


def _target(profile: LoadShape, second: int, during: bool) -> float | None:
    """The target rate of a row: mid-second (the profile's last rate in its last, partial second); after the
    profile, 0, or none for a load without a target rate."""
    rate = profile.rate_at(min(second + 0.5, profile.duration) if during else profile.duration + 1.0)
    return None if rate is None else round(rate, 3)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 2)
