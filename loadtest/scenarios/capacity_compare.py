"""``gpu-loadtest demo --compare-capacity``: GPU nodes under the replicas, the two-surge load once with no headroom,
once with static headroom (one node's GPUs) and once with headroom that follows demand: each surge's time to
capacity, the failed requests and the nodes' GPU-seconds, and the figures the headroom is judged by.

A run that failed or was interrupted stays in the table, marked, and out of the figures, which say so. With
``--runs N`` the comparison runs N times, each with its own seed for the load's arrivals (the three variants of one
run share it), and the table and figures give the median and the spread (lowest to highest) of each figure over
the runs that finished: one run is one draw of Poisson arrivals and of the machine's timing, and two of them
differed by tens of points (issue 48).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadtest.measure.progress import Progress
from loadtest.measure.summary import Summary
from loadtest.measure.time_to_capacity import PHASES, no_scale_up_needed
from loadtest.scenarios.capacity_options import AUTO_MIN
from loadtest.scenarios.compare import Runner, run_each, with_suffix
from loadtest.scenarios.demo import run_demo
from loadtest.scenarios.demo_settings import DemoSettings
from loadtest.scenarios.describe import describe_metrics, describe_placeholders
from loadtest.scenarios.outputs import RunResult
from loadtest.scenarios.tables import cell, markdown
from loadtest.standins.statefiles import atomic_write_json

__all__ = ["CAPACITY_COLUMNS", "CapacityComparison", "CapacityRow", "Figure", "capacity_figures", "capacity_row",
           "capacity_row_from", "figures_of", "format_capacity_table", "run_capacity_comparison",
           "run_capacity_series", "spread_figures", "spread_table"]

NONE_NEEDED = "none needed"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class CapacityRow:
    """One ``--compare-capacity`` run: time to capacity of each surge (real-time equivalents; ``None``: not reached
    before the load fell, or, where ``no_scale_up`` says so, none needed), the first surge's phases, failed
    requests, the nodes' GPU-seconds and the workload's pending pod-seconds over the profile. A row of a cluster's
    capacity report (``gpu-loadtest capacity``) has a scale-up where a run has a surge, and names in ``unknown``
    what its records did not hold: ``failed``, ``gpu_node_seconds``, ``pending_pod_seconds``, ``phases_s.<phase>``
    and ``<figure>.<surge index>``."""

    headroom: str
    time_to_capacity_s: tuple[float | None, ...]
    behind_demand_s: tuple[float | None, ...]
    first_phases_s: dict[str, float | None]
    failed: int | None
    sent: int | None
    gpu_node_seconds: float | None
    pending_pod_seconds: float | None
    no_scale_up: tuple[bool, ...] = ()
    unknown: tuple[str, ...] = ()

    @property
    def variant(self) -> str:
        """``none``, ``static`` or ``auto``."""
        return self.headroom.split(" ")[0]


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
                       capacity.get("gpu_node_seconds"), capacity.get("pending_pod_seconds"),
                       tuple(no_scale_up_needed(s) for s in surges), tuple(sorted(unknown)))


CAPACITY_COLUMNS = ("headroom", "time to capacity per surge", "behind demand",
                    "surge 1: decision / node / image / model", "requests failed", "GPU-node-seconds",
                    "pending pod-seconds")


def _surge_cells(row: CapacityRow, times: tuple[float | None, ...], key: str) -> str:
    return ", ".join(NONE_NEEDED if i < len(row.no_scale_up) and row.no_scale_up[i] else
                     UNKNOWN if f"{key}.{i}" in row.unknown else cell(t, " s") for i, t in enumerate(times)) or "-"


def format_capacity_table(rows: Sequence[CapacityRow]) -> str:
    """A Markdown table of the headroom runs (readable as plain text too); what a row's records did not hold reads
    ``unknown``."""
    cells = []
    for r in rows:
        def known(value: float | int | None, key: str, unit: str = "", r: CapacityRow = r) -> str:
            return UNKNOWN if key in r.unknown else cell(value, unit)

        cells.append([r.headroom, _surge_cells(r, r.time_to_capacity_s, "time_to_capacity_s"),
                      _surge_cells(r, r.behind_demand_s, "behind_demand_s"),
                      " / ".join(known(r.first_phases_s.get(p), f"phases_s.{p}", " s") for p in PHASES),
                      UNKNOWN if r.failed is None else f"{r.failed} of {r.sent}",
                      known(r.gpu_node_seconds, "gpu_node_seconds"),
                      known(r.pending_pod_seconds, "pending_pod_seconds")])
    return markdown(CAPACITY_COLUMNS, cells)


@dataclass(frozen=True)
class Figure:
    """One figure the headroom is judged by: ``<before> <percent> %<after> (<detail>; goal: <goal>)``."""

    before: str
    percent: float
    after: str
    detail: str
    goal: str
    of: str = ""  # what it is about ("time to capacity", "time behind demand"), where the words do not say

    @property
    def key(self) -> str:
        return f"{self.before} ...{self.after} ({self.of})"

    @property
    def text(self) -> str:
        return f"{self.before} {self.percent:.0f} %{self.after} ({self.detail}; goal: {self.goal})"


def figures_of(rows: Sequence[CapacityRow]) -> list[Figure]:
    """How much static headroom cuts the first surge's time to capacity, and how much of that gain the auto
    headroom keeps for what share of static headroom's extra GPU-node-seconds; the same for the time behind demand
    where a ramp makes it differ. ``rows``: runs that finished."""
    by = {r.variant: r for r in rows}
    none, static, auto = by.get("none"), by.get("static"), by.get("auto")
    found = _gains(none, static, auto, lambda r: r.time_to_capacity_s, "time to capacity")
    if any(r.behind_demand_s[:1] != r.time_to_capacity_s[:1] for r in rows if r.behind_demand_s):
        found += _gains(none, static, auto, lambda r: r.behind_demand_s, "time behind demand")
    base_cost, static_cost, auto_cost = (None if r is None else r.gpu_node_seconds for r in (none, static, auto))
    if base_cost is not None and static_cost is not None and auto_cost is not None:
        extra_static, extra_auto = static_cost - base_cost, auto_cost - base_cost
        if extra_static > 0:
            found.append(Figure("auto headroom's extra GPU-node-seconds were", 100 * extra_auto / extra_static,
                                " of static headroom's", f"{extra_auto:.0f} vs {extra_static:.0f}", "<= 50 %"))
    return found


def capacity_figures(rows: Sequence[CapacityRow]) -> list[str]:
    """The issue's figures as lines, printed (never asserted)."""
    return [f.text for f in figures_of(rows)]


def _gains(none: CapacityRow | None, static: CapacityRow | None, auto: CapacityRow | None,
           figure: Callable[[CapacityRow], tuple[float | None, ...]], name: str) -> list[Figure]:
    """Static headroom's cut of the first surge's ``figure`` and the share of it the auto headroom kept."""

    def first(row: CapacityRow | None) -> float | None:
        return figure(row)[0] if row is not None and figure(row) else None

    base, fixed, demand = first(none), first(static), first(auto)
    found: list[Figure] = []
    if base and fixed is not None:
        found.append(Figure(f"static headroom cut the first surge's {name} by", 100 * (base - fixed) / base, "",
                            f"{base:g} s -> {fixed:g} s", ">= 80 %"))
        if demand is not None and base > fixed:
            found.append(Figure("auto headroom kept", 100 * (base - demand) / (base - fixed), " of that gain",
                                f"{demand:g} s", ">= 70 %", name))
    return found


@dataclass(frozen=True)
class CapacityComparison:
    """What ``--compare-capacity`` ran (``none``, ``static``, ``auto``, fewer after a run that failed or was
    interrupted), each run's table row, the figures of the runs that finished, and what was left out of them."""

    runs: list[tuple[str, RunResult]]
    rows: list[CapacityRow]
    figures: list[str]
    left_out: list[str]
    seed: int | None = None

    @property
    def finished(self) -> list[CapacityRow]:
        return [row for row, (_, result) in zip(self.rows, self.runs, strict=True) if _finished(result)]


def _finished(result: RunResult) -> bool:
    return not (result.interrupted or result.error)


def _ending(result: RunResult) -> str:
    return "interrupted" if result.interrupted else f"failed: {result.error}"


async def run_capacity_comparison(settings: DemoSettings, static: int, *, plot: Path | None, summary: Path | None,
                                  csv: Path | None, progress: Callable[[str], Progress], runner: Runner = run_demo,
                                  ) -> CapacityComparison:
    """The same load with no headroom, ``static`` placeholder replicas and auto headroom (at most as many; at least
    what ``--headroom auto:M..N`` said, else the chart's default), in that order; stops after a run that failed or
    was interrupted. The figures and the plot cover the runs that finished; the summary (``{"table": [...],
    "figures": [...], "left_out": [...], "runs": {name: summary}}``) has every run; ``csv`` gets
    ``NAME-none.csv``, ``NAME-static.csv``, ``NAME-auto.csv``."""
    capacity = settings.capacity
    assert capacity is not None
    least = capacity.headroom_min if capacity.headroom_auto else AUTO_MIN  # the chart's default (1.37+)
    variants = [("none", replace(capacity, headroom=0, headroom_auto=False)),
                ("static", replace(capacity, headroom=static, headroom_auto=False)),
                ("auto", replace(capacity, headroom=static, headroom_auto=True, headroom_min=least))]
    results = await run_each([(name, replace(settings, capacity=c)) for name, c in variants], csv, progress, runner)
    labels = {"none": "none", "static": f"static {static}", "auto": "auto"}
    rows = [capacity_row(labels[n] if _finished(r) else f"{labels[n]} ({_ending(r).partition(':')[0]})", r.summary)
            for n, r in results]
    done = [(n, r) for n, r in results if _finished(r)]
    left_out = [f"{n} ({_ending(r)})" for n, r in results if not _finished(r)]
    figures = capacity_figures([row for row, (_, r) in zip(rows, results, strict=True) if _finished(r)])
    if left_out:
        figures.append(f"left out of these figures: {', '.join(left_out)}")
    comparison = CapacityComparison(results, rows, figures, left_out, settings.seed)
    if plot is not None and done:
        from loadtest.measure.plot import plot_capacity_comparison

        plot_capacity_comparison([(labels[n], r.rows, r.syncs) for n, r in done], plot, clock=settings.clock,
                                 title=f"gpu-loadtest demo --compare-capacity --nodes {capacity.kind.value}: "
                                       f"{describe_metrics(settings)}; {describe_placeholders(capacity)}\n"
                                       + "\n".join(line for line in figures if line.startswith("static headroom cut")))
    if summary is not None:
        atomic_write_json(summary, {**_document(comparison), "plot": str(plot) if plot is not None and done else None})
    return comparison


def _document(comparison: CapacityComparison) -> dict[str, Any]:
    return {"seed": comparison.seed, "table": [vars(r) for r in comparison.rows], "figures": comparison.figures,
            "left_out": comparison.left_out, "runs": {n: r.summary.to_json() for n, r in comparison.runs}}


# -- several seeded runs ---------------------------------------------------------------------------------------------

async def run_capacity_series(settings: DemoSettings, static: int, runs: int, first_seed: int, *, plot: Path | None,
                              summary: Path | None, csv: Path | None, progress: Callable[[str], Progress],
                              runner: Runner = run_demo) -> list[CapacityComparison]:
    """:func:`run_capacity_comparison` ``runs`` times, seeds ``first_seed``, ``first_seed + 1`` ...; stops after an
    interrupted one. Each writes its plot and CSVs with ``-seed<N>`` in their names; ``summary`` gets
    ``{"runs": N, "seeds": [...], "table": ..., "figures": ..., "comparisons": [...]}``."""
    done: list[CapacityComparison] = []
    for seed in range(first_seed, first_seed + runs):
        tag = f"seed{seed}"

        def seeded(name: str, seed: int = seed) -> Progress:
            return progress(f"{name}, seed {seed}")

        comparison = await run_capacity_comparison(
            replace(settings, seed=seed), static, plot=with_suffix(plot, tag), summary=None,
            csv=with_suffix(csv, tag), progress=seeded, runner=runner)
        done.append(comparison)
        if any(r.interrupted for _, r in comparison.runs):
            break
    if summary is not None:
        atomic_write_json(summary, {"runs": len(done), "seeds": [c.seed for c in done],
                                    "table": spread_table(done), "figures": spread_figures(done),
                                    "comparisons": [_document(c) for c in done]})
    return done


def _spread(values: Sequence[float | None], unit: str = "") -> str:
    """``median (lowest..highest)`` of the values there are; one value as it is; ``-`` for none."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return "-"
    median = round(statistics.median(known), 1)
    if len(known) == 1:
        return cell(float(median), unit)
    return f"{median:g}{unit} ({known[0]:g}..{known[-1]:g})"


def _surge_spread(rows: Sequence[CapacityRow], pick: Callable[[CapacityRow], tuple[float | None, ...]],
                  i: int) -> str:
    """Surge ``i``'s median and spread over the runs that reached capacity, and how many did not: a run that never
    reached it is the worst case, not a missing value to leave out unsaid."""
    none_needed = [i < len(r.no_scale_up) and r.no_scale_up[i] for r in rows]
    if all(none_needed):
        return NONE_NEEDED
    values = [pick(r)[i] if i < len(pick(r)) else None for r in rows]
    missed = sum(v is None and not skip for v, skip in zip(values, none_needed, strict=True))
    said = [f"{missed} of {len(rows)} not reached"] if missed else []
    said += [f"{sum(none_needed)} of {len(rows)} none needed"] if any(none_needed) else []
    return _spread(values, " s") + (f" [{'; '.join(said)}]" if said else "")


def spread_table(comparisons: Sequence[CapacityComparison]) -> str:
    """The comparison table with each cell the median and spread over the runs that finished."""
    by_variant: dict[str, list[CapacityRow]] = {}
    labels: dict[str, str] = {}
    for comparison in comparisons:
        for row in comparison.finished:
            by_variant.setdefault(row.variant, []).append(row)
            labels.setdefault(row.variant, row.headroom)
    cells = []
    for variant, rows in by_variant.items():
        surges = max(len(r.time_to_capacity_s) for r in rows)

        def per_surge(pick: Callable[[CapacityRow], tuple[float | None, ...]], rows: list[CapacityRow] = rows,
                      surges: int = surges) -> str:
            return ", ".join(_surge_spread(rows, pick, i) for i in range(surges)) or "-"

        cells.append([f"{labels[variant]} ({len(rows)} runs)", per_surge(lambda r: r.time_to_capacity_s),
                      per_surge(lambda r: r.behind_demand_s),
                      " / ".join(_spread([r.first_phases_s.get(p) for r in rows], " s") for p in PHASES),
                      _spread([None if r.failed is None else float(r.failed) for r in rows]),
                      _spread([r.gpu_node_seconds for r in rows]),
                      _spread([r.pending_pod_seconds for r in rows])])
    return markdown(CAPACITY_COLUMNS, cells)


def spread_figures(comparisons: Sequence[CapacityComparison]) -> list[str]:
    """Each figure's median and spread over the runs that gave it; then the runs left out."""
    grouped: dict[str, list[Figure]] = {}
    for comparison in comparisons:
        for figure in figures_of(comparison.finished):
            grouped.setdefault(figure.key, []).append(figure)
    lines = []
    for found in grouped.values():
        values = sorted(f.percent for f in found)
        first = found[0]
        spread = "" if len(values) == 1 else f", {values[0]:.0f} to {values[-1]:.0f} %"
        lines.append(f"{first.before} {statistics.median(values):.0f} %{first.after} (median of {len(values)} "
                     f"run{'s' if len(values) != 1 else ''}{spread}; goal: {first.goal})")
    left = [f"seed {c.seed}: {', '.join(c.left_out)}" for c in comparisons if c.left_out]
    if left:
        lines.append(f"left out of these figures: {'; '.join(left)}")
    return lines
