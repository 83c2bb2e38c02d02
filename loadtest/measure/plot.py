"""The run's PNG: four panels sharing the time axis (request rate, latency, the scaling metric, replicas), and a
fifth with GPU nodes in the loop (the nodes' GPUs, those allocatable, pending pods, placeholders); and the
comparison of several demo runs of the same profile in one PNG. A run on a compressed clock labels its time axis
in real-time seconds."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from loadtest.clock import REAL_TIME, DemoClock
from loadtest.hpa.record import SyncRecord
from loadtest.measure.timeline import TimelineRow

__all__ = ["plot_capacity_comparison", "plot_comparison", "plot_timeline"]


def _series(rows: Sequence[TimelineRow], name: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in rows:
        value = getattr(row, name)
        if value is not None:
            xs.append(row.t)
            ys.append(float(value))
    return xs, ys


def _gapped(rows: Sequence[TimelineRow], name: str) -> tuple[list[float], list[float]]:
    """Every second, NaN where the value is missing: a line breaks there (latency in idle seconds)."""
    return [r.t for r in rows], [math.nan if getattr(r, name) is None else float(getattr(r, name)) for r in rows]


def plot_timeline(
    rows: Sequence[TimelineRow],
    syncs: Sequence[SyncRecord],
    path: str | Path,
    *,
    title: str,
    metric_label: str = "GPU utilisation (%)",
    load_step_at: float | None = None,
    load_drop_at: float | None = None,
    clock: DemoClock = REAL_TIME,
) -> None:
    # A bare Figure (no pyplot): no global backend state, and PNG output goes through Agg.
    with_nodes = any(r.nodes is not None for r in rows)
    fig = Figure(figsize=(11, 13 if with_nodes else 10.5))
    panels = fig.subplots(5 if with_nodes else 4, 1, sharex=True)
    rate, latency, metric, replicas = panels[:4]
    fig.suptitle(title, fontsize=12)
    seconds = [r.t for r in rows]

    closed = any(r.users is not None for r in rows)
    if any(r.target_rps is not None for r in rows):
        xs, ys = _gapped(rows, "target_rps")
        rate.step(xs, ys, where="post", color="grey", linestyle="--",
                  label="throughput cap" if closed else "target")
    rate.step(seconds, [r.sent for r in rows], where="post", color="tab:blue", label="sent")
    rate.step(seconds, [r.ok for r in rows], where="post", color="tab:green", label="ok")
    if any(r.failed for r in rows):
        rate.step(seconds, [r.failed for r in rows], where="post", color="tab:red", label="errors + dropped")
    rate.set_ylabel("requests / s")
    rate.set_ylim(bottom=0)
    if closed:  # the closed loop's virtual users, on their own axis
        users = rate.twinx()
        xs, ys = _series(rows, "users")
        users.step(xs, ys, where="post", color="tab:purple", linewidth=1.5, label="virtual users")
        users.set_ylabel("virtual users")
        users.set_ylim(bottom=0)
        _integer_ticks(users)
        users.legend(loc="upper right", fontsize=8)

    for name, label, color in (("p50_ms", "p50", "tab:blue"), ("p95_ms", "p95", "tab:orange")):
        xs, ys = _gapped(rows, name)
        latency.plot(xs, ys, color=color, label=label)
    if any(r.p50_ms for r in rows):
        latency.set_yscale("log")
    latency.set_ylabel("latency (ms)")

    if any(r.gateway_queue is not None for r in rows):
        _gateway_panel(metric, rows)
    else:
        _metric_panel(metric, rows, syncs, metric_label)

    lines = [("desired_replicas", "desired", "tab:orange", 2.5),
             ("current_replicas", "current (ready)", "tab:blue", 1.5)]
    if any(r.gateway_queue is not None for r in rows):
        lines.append(("pods", "holding a GPU (ready or loading the model)", "tab:grey", 1.0))
    for name, label, color, width in lines:
        xs, ys = _series(rows, name)
        if xs:
            replicas.step(xs, ys, where="post", color=color, linewidth=width, label=label)
    for s in syncs:
        if s.direction:
            replicas.annotate(f"{s.current}\u2192{s.desired}", (s.t, s.desired), textcoords="offset points",
                              xytext=(3, 4), fontsize=8)
    replicas.set_ylabel("replicas")
    _integer_ticks(replicas)
    replicas.set_ylim(bottom=0)
    if with_nodes:
        _nodes_panel(panels[4], rows)
    _time_axis(panels[-1], clock)
    _finish(fig, tuple(panels), path, load_step_at, load_drop_at)


def _time_axis(axis: Axes, clock: DemoClock) -> None:
    """Seconds since the load started; a compressed run's in real time."""
    if not clock.compressed:
        axis.set_xlabel("seconds since the load started")
        return
    axis.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{clock.real_seconds(x):g}"))
    axis.set_xlabel(f"real-time seconds since the load started (the demo ran {clock.time_scale:g}x faster)")


def _integer_ticks(axis: Axes) -> None:
    """Whole-number ticks on the y axis (counts: users, replicas, nodes, GPUs)."""
    locator = axis.yaxis.get_major_locator()
    if isinstance(locator, MaxNLocator):  # matplotlib's default, AutoLocator, is one
        locator.set_params(integer=True)


def _nodes_panel(panel: Axes, rows: Sequence[TimelineRow]) -> None:
    """GPUs of the nodes that exist (launching ones too), GPUs allocatable, pods waiting for one, placeholders."""
    for name, label, color, width in (("node_gpus", "GPUs of the nodes (launching ones too)", "tab:grey", 1.0),
                                      ("gpus_allocatable", "GPUs allocatable", "tab:blue", 2.0),
                                      ("pending_pods", "replicas waiting for a GPU (Pending)", "tab:red", 2.0),
                                      ("placeholders", "placeholders holding a GPU", "tab:green", 1.5)):
        xs, ys = _series(rows, name)
        if xs:
            panel.step(xs, ys, where="post", color=color, linewidth=width, label=label)
    panel.set_ylabel("GPU nodes")
    _integer_ticks(panel)
    panel.set_ylim(bottom=0)


def _gateway_panel(panel: Axes, rows: Sequence[TimelineRow]) -> None:
    """Requests held at the gateway (and the External metric the HPA read), the pool's running requests per ready
    endpoint as the HPA read them against their Value target."""
    xs, ys = _gapped(rows, "gateway_queue")
    panel.step(xs, ys, where="post", color="tab:red", alpha=0.45, linewidth=1, label="requests held at the gateway")
    xs, ys = _gapped(rows, "hpa_gateway_queue")
    panel.step(xs, ys, where="post", color="tab:red", linewidth=2, label="held, as the HPA saw it")
    panel.set_ylabel("requests held at the gateway")
    panel.set_ylim(bottom=0)
    running = panel.twinx()
    xs, ys = _gapped(rows, "hpa_running")  # no value while no replica is ready
    running.step(xs, ys, where="post", color="tab:purple", linewidth=2,
                 label="running requests per ready replica (HPA)")
    xs, ys = _series(rows, "running_target")
    if xs:
        running.plot(xs, ys, color="tab:purple", linestyle="--", linewidth=1, label="its target")
    running.set_ylabel("running per replica")
    running.set_ylim(bottom=0)
    running.legend(loc="upper right", fontsize=8)


def _metric_panel(metric: Axes, rows: Sequence[TimelineRow], syncs: Sequence[SyncRecord], metric_label: str) -> None:
    """The GPU metric (and the polled or queried values of ``run``); the replicas' queue on a second axis."""
    xs, ys = _series(rows, "gpu_util")
    if xs:
        metric.plot(xs, ys, color="tab:purple", alpha=0.45, linewidth=1, label="GPU utilisation (mean of replicas)")
    xs, ys = _series(rows, "hpa_metric")
    if xs:
        metric.step(xs, ys, where="post", color="tab:purple", linewidth=2, label="as the HPA saw it")
    sync_x = [s.t for s in syncs if s.metric is not None]
    if sync_x and xs:  # the syncs' first metric is this panel's (the HPA saw it)
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
    if any(r.waiting is not None for r in rows):  # the replicas' queue, on its own axis
        queue = metric.twinx()
        xs, ys = _series(rows, "waiting")
        queue.plot(xs, ys, color="tab:green", alpha=0.45, linewidth=1, label="requests waiting (mean of replicas)")
        for name, label, style in (("hpa_waiting", "waiting, as the HPA saw it", "-"),
                                   ("waiting_target", "waiting target", "--")):
            xs, ys = _series(rows, name)
            if xs:
                queue.step(xs, ys, where="post", color="tab:green", linewidth=2 if style == "-" else 1,
                           linestyle=style, label=label)
        queue.set_ylabel("requests waiting per pod")
        queue.set_ylim(bottom=0)
        queue.legend(loc="upper right", fontsize=8)


def _finish(fig: Figure, axes: Sequence[Axes], path: str | Path, load_step_at: float | None,
            load_drop_at: float | None) -> None:
    for axis in axes:
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(loc="upper left" if axis is axes[2] else "best", fontsize=8)
        for at, label in ((load_step_at, "load step"), (load_drop_at, "load drop")):
            if at is not None:
                axis.axvline(at, color="black", linestyle=":", linewidth=1)
                if axis is axes[0]:
                    axis.annotate(label, (at, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                                  textcoords="offset points", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


COLORS = ("tab:purple", "tab:green", "tab:blue", "tab:orange", "tab:brown")


def _runs_figure(runs: Sequence[tuple[str, Sequence[TimelineRow], Sequence[SyncRecord]]], title: str,
                 ) -> tuple[Figure, Sequence[Axes]]:
    """Four panels for runs of one profile; the first shows the profile's target rate."""
    fig = Figure(figsize=(11, 11))
    axes = fig.subplots(4, 1, sharex=True)
    # Long lines (the comparison's settings) wrap instead of running off the figure.
    fig.suptitle("\n".join(textwrap.fill(line, 130) for line in title.splitlines()), fontsize=11)
    if runs and any(r.target_rps is not None for r in runs[0][1]):
        xs, ys = _gapped(runs[0][1], "target_rps")
        axes[0].step(xs, ys, where="post", color="grey", linestyle="--", label="target rate")
    return fig, axes


def plot_comparison(
    runs: Sequence[tuple[str, Sequence[TimelineRow], Sequence[SyncRecord]]],
    path: str | Path,
    *,
    title: str,
    load_step_at: float | None = None,
    load_drop_at: float | None = None,
) -> None:
    """Several runs of one profile, one colour each: answered requests, failures, p95 latency, replicas."""
    fig, (rate, failed, latency, replicas) = _runs_figure(runs, title)
    for (label, rows, syncs), color in zip(runs, COLORS, strict=False):
        seconds = [r.t for r in rows]
        rate.step(seconds, [r.ok or 0 for r in rows], where="post", color=color, label=f"{label}: answered")
        failed.step(seconds, [r.failed for r in rows], where="post", color=color,
                    label=f"{label}: {sum(r.failed for r in rows)} failed")
        xs, ys = _gapped(rows, "p95_ms")
        latency.plot(xs, ys, color=color, label=label)
        xs, ys = _series(rows, "current_replicas")
        replicas.step(xs, ys, where="post", color=color, linewidth=2, label=label)
        xs, ys = _series(rows, "desired_replicas")
        replicas.step(xs, ys, where="post", color=color, linewidth=1, linestyle="--")
        ups = [s for s in syncs if s.direction]
        replicas.plot([s.t for s in ups], [s.desired for s in ups], "o", color=color, markersize=4)
    rate.set_ylabel("requests / s")
    failed.set_ylabel("failed / s")
    if any(r.p95_ms for _, rows, _ in runs for r in rows):
        latency.set_yscale("log")
    latency.set_ylabel("p95 latency (ms)")
    replicas.set_ylabel("replicas (ready; dashed: desired)")
    replicas.set_xlabel("seconds since the load started (dots: HPA decisions)")
    _integer_ticks(replicas)
    replicas.set_ylim(bottom=0)
    _finish(fig, (rate, failed, latency, replicas), path, load_step_at, load_drop_at)


def plot_capacity_comparison(
    runs: Sequence[tuple[str, Sequence[TimelineRow], Sequence[SyncRecord]]],
    path: str | Path,
    *,
    title: str,
    clock: DemoClock = REAL_TIME,
    marks: Sequence[tuple[float, str]] = (),
    xlabel: str | None = None,
) -> None:
    """Runs of one load with different headroom: the load and what failed, ready replicas (dashed: desired), the
    replicas waiting for a GPU, and the nodes' GPUs (dotted: placeholders). A run whose load is unknown (a cluster's
    capacity report: no request counts in its rows) says so in the first panel; ``marks`` are labelled moments (the
    report's scale-ups, with their time to capacity); ``xlabel`` replaces the time axis' label."""
    fig, (rate, replicas, pending, gpus) = _runs_figure(runs, title)
    for (label, rows, _), color in zip(runs, COLORS, strict=False):
        seconds = [r.t for r in rows]
        if any(r.errors is None or r.dropped is None for r in rows):
            rate.plot([], [], color=color, label=f"{label}: requests unknown (not in the cluster's records)")
            rate.set_ylim(0, 1)
            rate.set_yticks([])
        else:
            rate.step(seconds, [r.failed for r in rows], where="post", color=color,
                      label=f"{label}: {sum(r.failed for r in rows)} failed")
        for axis, name, style, width, text in ((replicas, "current_replicas", "-", 2, label),
                                               (replicas, "desired_replicas", "--", 1, None),
                                               (pending, "pending_pods", "-", 2, label),
                                               (gpus, "node_gpus", "-", 2, label),
                                               (gpus, "placeholders", ":", 1.5, None)):
            xs, ys = _series(rows, name)
            if xs:
                axis.step(xs, ys, where="post", color=color, linewidth=width, linestyle=style, label=text)
    for at, text in marks:
        for axis in (rate, replicas, pending, gpus):
            axis.axvline(at, color="black", linestyle=":", linewidth=1)
        rate.annotate(text, (at, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12), textcoords="offset points",
                      fontsize=7, rotation=0)
    rate.set_ylabel("requests / s (failed: solid)")
    replicas.set_ylabel("replicas ready\n(dashed: desired)")
    pending.set_ylabel("replicas waiting\nfor a GPU")
    gpus.set_ylabel("GPUs of the nodes\n(dotted: placeholders)")
    for axis in (replicas, pending, gpus):
        _integer_ticks(axis)
        axis.set_ylim(bottom=0)
    _time_axis(gpus, clock)
    if xlabel is not None:
        gpus.set_xlabel(xlabel)
    _finish(fig, (rate, replicas, pending, gpus), path, None, None)
