"""``gpu-loadtest run``: load against any HTTP endpoint, open-loop from a rate profile (``--profile``) or
closed-loop from a Taurus file (``--taurus``: ``loadtest.loadgen.closed_loop``), optionally watching a cluster's HPA
and a custom-metrics path while it runs, then a per-second CSV, the plot and a summary."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.hpa.record import SyncRecord
from loadtest.hpa.watch import ClusterReading, ClusterWatcher
from loadtest.loadgen.closed_loop import ClosedLoopShape, VirtualUsers
from loadtest.loadgen.open_loop import Arrivals, LoadGenerator
from loadtest.loadgen.profile import Profile
from loadtest.loadgen.taurus.plan import TaurusPlan
from loadtest.measure.progress import Progress, Snapshot
from loadtest.measure.range_data import per_second
from loadtest.measure.summary import summarize
from loadtest.measure.timeline import LoadShape, build_rows, each_second, phase_of
from loadtest.scenarios.outputs import Outputs, RunResult, cancelled, write_outputs

__all__ = ["CLOSED_LOOP", "LoadRun", "RunOptions", "TaurusOptions", "run_load",
           "run_taurus"]

CLOSED_LOOP = ("closed loop: each virtual user waits its think time, sends a request and waits for the answer before "
               "its next, so the request rate follows the service (unlike --profile's open loop, which sends at its "
               "rate whatever the answers)")


@dataclass(frozen=True)
class RunOptions:
    url: str
    profile: Profile
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    timeout_s: float = 5.0
    max_inflight: int = 256
    arrivals: Arrivals = Arrivals.POISSON
    watch_interval_s: float = 2.0
    prometheus_url: str | None = None
    query: str | None = None
    metric_label: str = "metric"


@dataclass(frozen=True)
class TaurusOptions:
    """A closed-loop run of a Taurus plan, and what is watched beside it (as ``RunOptions``'s last fields)."""

    plan: TaurusPlan
    watch_interval_s: float = 2.0
    prometheus_url: str | None = None
    query: str | None = None
    metric_label: str = "metric"
    seed: int | None = None


class LoadRun:
    """Drives ``load`` (open or closed loop) while watching the cluster; ``shape`` names each second's phase and
    target."""

    def __init__(self, load: LoadGenerator | VirtualUsers, shape: LoadShape, options: RunOptions | TaurusOptions,
                 watcher: ClusterWatcher | None, progress: Progress) -> None:
        self.options = options
        self.watcher = watcher
        self.progress = progress
        self.loadgen = load
        self.shape = shape
        self.state: dict[int, dict[str, Any]] = {}
        self.syncs: list[SyncRecord] = []
        self.reading: ClusterReading | None = None
        self.warnings: list[str] = []
        self.wall_start: float | None = None
        self._errors_seen: set[str] = set()

    async def _watch(self) -> None:
        assert self.watcher is not None
        while True:
            await self._poll()
            await asyncio.sleep(self.options.watch_interval_s)

    async def _poll(self) -> None:
        assert self.watcher is not None
        reading = await asyncio.to_thread(self.watcher.poll)
        t = self.loadgen.elapsed()
        for error in reading.errors:
            if error not in self._errors_seen:
                self._errors_seen.add(error)
                self.warnings.append(error)
                self.progress.event(f"[{t:5.1f}s] {error}")
        before = self.reading.hpa if self.reading else None
        now = reading.hpa
        if before and now and before.desired_replicas is not None and now.desired_replicas is not None \
                and now.desired_replicas != before.desired_replicas:
            record = SyncRecord(t, before.desired_replicas, now.desired_replicas, now.metric,
                                "desiredReplicas changed in the HPA status")
            self.syncs.append(record)
            self.progress.event(f"[{t:5.1f}s] HPA desired {record.current} -> {record.desired} "
                                f"({self.options.metric_label} {now.metric})")
        self.reading = reading

    def _record(self, second: int) -> None:
        if second in self.state or not self.loadgen.has_row(second):
            return
        reading = self.reading
        hpa = reading.hpa if reading else None
        users = self.loadgen.users_in(second) if isinstance(self.loadgen, VirtualUsers) else None
        self.state[second] = {
            "hpa_metric": hpa.metric if hpa else None, "metric_target": hpa.target if hpa else None,
            "desired_replicas": hpa.desired_replicas if hpa else None,
            "current_replicas": hpa.current_replicas if hpa else None,
            "metric_value": reading.metric if reading else None, "users": users}
        load = self.loadgen.second(second)
        totals = self.loadgen.totals()
        shape = self.shape
        shown = hpa.metric if hpa and hpa.metric is not None else (reading.metric if reading else None)
        self.progress.update(Snapshot(
            t=second + 1, duration=shape.duration, phase=phase_of(shape, second),
            target_rps=shape.rate_at(second + 0.5), sent=load.sent, ok=load.ok, errors_total=totals.errors,
            dropped_total=totals.dropped, p50_ms=_ms(load.p(50)), p95_ms=_ms(load.p(95)), hpa_metric=shown,
            metric_target=hpa.target if hpa else None, current=hpa.current_replicas if hpa else None,
            desired=hpa.desired_replicas if hpa else None, users=users,
            target_users=self.options.plan.users_at(second + 0.5) if isinstance(self.options, TaurusOptions) else None))

    async def drive(self) -> None:
        if self.watcher is not None:
            await self._poll()  # the state before the load
        self.wall_start = time.time()
        load = asyncio.create_task(self.loadgen.run())
        workers = [asyncio.create_task(each_second(self.loadgen, self._record))]
        if self.watcher is not None:
            workers.append(asyncio.create_task(self._watch()))
        try:
            done, _ = await asyncio.wait([load, *workers], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
            await load
            if self.watcher is not None:
                await self._poll()  # the state at the end
            self._record(len(self.state))
        finally:
            for task in (load, *workers):
                task.cancel()
            await asyncio.gather(load, *workers, return_exceptions=True)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


async def run_load(options: RunOptions, watcher: ClusterWatcher | None, outputs: Outputs,
                   progress: Progress) -> RunResult:
    """Run the profile; a cancellation (Ctrl-C) ends it early with the partial timeline."""
    profile = options.profile
    load = LoadGenerator(profile, lambda: options.url, method=options.method, headers=options.headers,
                         body=options.body, timeout_s=options.timeout_s, max_inflight=options.max_inflight,
                         arrivals=options.arrivals)
    run = LoadRun(load, profile, options, watcher, progress)
    return await _report(run, outputs, title=f"gpu-loadtest run: {options.url}",
                         load_step_at=profile.load_step_at, load_drop_at=profile.load_drop_at, extra={
                             "url": options.url, "method": options.method,
                             "header_names": [name for name, _ in options.headers],
                             "body_bytes": None if options.body is None else len(options.body),
                             "profile": profile.text(), "arrivals": options.arrivals.value})


async def run_taurus(options: TaurusOptions, watcher: ClusterWatcher | None, outputs: Outputs,
                     progress: Progress) -> RunResult:
    """Run the Taurus plan's virtual users (the closed loop); a cancellation ends it early, as ``run_load``."""
    plan = options.plan
    users = VirtualUsers(plan, seed=options.seed)
    shape = ClosedLoopShape(plan, users)
    run = LoadRun(users, shape, options, watcher, progress)
    progress.event(f"{plan.source}: {plan.text()}")
    progress.event(CLOSED_LOOP)
    for note in plan.notes:
        progress.event(f"note: {note}")
    return await _report(run, outputs, title=f"gpu-loadtest run --taurus {plan.source.name} (closed loop)",
                         load_step_at=shape.load_step_at, load_drop_at=shape.load_drop_at, extra={
                             "taurus": str(plan.source), "load": "closed loop", "executions": plan.text(),
                             "notes": list(plan.notes)})


async def _report(run: LoadRun, outputs: Outputs, *, title: str, load_step_at: float | None,
                  load_drop_at: float | None, extra: dict[str, Any]) -> RunResult:
    """Drive the run, then build its timeline and summary, and write the CSV, plot and summary JSON asked for."""
    try:
        with run.progress:
            interrupted = await cancelled(run.drive())
    finally:
        if run.watcher is not None:
            run.watcher.close()
    options = run.options
    rows = build_rows(run.shape, run.loadgen.seconds, run.state)
    if interrupted:
        rows = rows[:len(run.state)]
    if options.prometheus_url and options.query and run.wall_start is not None and rows:
        values, series = await asyncio.to_thread(per_second, options.prometheus_url, options.query, run.wall_start,
                                                 len(rows))
        if series > 1:
            run.warnings.append(f"--query returned {series} series; the plot and CSV show their mean")
        for row in rows:
            row.prom_value = values.get(int(row.t))
    if isinstance(run.loadgen, VirtualUsers):  # the labels' counts over the seconds the timeline has
        extra["labels"] = {label: stats.to_json() for label, stats in run.loadgen.labels(len(rows)).items()}
    summary = summarize(rows, run.syncs, load_step_at, load_drop_at, extra={
        **extra, "watch_interval_seconds": options.watch_interval_s, "error_kinds": dict(run.loadgen.error_kinds),
        **outputs.named(rows), "interrupted": interrupted, "warnings": run.warnings})

    def draw(path: Path) -> None:
        from loadtest.measure.plot import plot_timeline  # matplotlib: the loadtest extra

        plot_timeline(rows, run.syncs, path, title=title, metric_label=options.metric_label,
                      load_step_at=load_step_at, load_drop_at=load_drop_at)

    write_outputs(outputs, summary, rows, draw)
    return RunResult(summary, rows, run.syncs, interrupted, warnings=run.warnings)
