"""``gpu-loadtest demo --compare``: the same load profile once per scaling choice (GPU utilisation, requests
waiting, both), then one table and one plot of all runs. Each run starts its own processes from scratch.

``gpu-loadtest demo --min-replicas 0 --compare``: the scale-to-zero setup (the gateway in front, the HPA on its
External metrics) once with minReplicas 1 and once with 0, on the same profile: the GPU-seconds each used, the
time at zero, the wake-ups, how long requests that found no replica waited, and what failed.

``gpu-loadtest demo --compare-capacity``: GPU nodes under the replicas, the two-surge load once with no headroom,
once with static headroom (one node's GPUs) and once with headroom that follows demand: each surge's time to
capacity, the failed requests and the nodes' GPU-seconds, and the figures the headroom is judged by."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadtest.hpa.scale_on import ScaleOn
from loadtest.measure.progress import Progress
from loadtest.measure.summary import Summary
from loadtest.measure.time_to_capacity import PHASES
from loadtest.scenarios.capacity_options import AUTO_MIN
from loadtest.scenarios.demo import run_demo
from loadtest.scenarios.demo_settings import DemoSettings
from loadtest.scenarios.describe import describe_gateway_hpa, describe_metrics, describe_placeholders
from loadtest.scenarios.outputs import Outputs, RunResult
from loadtest.standins.statefiles import atomic_write_json

__all__ = ["CAPACITY_COLUMNS", "COLUMNS", "ZERO_COLUMNS", "CapacityComparison", "CapacityRow", "ComparisonRow",
           "ZeroRow", "capacity_figures", "capacity_row", "comparison_row", "format_capacity_table", "format_table",
           "format_zero_table", "run_capacity_comparison", "run_comparison", "run_zero_comparison", "saving",
           "zero_row"]


@dataclass(frozen=True)
class ComparisonRow:
    """One run's figures: ``first_scale_up_s`` from the load step; ``scale_ups_to_needed`` scale-up decisions until
    one asked for the replicas the peak needs; ``failed`` errors plus dropped; ``hold_p95_ms`` in the hold."""

    scale_on: str
    first_scale_up_s: float | None
    scale_ups_to_needed: int | None
    needed_replicas: int | None
    peak_replicas: int | None
    failed: int
    sent: int
    hold_p95_ms: float | None


def comparison_row(scale_on: ScaleOn, summary: Summary) -> ComparisonRow:
    hold = summary.latency_by_phase.get("hold")
    return ComparisonRow(scale_on.value, summary.scale_up_seconds, summary.scale_ups_to_needed,
                         summary.needed_replicas, summary.peak_replicas, summary.failed, summary.requests["sent"],
                         None if hold is None else hold.p95_ms)


def _cell(value: float | int | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


COLUMNS = ("HPA on", "first scale-up", "scale-ups to needed", "peak replicas", "requests failed", "p95 in the hold")


def format_table(rows: Sequence[ComparisonRow]) -> str:
    """A Markdown table (readable as plain text too)."""
    cells = [[r.scale_on, _cell(r.first_scale_up_s, " s"),
              f"{_cell(r.scale_ups_to_needed)} (to {_cell(r.needed_replicas)})", _cell(r.peak_replicas),
              f"{r.failed} of {r.sent}", _cell(r.hold_p95_ms, " ms")] for r in rows]
    return markdown_table(COLUMNS, cells)


def markdown_table(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    """A Markdown table, its columns padded so it reads as plain text too."""
    widths = [max(len(c) for c in column) for column in zip(columns, *cells, strict=True)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in (columns, *cells)]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


@dataclass(frozen=True)
class ZeroRow:
    """One scale-to-zero run's figures: ``gpu_seconds`` the replicas held over the profile, ``seconds_at_zero`` of
    the profile with no replica, ``wake_ups`` decisions from 0 replicas, ``cold_requests`` that arrived while no
    replica was ready and how long they waited at the gateway (p50, max, and the first after each idle spell),
    ``failed`` errors plus dropped."""

    min_replicas: int
    gpu_seconds: float | None
    seconds_at_zero: int | None
    wake_ups: int
    cold_requests: int
    cold_wait_p50_s: float | None
    cold_wait_max_s: float | None
    first_waits_s: tuple[float, ...]
    failed: int
    sent: int


def zero_row(min_replicas: int, summary: Summary) -> ZeroRow:
    cold = summary.extra.get("cold_start") or {}
    wakes = sum(1 for d in summary.decisions if d["from"] == 0 and d["to"] > 0)
    return ZeroRow(min_replicas, summary.gpu_seconds, summary.seconds_at_zero, wakes, cold.get("requests", 0),
                   cold.get("wait_p50_seconds"), cold.get("wait_max_seconds"),
                   tuple(cold.get("first_request_waits_seconds") or ()), summary.failed, summary.requests["sent"])


ZERO_COLUMNS = ("minReplicas", "GPU-seconds", "seconds at 0", "wake-ups", "requests that found no replica",
                "their wait p50 / max", "first after idle", "requests failed")


def format_zero_table(rows: Sequence[ZeroRow]) -> str:
    """A Markdown table of the minReplicas runs (readable as plain text too)."""
    cells = [[str(r.min_replicas), _cell(r.gpu_seconds), _cell(r.seconds_at_zero), str(r.wake_ups),
              str(r.cold_requests),
              "-" if not r.cold_requests else f"{_cell(r.cold_wait_p50_s, ' s')} / {_cell(r.cold_wait_max_s, ' s')}",
              ", ".join(f"{w:g} s" for w in r.first_waits_s) or "-", f"{r.failed} of {r.sent}"] for r in rows]
    return markdown_table(ZERO_COLUMNS, cells)


def saving(rows: Sequence[ZeroRow]) -> str | None:
    """``minReplicas 0 used A GPU-seconds where minReplicas 1 used B: C % less`` (``None`` without both runs)."""
    by_min = {r.min_replicas: r.gpu_seconds for r in rows}
    one, zero = by_min.get(1), by_min.get(0)
    if not one or zero is None:
        return None
    return (f"minReplicas 0 used {zero:g} GPU-seconds where minReplicas 1 used {one:g}: "
            f"{100 * (one - zero) / one:.0f} % less")


def _with_suffix(path: Path | None, name: str) -> Path | None:
    return None if path is None else path.with_name(f"{path.stem}-{name}{path.suffix}")


Runner = Callable[[DemoSettings, Outputs, Progress], Awaitable[RunResult]]


async def _run_each(variants: Sequence[tuple[str, DemoSettings]], csv: Path | None,
                    progress: Callable[[str], Progress], runner: Runner) -> list[tuple[str, RunResult]]:
    """Run each variant in order; stop after a run that failed or was interrupted. ``csv`` gets one file per run
    (``NAME-<variant>.csv``)."""
    results: list[tuple[str, RunResult]] = []
    for name, run_settings in variants:
        result = await runner(run_settings, Outputs(csv=_with_suffix(csv, name)), progress(name))
        results.append((name, result))
        if result.interrupted or result.error:
            break
    return results


async def run_comparison(settings: DemoSettings, choices: Sequence[ScaleOn], *, plot: Path | None,
                         summary: Path | None, csv: Path | None, progress: Callable[[ScaleOn], Progress],
                         runner: Runner = run_demo) -> list[tuple[ScaleOn, RunResult]]:
    """Run the demo once per choice, in order; stop after a run that failed or was interrupted. The plot and the
    summary (``{"table": [...], "runs": {choice: summary}}``) cover the runs that finished; ``csv`` gets one file
    per run (``NAME-<choice>.csv``)."""
    ran = await _run_each([(c.value, replace(settings, scale_on=c)) for c in choices], csv,
                          lambda name: progress(ScaleOn(name)), runner)
    results = [(ScaleOn(name), result) for name, result in ran]
    done = [(c, r) for c, r in results if not (r.interrupted or r.error)]
    if plot is not None and done:
        legend = "; ".join(f"{c.value}: " + ("both metrics" if c is ScaleOn.BOTH else
                                             describe_metrics(replace(settings, scale_on=c))) for c, _ in done)
        from loadtest.measure.plot import plot_comparison  # matplotlib: the loadtest extra, only for --plot

        plot_comparison([(c.value, r.rows, r.syncs) for c, r in done], plot,
                        load_step_at=settings.profile.load_step_at, load_drop_at=settings.profile.load_drop_at,
                        title=f"gpu-loadtest demo --compare: profile {settings.profile.text()}, HPA sync every "
                              f"{settings.sync_period_s:g}s\n{legend}")
    if summary is not None:
        document: dict[str, Any] = {
            "table": [vars(comparison_row(c, r.summary)) for c, r in results],
            "runs": {c.value: r.summary.to_json() for c, r in results},
            "plot": str(plot) if plot is not None and done else None}
        atomic_write_json(summary, document)
    return results


async def run_zero_comparison(settings: DemoSettings, *, plot: Path | None, summary: Path | None, csv: Path | None,
                              progress: Callable[[int], Progress], runner: Runner = run_demo,
                              ) -> list[tuple[int, RunResult]]:
    """The scale-to-zero setup with minReplicas 1, then 0, on ``settings``' profile; stops after a run that failed or
    was interrupted. The plot and the summary (``{"table": [...], "saving": ..., "runs": {"min-N": summary}}``)
    cover the runs that finished; ``csv`` gets ``NAME-min-1.csv`` and ``NAME-min-0.csv``."""
    ran = await _run_each([(f"min-{m}", replace(settings, min_replicas=m)) for m in (1, 0)], csv,
                          lambda name: progress(int(name.removeprefix("min-"))), runner)
    results = [(int(name.removeprefix("min-")), result) for name, result in ran]
    done = [(m, r) for m, r in results if not (r.interrupted or r.error)]
    rows = [zero_row(m, r.summary) for m, r in results]
    if plot is not None and done:
        legend = [(f"minReplicas {m}: {_cell(r.summary.gpu_seconds)} GPU-s", r.rows, r.syncs) for m, r in done]
        from loadtest.measure.plot import plot_comparison

        plot_comparison(legend, plot, load_step_at=settings.profile.load_step_at,
                        load_drop_at=settings.profile.load_drop_at,
                        title=f"gpu-loadtest demo --min-replicas 0 --compare: profile {settings.profile.text()}\n"
                              f"{describe_gateway_hpa(settings)}")
    if summary is not None:
        atomic_write_json(summary, {"table": [vars(r) for r in rows], "saving": saving(rows),
                                    "runs": {f"min-{m}": r.summary.to_json() for m, r in results},
                                    "plot": str(plot) if plot is not None and done else None})
    return results


@dataclass(frozen=True)
class CapacityRow:
    """One ``--compare-capacity`` run: time to capacity of each surge (real-time equivalents; ``None``: not reached
    before the load fell), the first surge's phases, failed requests, the nodes' GPU-seconds and the workload's
    pending pod-seconds over the profile. A row of a cluster's capacity report (``gpu-loadtest capacity``) has a
    scale-up where a run has a surge, and names in ``unknown`` what its records did not hold: ``failed``,
    ``gpu_node_seconds``, ``pending_pod_seconds``, ``phases_s.<phase>`` and ``<figure>.<surge index>``."""

    headroom: str
    time_to_capacity_s: tuple[float | None, ...]
    behind_demand_s: tuple[float | None, ...]
    first_phases_s: dict[str, float | None]
    failed: int | None
    sent: int | None
    gpu_node_seconds: float | None
    pending_pod_seconds: float | None
    unknown: tuple[str, ...] = ()


def capacity_row(headroom: str, summary: Summary) -> CapacityRow:
    return capacity_row_from(headroom, summary.extra.get("capacity") or {}, summary.failed, summary.requests["sent"])


def capacity_row_from(headroom: str, capacity: dict[str, Any], failed: int | None, sent: int | None) -> CapacityRow:
    """The row of a run's (or a report's) ``capacity`` figures; ``failed`` and ``sent`` ``None``: unknown."""
    surges = capacity.get("surges") or []
    unknown = {f"{key}.{i}" for i, s in enumerate(surges) for key in ("time_to_capacity_s", "behind_demand_s")
               if key in (s.get("unknown") or ())}
    unknown |= {k for k in (surges[0].get("unknown") or ()) if k.startswith("phases_s.")} if surges else set()
    unknown |= {k for k in ("gpu_node_seconds", "pending_pod_seconds") if k in (capacity.get("unknown") or ())}
    if failed is None:
        unknown.add("failed")
    return CapacityRow(headroom, tuple(s["time_to_capacity_s"] for s in surges),
                       tuple(s.get("behind_demand_s") for s in surges),
                       dict(surges[0]["phases_s"]) if surges else {}, failed, sent,
                       capacity.get("gpu_node_seconds"), capacity.get("pending_pod_seconds"), tuple(sorted(unknown)))


CAPACITY_COLUMNS = ("headroom", "time to capacity per surge", "behind demand",
                    "surge 1: decision / node / image / model", "requests failed", "GPU-node-seconds",
                    "pending pod-seconds")


def format_capacity_table(rows: Sequence[CapacityRow]) -> str:
    """A Markdown table of the headroom runs (readable as plain text too); what a row's records did not hold reads
    ``unknown``."""
    cells = []
    for r in rows:
        def known(value: float | int | None, key: str, unit: str = "", r: CapacityRow = r) -> str:
            return "unknown" if key in r.unknown else _cell(value, unit)

        cells.append([r.headroom,
                      ", ".join(known(t, f"time_to_capacity_s.{i}", " s")
                                for i, t in enumerate(r.time_to_capacity_s)) or "-",
                      ", ".join(known(t, f"behind_demand_s.{i}", " s") for i, t in enumerate(r.behind_demand_s)) or "-",
                      " / ".join(known(r.first_phases_s.get(p), f"phases_s.{p}", " s") for p in PHASES),
                      "unknown" if r.failed is None else f"{r.failed} of {r.sent}",
                      known(r.gpu_node_seconds, "gpu_node_seconds"),
                      known(r.pending_pod_seconds, "pending_pod_seconds")])
    return markdown_table(CAPACITY_COLUMNS, cells)


@dataclass(frozen=True)
class CapacityComparison:
    """What ``--compare-capacity`` ran (``none``, ``static``, ``auto``, fewer after a run that failed or was
    interrupted), each run's table row and the figures the headroom is judged by."""

    runs: list[tuple[str, RunResult]]
    rows: list[CapacityRow]
    figures: list[str]


def capacity_figures(rows: Sequence[CapacityRow]) -> list[str]:
    """The issue's figures, printed (never asserted): how much static headroom cuts the first surge's time to
    capacity, and how much of that gain the auto headroom keeps for what share of static headroom's extra
    GPU-node-seconds; the same for the time behind demand where a ramp makes it differ."""
    by = {r.headroom.split(" ")[0]: r for r in rows}
    none, static, auto = by.get("none"), by.get("static"), by.get("auto")
    lines = _gain_lines(none, static, auto, lambda r: r.time_to_capacity_s, "time to capacity")
    behind = _gain_lines(none, static, auto, lambda r: r.behind_demand_s, "time behind demand")
    if any(r.behind_demand_s[:1] != r.time_to_capacity_s[:1] for r in rows if r.behind_demand_s):
        lines += behind
    base_cost, static_cost, auto_cost = (None if r is None else r.gpu_node_seconds for r in (none, static, auto))
    if base_cost is not None and static_cost is not None and auto_cost is not None:
        extra_static, extra_auto = static_cost - base_cost, auto_cost - base_cost
        if extra_static > 0:
            lines.append(f"auto headroom's extra GPU-node-seconds were {100 * extra_auto / extra_static:.0f} % of "
                         f"static headroom's ({extra_auto:.0f} vs {extra_static:.0f}; goal: <= 50 %)")
    return lines


def _gain_lines(none: CapacityRow | None, static: CapacityRow | None, auto: CapacityRow | None,
                figure: Callable[[CapacityRow], tuple[float | None, ...]], name: str) -> list[str]:
    """Static headroom's cut of the first surge's ``figure`` and the share of it the auto headroom kept."""

    def first(row: CapacityRow | None) -> float | None:
        return figure(row)[0] if row is not None and figure(row) else None

    base, fixed, demand = first(none), first(static), first(auto)
    lines: list[str] = []
    if base and fixed is not None:
        lines.append(f"static headroom cut the first surge's {name} by {100 * (base - fixed) / base:.0f} % "
                     f"({base:g} s -> {fixed:g} s; goal: >= 80 %)")
        if demand is not None and base > fixed:
            lines.append(f"auto headroom kept {100 * (base - demand) / (base - fixed):.0f} % of that gain "
                         f"({demand:g} s; goal: >= 70 %)")
    return lines


async def run_capacity_comparison(settings: DemoSettings, static: int, *, plot: Path | None, summary: Path | None,
                                  csv: Path | None, progress: Callable[[str], Progress], runner: Runner = run_demo,
                                  ) -> CapacityComparison:
    """The same load with no headroom, ``static`` placeholder replicas and auto headroom (at most as many; at least
    what ``--headroom auto:M..N`` said, else the chart's default), in that order; stops after
    a run that failed or was interrupted. The plot and the summary (``{"table": [...], "figures": [...], "runs":
    {name: summary}}``) cover the runs that finished; ``csv`` gets ``NAME-none.csv``, ``NAME-static.csv``,
    ``NAME-auto.csv``."""
    capacity = settings.capacity
    assert capacity is not None
    least = capacity.headroom_min if capacity.headroom_auto else AUTO_MIN  # the chart's default (1.37+)
    variants = [("none", replace(capacity, headroom=0, headroom_auto=False)),
                ("static", replace(capacity, headroom=static, headroom_auto=False)),
                ("auto", replace(capacity, headroom=static, headroom_auto=True, headroom_min=least))]
    results = await _run_each([(name, replace(settings, capacity=c)) for name, c in variants], csv, progress,
                              runner)
    labels = {"none": "none", "static": f"static {static}", "auto": "auto"}
    done = [(n, r) for n, r in results if not (r.interrupted or r.error)]
    rows = [capacity_row(labels[n], r.summary) for n, r in results]
    figures = capacity_figures(rows)
    if plot is not None and done:
        from loadtest.measure.plot import plot_capacity_comparison

        plot_capacity_comparison([(labels[n], r.rows, r.syncs) for n, r in done], plot,
                                 clock=settings.clock,
                                 title=f"gpu-loadtest demo --compare-capacity --nodes {capacity.kind.value}: "
                                       f"{describe_metrics(settings)}; {describe_placeholders(capacity)}\n"
                                       + "\n".join(line for line in figures if line.startswith("static headroom cut")))
    if summary is not None:
        atomic_write_json(summary, {"table": [vars(r) for r in rows], "figures": figures,
                                    "runs": {n: r.summary.to_json() for n, r in results},
                                    "plot": str(plot) if plot is not None and done else None})
    return CapacityComparison(results, rows, figures)
