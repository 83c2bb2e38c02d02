"""``gpu-loadtest demo --compare``: the same load profile once per scaling choice (GPU utilisation, requests
waiting, both), then one table and one plot of all runs. Each run starts its own processes from scratch.

``gpu-loadtest demo --min-replicas 0 --compare``: the scale-to-zero setup (the gateway in front, the HPA on its
External metrics) once with minReplicas 1 and once with 0, on the same profile: the GPU-seconds each used, the
time at zero, the wake-ups, how long requests that found no replica waited, and what failed.

The runner every comparison shares (:func:`run_each`) is here too; ``--compare-capacity`` is
:mod:`loadtest.scenarios.capacity_compare`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadtest.hpa.scale_on import ScaleOn
from loadtest.measure.progress import Progress
from loadtest.measure.summary import Summary
from loadtest.scenarios.demo import run_demo
from loadtest.scenarios.demo_settings import DemoSettings
from loadtest.scenarios.describe import describe_gateway_hpa, describe_metrics
from loadtest.scenarios.outputs import Outputs, RunResult
from loadtest.scenarios.tables import cell, markdown
from loadtest.standins.statefiles import atomic_write_json

__all__ = ["COLUMNS", "ZERO_COLUMNS", "ComparisonRow", "Runner", "ZeroRow", "comparison_row", "format_table",
           "format_zero_table", "run_comparison", "run_each", "run_zero_comparison", "saving", "with_suffix",
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


COLUMNS = ("HPA on", "first scale-up", "scale-ups to needed", "peak replicas", "requests failed", "p95 in the hold")


def format_table(rows: Sequence[ComparisonRow]) -> str:
    """A Markdown table (readable as plain text too)."""
    cells = [[r.scale_on, cell(r.first_scale_up_s, " s"),
              f"{cell(r.scale_ups_to_needed)} (to {cell(r.needed_replicas)})", cell(r.peak_replicas),
              f"{r.failed} of {r.sent}", cell(r.hold_p95_ms, " ms")] for r in rows]
    return markdown(COLUMNS, cells)


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
    cells = [[str(r.min_replicas), cell(r.gpu_seconds), cell(r.seconds_at_zero), str(r.wake_ups),
              str(r.cold_requests),
              "-" if not r.cold_requests else f"{cell(r.cold_wait_p50_s, ' s')} / {cell(r.cold_wait_max_s, ' s')}",
              ", ".join(f"{w:g} s" for w in r.first_waits_s) or "-", f"{r.failed} of {r.sent}"] for r in rows]
    return markdown(ZERO_COLUMNS, cells)


def saving(rows: Sequence[ZeroRow]) -> str | None:
    """``minReplicas 0 used A GPU-seconds where minReplicas 1 used B: C % less`` (``None`` without both runs)."""
    by_min = {r.min_replicas: r.gpu_seconds for r in rows}
    one, zero = by_min.get(1), by_min.get(0)
    if not one or zero is None:
        return None
    return (f"minReplicas 0 used {zero:g} GPU-seconds where minReplicas 1 used {one:g}: "
            f"{100 * (one - zero) / one:.0f} % less")


def with_suffix(path: Path | None, name: str) -> Path | None:
    return None if path is None else path.with_name(f"{path.stem}-{name}{path.suffix}")


Runner = Callable[[DemoSettings, Outputs, Progress], Awaitable[RunResult]]


async def run_each(variants: Sequence[tuple[str, DemoSettings]], csv: Path | None,
                    progress: Callable[[str], Progress], runner: Runner) -> list[tuple[str, RunResult]]:
    """Run each variant in order; stop after a run that failed or was interrupted. ``csv`` gets one file per run
    (``NAME-<variant>.csv``)."""
    results: list[tuple[str, RunResult]] = []
    for name, run_settings in variants:
        result = await runner(run_settings, Outputs(csv=with_suffix(csv, name)), progress(name))
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
    ran = await run_each([(c.value, replace(settings, scale_on=c)) for c in choices], csv,
                          lambda name: progress(ScaleOn(name)), runner)
    results = [(ScaleOn(name), result) for name, result in ran]
    done = [(c, r) for c, r in results if not (r.interrupted or r.error)]
    if plot is not None and done:
        legend = "; ".join(f"{c.value}: " + ("both metrics" if c is ScaleOn.BOTH else
                                             describe_metrics(replace(settings, scale_on=c))) for c, _ in done)
        from loadtest.measure.plot import plot_comparison  # matplotlib: the [loadtest] extra

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
    ran = await run_each([(f"min-{m}", replace(settings, min_replicas=m)) for m in (1, 0)], csv,
                          lambda name: progress(int(name.removeprefix("min-"))), runner)
    results = [(int(name.removeprefix("min-")), result) for name, result in ran]
    done = [(m, r) for m, r in results if not (r.interrupted or r.error)]
    rows = [zero_row(m, r.summary) for m, r in results]
    if plot is not None and done:
        legend = [(f"minReplicas {m}: {cell(r.summary.gpu_seconds)} GPU-s", r.rows, r.syncs) for m, r in done]
        from loadtest.measure.plot import plot_comparison  # matplotlib: the [loadtest] extra

        plot_comparison(legend, plot, load_step_at=settings.profile.load_step_at,
                        load_drop_at=settings.profile.load_drop_at,
                        title=f"gpu-loadtest demo --min-replicas 0 --compare: profile {settings.profile.text()}\n"
                              f"{describe_gateway_hpa(settings)}")
    if summary is not None:
        atomic_write_json(summary, {"table": [vars(r) for r in rows], "saving": saving(rows),
                                    "runs": {f"min-{m}": r.summary.to_json() for m, r in results},
                                    "plot": str(plot) if plot is not None and done else None})
    return results
