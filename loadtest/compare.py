"""``gpu-loadtest demo --compare``: the same load profile once per scaling choice (GPU utilisation, requests
waiting, both), then one table and one plot of all runs. Each run starts its own processes from scratch."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadtest.demo import DemoOutputs, DemoResult, DemoSettings, ScaleOn, describe_metrics, run_demo
from loadtest.live import Progress
from loadtest.plot import plot_comparison
from loadtest.statefiles import atomic_write_json
from loadtest.summary import Summary

__all__ = ["COLUMNS", "ComparisonRow", "comparison_row", "format_table", "run_comparison"]


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
    widths = [max(len(c) for c in column) for column in zip(COLUMNS, *cells, strict=True)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in (COLUMNS, *cells)]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _with_suffix(path: Path | None, choice: ScaleOn) -> Path | None:
    return None if path is None else path.with_name(f"{path.stem}-{choice.value}{path.suffix}")


Runner = Callable[[DemoSettings, DemoOutputs, Progress], Awaitable[DemoResult]]


async def run_comparison(settings: DemoSettings, choices: Sequence[ScaleOn], *, plot: Path | None,
                         summary: Path | None, csv: Path | None, progress: Callable[[ScaleOn], Progress],
                         runner: Runner = run_demo) -> list[tuple[ScaleOn, DemoResult]]:
    """Run the demo once per choice, in order; stop after a run that failed or was interrupted. The plot and the
    summary (``{"table": [...], "runs": {choice: summary}}``) cover the runs that finished; ``csv`` gets one file
    per run (``NAME-<choice>.csv``)."""
    results: list[tuple[ScaleOn, DemoResult]] = []
    for choice in choices:
        run_settings = replace(settings, scale_on=choice)
        result = await runner(run_settings, DemoOutputs(csv=_with_suffix(csv, choice)), progress(choice))
        results.append((choice, result))
        if result.interrupted or result.error:
            break
    done = [(c, r) for c, r in results if not (r.interrupted or r.error)]
    if plot is not None and done:
        legend = "; ".join(f"{c.value}: " + ("both metrics" if c is ScaleOn.BOTH else
                                             describe_metrics(replace(settings, scale_on=c))) for c, _ in done)
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
