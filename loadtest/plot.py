"""The run's PNG: four panels sharing the time axis (request rate, latency, the scaling metric, replicas)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from loadtest.timeline import SyncRecord, TimelineRow

__all__ = ["plot_timeline"]


def _series(rows: Sequence[TimelineRow], name: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in rows:
        value = getattr(row, name)
        if value is not None:
            xs.append(row.t)
            ys.append(float(value))
    return xs, ys


def plot_timeline(
    rows: Sequence[TimelineRow],
    syncs: Sequence[SyncRecord],
    path: str | Path,
    *,
    title: str,
    metric_label: str = "GPU utilisation (%)",
    load_step_at: float | None = None,
    load_drop_at: float | None = None,
) -> None:
    # A bare Figure (no pyplot): no global backend state, and PNG output goes through Agg.
    fig = Figure(figsize=(11, 10.5))
    rate, latency, metric, replicas = fig.subplots(4, 1, sharex=True)
    fig.suptitle(title, fontsize=12)
    seconds = [r.t for r in rows]

    rate.step(seconds, [r.target_rps for r in rows], where="post", color="grey", linestyle="--", label="target")
    rate.step(seconds, [r.sent for r in rows], where="post", color="tab:blue", label="sent")
    rate.step(seconds, [r.ok for r in rows], where="post", color="tab:green", label="ok")
    if any(r.errors or r.dropped for r in rows):
        rate.step(seconds, [r.errors + r.dropped for r in rows], where="post", color="tab:red",
                  label="errors + dropped")
    rate.set_ylabel("requests / s")

    for name, label, color in (("p50_ms", "p50", "tab:blue"), ("p95_ms", "p95", "tab:orange")):
        xs, ys = _series(rows, name)
        latency.plot(xs, ys, color=color, label=label)
    if any(r.p50_ms for r in rows):
        latency.set_yscale("log")
    latency.set_ylabel("latency (ms)")

    xs, ys = _series(rows, "gpu_util")
    if xs:
        metric.plot(xs, ys, color="tab:purple", alpha=0.45, linewidth=1, label="GPU utilisation (mean of replicas)")
    xs, ys = _series(rows, "hpa_metric")
    if xs:
        metric.step(xs, ys, where="post", color="tab:purple", linewidth=2, label="as the HPA saw it")
    sync_x = [s.t for s in syncs if s.metric is not None]
    if sync_x:
        metric.plot(sync_x, [s.metric for s in syncs if s.metric is not None], "o", color="tab:purple",
                    markersize=3, label="HPA syncs")
    for name, label, color in (("metric_value", "metrics API (polled)", "tab:brown"),
                               ("prom_value", "Prometheus query", "tab:cyan")):
        xs, ys = _series(rows, name)
        if xs:
            metric.plot(xs, ys, color=color, label=label)
    xs, ys = _series(rows, "metric_target")
    if xs:
        metric.plot(xs, ys, color="grey", linestyle="--", label="target")
    metric.set_ylabel(metric_label)

    for name, label, color, width in (("desired_replicas", "desired", "tab:orange", 2.5),
                                      ("current_replicas", "current (ready)", "tab:blue", 1.5)):
        xs, ys = _series(rows, name)
        if xs:
            replicas.step(xs, ys, where="post", color=color, linewidth=width, label=label)
    for s in syncs:
        if s.direction:
            replicas.annotate(f"{s.current}\u2192{s.desired}", (s.t, s.desired), textcoords="offset points",
                              xytext=(3, 4), fontsize=8)
    replicas.set_ylabel("replicas")
    replicas.set_xlabel("seconds since the load started")
    replicas.yaxis.get_major_locator().set_params(integer=True)
    replicas.set_ylim(bottom=0)

    for axis in (rate, latency, metric, replicas):
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(loc="best", fontsize=8)
        for at, label in ((load_step_at, "load step"), (load_drop_at, "load drop")):
            if at is not None:
                axis.axvline(at, color="black", linestyle=":", linewidth=1)
                if axis is rate:
                    axis.annotate(label, (at, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                                  textcoords="offset points", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
