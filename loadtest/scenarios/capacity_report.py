"""``gpu-loadtest capacity``: a workload's scale-ups on a live cluster, from its own records. Reads the cluster once
(or follows it with ``--watch``, appending to a journal), or replays a journal (``--journal``), builds the report over
the window (:mod:`loadtest.measure.cluster.report`) and writes the files asked for: the JSON, the per-second CSV with
the demo's columns (and ``NAME-replicas.csv``, one line per replica with its sub-phases), the plot."""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.measure.cluster.collect import Collector
from loadtest.measure.cluster.journal import Journal, replay
from loadtest.measure.cluster.reader import WATCH_SECONDS, ClusterReader, Snapshot
from loadtest.measure.cluster.replicas import MARKS, PHASES, SUB_PHASES
from loadtest.measure.cluster.report import CapacityReport, Workload, build_report, iso
from loadtest.measure.cluster.rows import LOAD_COLUMNS
from loadtest.measure.timeline import write_csv
from loadtest.standins.statefiles import atomic_write_json

__all__ = ["ReportOptions", "replicas_csv_path", "report_from_cluster", "report_from_journal", "write_report"]


@dataclass(frozen=True)
class ReportOptions:
    """``since_s``: the window's length, ending at ``until`` (Unix seconds; ``None``: now, or a journal's last
    line); ``rounds_within_s``: how long after one round's capacity the HPA's next upward decision still belongs to
    the same scale-up."""

    workload: Workload
    since_s: float
    until: float | None = None
    rounds_within_s: float = 300.0


def _collect(snap: Snapshot, into: Collector) -> None:
    for resource, items in snap.objects.items():
        for item in items:
            into.add(resource, item)


def _sources(snap: Snapshot, **extra: Any) -> dict[str, Any]:
    return {"events": snap.events_api, "karpenter": snap.karpenter, **extra}


def report_from_cluster(reader: ClusterReader, options: ReportOptions, *, watch: Path | None = None,
                        watch_for_s: float | None = None, stop: threading.Event | None = None,
                        on_watch: Callable[[str], None] = lambda line: None,
                        clock: Callable[[], float] = time.time) -> CapacityReport:
    """Read the cluster (a ``Forbidden`` for the pods is raised; other refusals are notes). With ``watch``: write
    what was read to that journal, follow the cluster for ``watch_for_s`` (``None``: until ``stop`` is set), then
    report from the whole journal (earlier sessions included)."""
    snap = reader.snapshot()
    notes = list(snap.notes)
    if watch is None:
        collector = Collector(karpenter=snap.karpenter)
        _collect(snap, collector)
        end = options.until if options.until is not None else clock()
        return _report(collector, options, end, _sources(snap), notes)
    stop = stop or threading.Event()
    with Journal(watch, clock) as journal:
        journal.header(namespace=options.workload.namespace, deployment=options.workload.deployment,
                       karpenter=snap.karpenter, events_api=snap.events_api)
        for resource, items in snap.objects.items():
            for item in items:
                journal.record("LISTED", resource, item)
        on_watch(f"watching {options.workload.namespace}/{options.workload.deployment} into {watch} "
                 f"({', '.join(k for k in snap.read)}); " + ("Ctrl-C ends it" if watch_for_s is None else
                                                            f"for {watch_for_s:g} s"))
        timer = threading.Timer(watch_for_s, stop.set) if watch_for_s is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            notes += _follow(reader, snap, journal, stop)
        finally:
            if timer is not None:
                timer.cancel()
    replayed = replay(watch)
    end = options.until if options.until is not None else clock()
    return _report(replayed.collector, options, end, _sources(snap, journal=str(watch)), notes)


def _follow(reader: ClusterReader, snap: Snapshot, journal: Journal, stop: threading.Event) -> list[str]:
    """Follow the cluster on a thread of its own; Ctrl-C (here, on the main thread) ends the watch, not the report.
    After a stop the watches end at their next event or their request's end (WATCH_SECONDS); a watch that takes
    longer than twice that is left behind (its thread is a daemon and the journal takes no more lines), so that
    Ctrl-C always gives the report within seconds."""
    problems: list[str] = []
    runner = threading.Thread(target=lambda: problems.extend(reader.follow(list(snap.read), journal.record, stop,
                                                                           snap.versions)),
                              name="capacity-watch", daemon=True)
    runner.start()
    try:
        while runner.is_alive() and not stop.is_set():
            runner.join(0.5)
    except KeyboardInterrupt:
        stop.set()
    runner.join(2 * WATCH_SECONDS)
    if runner.is_alive():
        return [*problems, f"a watch had not ended {2 * WATCH_SECONDS:g} s after the stop; the report is made from "
                           "what was recorded until then"]
    return problems


def report_from_journal(path: Path, options: ReportOptions) -> CapacityReport:
    replayed = replay(path)
    end = options.until if options.until is not None else (replayed.last or 0.0)
    notes = [f"{replayed.skipped} lines of {path} did not parse and were skipped"] if replayed.skipped else []
    header = replayed.headers[-1] if replayed.headers else {}
    sources = {"events": header.get("events_api"), "karpenter": header.get("karpenter"), "journal": str(path)}
    return _report(replayed.collector, options, end, sources, notes)


def _report(collector: Collector, options: ReportOptions, end: float, sources: dict[str, Any],
            notes: list[str]) -> CapacityReport:
    return build_report(collector.records(), options.workload, end - options.since_s, end,
                        rounds_within=options.rounds_within_s, sources=sources, notes=notes)


def replicas_csv_path(path: Path) -> Path:
    """``out/report.csv`` -> ``out/report-replicas.csv``."""
    return path.with_name(f"{path.stem}-replicas{path.suffix or '.csv'}")


def _replica_lines(report: CapacityReport) -> list[list[str]]:
    """One line per replica: its scale-up, pod, node, marks (seconds since the window's start), phases and
    sub-phases; an empty cell does not apply, ``unknown`` the records did not hold."""
    scale_up = {r.pod: str(s.figures.surge) for s in report.scale_ups for r in s.replicas}
    lines = []
    for r in report.replicas:
        doc = r.to_json(report.start)
        skip, unknown = set(doc["not_applicable"]), set(doc["unknown"])

        def cell(name: str, value: float | None, skip: set[str] = skip, unknown: set[str] = unknown) -> str:
            return "" if name in skip else "unknown" if name in unknown or value is None else f"{value:g}"

        preemption = doc["preemption"] or {}
        new_node = "" if r.new_node is None else str(r.new_node).lower()
        marks = ("" if v is None else f"{v:g}" for v in doc["marks_s"].values())
        lines.append([scale_up.get(r.pod, ""), r.pod, r.node or "", new_node, r.autoscaler or "", *marks,
                      *(cell(p, doc["phases_s"][p]) for p in PHASES),
                      *(cell(p, doc["sub_phases_s"].get(p)) for p in SUB_PHASES),
                      preemption.get("victim", ""), _flag(preemption.get("placeholder")) if preemption else "",
                      "true" if r.stuck else "false"])
    return lines


def _flag(value: bool | None) -> str:
    return "unknown" if value is None else str(value).lower()


REPLICA_COLUMNS = ("scale_up", "pod", "node", "new_node", "autoscaler", *(f"{m}_at_s" for m in MARKS),
                   *(f"{p}_s" for p in PHASES), *(f"{p}_s" for p in SUB_PHASES), "preempted", "placeholder", "stuck")


def write_report(report: CapacityReport, *, json_path: Path | None, csv_path: Path | None,
                 plot_path: Path | None) -> None:
    if csv_path is not None:
        write_csv(report.rows, csv_path, unknown=LOAD_COLUMNS)
        with open(replicas_csv_path(csv_path), "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(REPLICA_COLUMNS)
            writer.writerows(_replica_lines(report))
    if plot_path is not None and report.rows:
        from loadtest.measure.plot import plot_capacity_comparison  # matplotlib: the loadtest extra

        label = f"{report.workload.namespace}/{report.workload.deployment}"
        plot_capacity_comparison([(label, report.rows, report.syncs)], plot_path, marks=_marks(report),
                                 title=f"gpu-loadtest capacity: {label}, {iso(report.start)} to {iso(report.end)}"
                                       f" (scale-ups: time to capacity from the HPA's decision)",
                                 xlabel=f"seconds since {iso(report.start)}")
    if json_path is not None:
        doc = report.to_json()
        doc["files"] = {"csv": None if csv_path is None else str(csv_path),
                        "replicas_csv": None if csv_path is None else str(replicas_csv_path(csv_path)),
                        "plot": None if plot_path is None or not report.rows else str(plot_path)}
        atomic_write_json(json_path, doc)


def _marks(report: CapacityReport) -> list[tuple[float, str]]:
    """Each scale-up's first decision, labelled with its time to capacity and phases ("unknown" where it is)."""
    out = []
    for up in report.scale_ups:
        f = up.figures
        ttc = "unknown" if "time_to_capacity_s" in f.unknown else \
            "not reached" if f.time_to_capacity_s is None else f"{f.time_to_capacity_s:.0f} s"
        phases = " / ".join("?" if v is None else f"{v:.0f}" for v in f.phases_s.values())
        before = "?" if f.replicas_before is None else f.replicas_before
        out.append((up.decisions[0].t - report.start, f"{f.surge}: {before}->{f.replicas_asked}, {ttc} ({phases})"))
    return out
