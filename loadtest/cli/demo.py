"""``gpu-loadtest demo``: its options (a table, :mod:`clikit.flags`), read into the demo's settings, then one run or
a comparison, and the summary printed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from clikit.extras import require_extra
from clikit.flags import Flag, Options
from loadtest.cli.common import DemoFailed, UsageError, cancellable, prepare_outputs
from loadtest.cli.summary import print_summary
from loadtest.clock import REAL_TIME
from loadtest.hpa.scale_on import PODS_CHOICES, ScaleOn
from loadtest.loadgen.open_loop import Arrivals
from loadtest.loadgen.profile import parse_duration, parse_profile
from loadtest.nodes.layer import NodesKind
from loadtest.scenarios.capacity_options import (
    CAPACITY_SURGES,
    CAPACITY_TIME_SCALE,
    PLACEHOLDER_IMAGES,
    capacity_config,
    capacity_profile,
)

if TYPE_CHECKING:
    from loadtest.scenarios.demo_settings import DemoSettings
    from loadtest.scenarios.outputs import RunResult
    from loadtest.scenarios.replay import Replay

__all__ = ["DEMO", "demo"]

DEMO = (
    Flag("--quick", bool, False, "The short profile for CI (about a minute; 40 s with --min-replicas 0)."),
    Flag("--metric", ScaleOn | None, None,
         "What the HPA scales on: gpu (DCGM_FI_DEV_GPU_UTIL per pod, the default), queue (vllm:num_requests_waiting "
         "per pod), both, or gateway (a buffering gateway in front of the replicas: its queue and the pool's running "
         "requests, External metrics; the default with --min-replicas 0)."),
    Flag("--min-replicas", int | None, None,
         "minReplicas; 0 scales to zero on the gateway's queue (the scale-to-zero demo: its own profile, cold "
         "starts, the gateway).", range=(0, None)),
    Flag("--cold-start", str | None, None,
         "Each replica's model load before it is ready (default 0s; 20s, 2s with --quick, in the scale-to-zero "
         "demo)."),
    Flag("--gateway-timeout", str | None, None,
         "How long the gateway holds a request for a replica before answering 503 (default 60s; 15s with --quick)."),
    Flag("--compare", bool, False,
         "Run the same profile once per --metric choice (gpu, queue, both); with --min-replicas 0, once with "
         "minReplicas 1 and once with 0. Print one table and plot all runs together."),
    Flag("--summary", Path | None, None, "Write the summary as JSON here."),
    Flag("--plot", Path | None, None, "PNG of the run (default out/demo.png; out/demo-compare.png with --compare)."),
    Flag("--csv", Path | None, None, "Per-second timeline as CSV."),
    Flag("--profile", str | None, None,
         "Override the load profile, e.g. '15s:8,10s:8..55,60s:55,10s:55..8,55s:8'."),
    Flag("--sync-period", str | None, None,
         "HPA sync period (default 15s; 3s with --quick, 2s with --quick --min-replicas 0)."),
    Flag("--scale-down-window", str | None, None,
         "behavior.scaleDown.stabilizationWindowSeconds (default 30s; 6s with --quick, 4s with --quick "
         "--min-replicas 0)."),
    Flag("--target", float | None, None, "Average GPU utilisation per pod (default 60)."),
    Flag("--queue-target", float | None, None,
         "Average requests waiting per pod (default 5); with the gateway, waiting there per replica (default 5)."),
    Flag("--max-replicas", int | None, None,
         "maxReplicas, also the number of GPUs (default 8; 4 with --min-replicas 0).", range=(1, 64)),
    Flag("--arrivals", Arrivals | None, None, "uniform (default) or poisson."),
    Flag("--nodes", NodesKind | None, None,
         "GPU nodes under the replicas: karpenter (the default: hpa-examples/karpenter/nodepool-gpu.yaml), "
         "cluster-autoscaler (hpa-examples/cluster-autoscaler/eksctl-gpu-nodegroups.yaml) or none (replicas start at "
         "once; the default with --compare, --min-replicas 0, --metric gateway or --cold-start). With nodes, "
         "durations (--profile, --sync-period, --scale-down-window) are real-time figures run --time-scale times "
         "faster."),
    Flag("--surge", str, "step",
         "With nodes: the load's surge from 8 to 55 requests/s, step (at once, held 35 min) or ramp (over 10 min, "
         "held 30), after 5 min at 8 and followed by 15; --profile replaces it."),
    Flag("--headroom", str | None, None,
         "Placeholder replicas holding spare GPUs (priority -10, preemptionPolicy Never): a count, or auto[:MAX or "
         ":MIN..MAX] (an HPA on the capacity-headroom preset; default 0..4, the chart's headroom.auto on Kubernetes "
         "1.37+)."),
    Flag("--compare-capacity", bool, False,
         "Run two surges with no headroom, static headroom of one node (or --headroom N) and auto headroom; print "
         "time to capacity, failed requests and GPU-node-seconds side by side."),
    Flag("--time-scale", float, CAPACITY_TIME_SCALE,
         "With --nodes: how many times faster than real time the demo runs (default 20)."),
    Flag("--node-timing", list[str] | None, None,
         "PHASE=DURATION in real time (repeatable): launch (45s), ready (20s), gpu (1m55s), image_pull (5m34s), "
         "model_load (48s); docs/capacity.md cites each."),
    Flag("--nodepool", Path | None, None, "A Karpenter NodePool manifest."),
    Flag("--node-groups", Path | None, None, "An eksctl ClusterConfig."),
    Flag("--placeholder-image", str, "pause",
         "What the placeholders run: pause (the chart's default) or workload (its image, as the chart's "
         "headroom.placeholders.prePullImage: a replica that takes the GPU finds it pulled)."),
    Flag("--provisioning-time", str | None, None,
         "Auto headroom: the time to capacity it plans for (default: the node, image and model phases added up)."),
    Flag("--headroom-signal", str, "requests",
         "Auto headroom: what its HPA reads, requests (inference_request_rate_growth) or queue "
         "(inference_queue_growth_rate)."),
    Flag("--headroom-scale-up-window", str | None, None,
         "Auto headroom: its HPA's behavior.scaleUp.stabilizationWindowSeconds, in real time."),
    Flag("--runs", int, 1,
         "With --compare-capacity: run the comparison this many times, the seed one higher each time, and print "
         "each figure's median and spread.", range=(1, 50)),
    Flag("--seed", int | None, None,
         "Seed of the load's random arrivals (default: a fresh draw; with --runs, 1, 2, ... unless given)."),
    Flag("--from-report", Path | None, None,
         "Replay a capacity report (gpu-loadtest capacity's JSON, or a demo's --summary): its node, image and model "
         "delays and its scale-ups as the load's surges; unknown phases keep the demo's defaults."),
)
"""``gpu-loadtest demo``'s options."""

_NODES_ONLY = ("compare_capacity", "node_timing", "nodepool", "node_groups", "provisioning_time",
               "headroom_scale_up_window", "from_report")  # and --headroom


def demo(o: Options) -> None:
    """Closed-loop demo: exporter, Prometheus, adapter, inference replicas and an HPA loop on this machine."""
    require_extra("gpu-loadtest demo (its plot, --plot)", "loadtest", "matplotlib")
    if o.placeholder_image not in PLACEHOLDER_IMAGES:
        raise UsageError(f"--placeholder-image {o.placeholder_image!r}: expected pause or workload")
    if o.surge not in CAPACITY_SURGES:
        raise UsageError(f"--surge {o.surge!r}: expected {' or '.join(CAPACITY_SURGES)}")
    if o.runs > 1 and not o.compare_capacity:
        raise UsageError("--runs needs --compare-capacity")
    pod_only = o.min_replicas == 0 or o.metric is ScaleOn.GATEWAY or o.compare or o.cold_start is not None
    nodes = o.nodes
    if nodes is None:  # GPU nodes unless the run asks for what only the pod-only loop has
        nodes = NodesKind.NONE if pod_only and o.headroom is None and not o.compare_capacity else NodesKind.KARPENTER
    if nodes is NodesKind.NONE:
        _demo_of_pods(o)
        return
    if pod_only:
        raise UsageError("--nodes does not combine with --min-replicas 0, --metric gateway, --compare or "
                         "--cold-start (the model load is --node-timing model_load=...); --nodes none runs "
                         "the pod-only loop")
    _demo_with_nodes(o, nodes)


def _demo_with_nodes(o: Options, nodes: NodesKind) -> None:
    """GPU nodes under the replicas, on the compressed clock; durations given are real-time figures."""
    from loadtest.scenarios.demo_settings import capacity_settings, with_overrides

    replay = _read_replay(o.from_report) if o.from_report is not None else None
    config = capacity_config(nodes, headroom=o.headroom, time_scale=o.time_scale, timings=o.node_timing or [],
                             nodepool=o.nodepool, node_groups=o.node_groups, placeholder_image=o.placeholder_image,
                             provisioning_time=o.provisioning_time, replicas=max(o.min_replicas or 1, 1),
                             headroom_signal=o.headroom_signal, headroom_scale_up_window=o.headroom_scale_up_window,
                             base_timings=None if replay is None else replay.timings)
    real = parse_profile(o.profile) if o.profile else None
    if real is None and not o.quick and replay is None:
        real = capacity_profile(o.surge, 2 if o.compare_capacity else 1)
    hpa = {"sync_period_s": parse_duration(o.sync_period)} if o.sync_period is not None else {}
    if o.scale_down_window is not None:
        hpa["scale_down_window_s"] = parse_duration(o.scale_down_window)
    settings = with_overrides(
        capacity_settings(config, quick=o.quick, profile=real, **hpa), target=o.target, max_replicas=o.max_replicas,
        arrivals=o.arrivals, scale_on=o.metric, queue_target=o.queue_target, min_replicas=o.min_replicas,
        seed=o.seed if o.seed is not None or o.runs == 1 else 1)
    if replay is not None:
        settings = _replayed(settings, replay, keep_profile=real is not None, max_replicas=o.max_replicas)
        console = Console(highlight=False)
        for line in settings.replay:
            console.print(line, markup=False, soft_wrap=True)
    _check(settings)
    plot = o.plot or Path("out/demo-capacity.png" if o.compare_capacity else "out/demo-nodes.png")
    prepare_outputs(plot, o.summary, o.csv)
    if o.compare_capacity:
        _compare_capacity(Console(highlight=False), settings, plot, o.summary, o.csv, runs=o.runs)
        return
    _run_one(settings, plot, o.summary, o.csv)


def _read_replay(path: Path) -> Replay:
    from loadtest.scenarios.replay import ReplayError, read_report, replay_of

    try:
        return replay_of(read_report(path), str(path))
    except ReplayError as exc:
        raise UsageError(str(exc)) from None


def _replayed(settings: DemoSettings, replay: Replay, *, keep_profile: bool, max_replicas: int | None,
              ) -> DemoSettings:
    """The settings with the report's surges as the load (unless --profile gave one) and, where they need more
    replicas than maxReplicas allows and none was asked for, as many; what was taken is in ``replay``."""
    from dataclasses import replace

    lines = [f"replaying {replay.source}:", *(f"  {note}" for note in replay.notes)]
    if keep_profile:
        lines.append("  surges: --profile's, not the file's")
        return replace(settings, replay=tuple(lines))
    real, surge_lines = replay.profile(settings.replica_rate)
    lines += [f"  {line}" for line in surge_lines]
    most = max(s.target for s in replay.surges)
    replicas = settings.max_replicas
    if max_replicas is None and most > replicas:
        replicas = most
        lines.append(f"  maxReplicas {most}, the most a scale-up asked for")
    return replace(settings, profile=settings.clock.demo_profile(real), replay=tuple(lines), max_replicas=replicas)


def _demo_of_pods(o: Options) -> None:
    """The pod-only loop (replicas start at once): the default demo, its comparison, or scale to zero."""
    from loadtest.scenarios.demo_settings import (
        DEFAULT_SETTINGS,
        QUICK_SETTINGS,
        ZERO_QUICK_SETTINGS,
        ZERO_SETTINGS,
        with_overrides,
    )

    if o.headroom is not None or any(getattr(o, name) for name in _NODES_ONLY):
        raise UsageError("--headroom, --compare-capacity, --node-timing, --nodepool, --node-groups, "
                         "--provisioning-time, --headroom-scale-up-window and --from-report need GPU nodes: --nodes "
                         "karpenter or cluster-autoscaler")
    metric = o.metric
    if o.min_replicas == 0 or metric is ScaleOn.GATEWAY:
        base = ZERO_QUICK_SETTINGS if o.quick else ZERO_SETTINGS
        metric = metric or ScaleOn.GATEWAY
    else:
        base = QUICK_SETTINGS if o.quick else DEFAULT_SETTINGS
    window = None if o.scale_down_window is None else parse_duration(o.scale_down_window)
    settings = with_overrides(
        base, profile=parse_profile(o.profile) if o.profile else None,
        sync_period_s=None if o.sync_period is None else parse_duration(o.sync_period),
        scale_down_window_s=None if window is None else REAL_TIME.demo_whole_seconds(window), target=o.target,
        max_replicas=o.max_replicas, arrivals=o.arrivals, scale_on=metric, queue_target=o.queue_target,
        min_replicas=o.min_replicas, cold_start_s=None if o.cold_start is None else parse_duration(o.cold_start),
        gateway_timeout_s=None if o.gateway_timeout is None else parse_duration(o.gateway_timeout), seed=o.seed)
    _check(settings)
    plot = o.plot or Path("out/demo-compare.png" if o.compare else "out/demo.png")
    prepare_outputs(plot, o.summary, o.csv)
    console = Console(highlight=False)
    if o.compare and settings.gateway:
        _compare_zero(console, settings, plot, o.summary, o.csv)
    elif o.compare:
        _compare(console, settings, plot, o.summary, o.csv)
    else:
        _run_one(settings, plot, o.summary, o.csv)


def _check(settings: DemoSettings) -> None:
    """The settings' own limits, as one-line usage errors."""
    if settings.sync_period_s <= 0:
        raise UsageError("--sync-period must be longer than 0 s")
    if settings.queue_target <= 0:
        raise UsageError("--queue-target must be above 0")
    if settings.gateway_timeout_s <= 0:
        raise UsageError("--gateway-timeout must be longer than 0 s")
    if settings.min_replicas > settings.max_replicas:
        raise UsageError(f"--min-replicas {settings.min_replicas} is above maxReplicas {settings.max_replicas}")
    try:
        settings.hpa_spec().validate()
    except ValueError as exc:
        raise UsageError(f"{exc}; scale to zero on the gateway's queue: --metric gateway") from None


def _run_one(settings: DemoSettings, plot: Path, summary: Path | None, csv_path: Path | None) -> None:
    from loadtest.measure.progress import Progress
    from loadtest.scenarios.demo import run_demo
    from loadtest.scenarios.outputs import Outputs

    progress = Progress(Console(stderr=True, highlight=False), title="gpu-loadtest demo")
    outputs = Outputs(plot=plot, summary=summary, csv=csv_path)
    result = cancellable(lambda: run_demo(settings, outputs, progress))
    print_summary(Console(highlight=False), result.summary,
                  "interrupted: partial summary" if result.interrupted else "summary")
    _end(result)


def _end(result: RunResult) -> None:
    """Exit as the run ended: 1 with the failing processes' logs, 130 when interrupted."""
    if result.error:
        for name, tail in result.log_tails.items():
            print(f"--- {name} log ---\n{tail}", file=sys.stderr)
        raise DemoFailed(result.error)
    if result.interrupted:
        raise typer.Exit(130)


def _compare(console: Console, settings: DemoSettings, plot: Path, summary: Path | None, csv_path: Path | None,
             ) -> None:
    from loadtest.measure.progress import Progress
    from loadtest.scenarios.compare import comparison_row, format_table, run_comparison

    def progress(choice: ScaleOn) -> Progress:
        return Progress(Console(stderr=True, highlight=False), title=f"gpu-loadtest demo --metric {choice.value}")

    results = cancellable(lambda: run_comparison(settings, PODS_CHOICES, plot=plot, summary=summary,
                                                  csv=csv_path, progress=progress))
    for choice, result in results:
        print_summary(console, result.summary, f"--metric {choice.value}"
                      + (": interrupted, partial summary" if result.interrupted else ""))
    console.print(f"\ncomparison ({settings.profile.text()}, HPA sync every {settings.sync_period_s:g}s)",
                  markup=False, soft_wrap=True)
    console.print(format_table([comparison_row(c, r.summary) for c, r in results]), markup=False, soft_wrap=True)
    if plot.exists():
        console.print(f"plot: {plot}", markup=False, soft_wrap=True)
    _end(results[-1][1])


def _compare_capacity(console: Console, settings: DemoSettings, plot: Path, summary: Path | None,
                      csv_path: Path | None, *, runs: int = 1) -> None:
    from loadtest.measure.progress import Progress
    from loadtest.scenarios import capacity_compare
    from loadtest.scenarios.describe import describe_hpa, describe_placeholders

    capacity = settings.capacity
    assert capacity is not None
    static = capacity.headroom or capacity.one_node(max(settings.needed_replicas - settings.min_replicas, 1))

    def progress(name: str) -> Progress:
        return Progress(Console(stderr=True, highlight=False), title=f"gpu-loadtest demo --headroom {name}")

    if runs == 1:
        comparisons = [cancellable(lambda: capacity_compare.run_capacity_comparison(
            settings, static, plot=plot, summary=summary, csv=csv_path, progress=progress))]
    else:
        comparisons = cancellable(lambda: capacity_compare.run_capacity_series(
            settings, static, runs, settings.seed or 1, plot=plot, summary=summary, csv=csv_path, progress=progress))
    header = (f"--nodes {capacity.kind.value}, profile {settings.real_profile.text()} in real time, run "
              f"{settings.clock.time_scale:g}x faster; {describe_hpa(settings)}; {describe_placeholders(capacity)}; "
              f"auto headroom {capacity.headroom_signal}, figures in real-time seconds")
    for comparison in comparisons:
        seed = "" if runs == 1 else f", seed {comparison.seed}"
        for name, result in comparison.runs:
            print_summary(console, result.summary, f"--headroom {name if name != 'static' else static}{seed}"
                          + (": interrupted, partial summary" if result.interrupted else ""))
        console.print(f"\ncomparison ({header}{seed})", markup=False, soft_wrap=True)
        console.print(capacity_compare.format_capacity_table(comparison.rows), markup=False, soft_wrap=True)
        for line in comparison.figures:
            console.print(line, markup=False, soft_wrap=True)
    if runs > 1:
        console.print(f"\n{len(comparisons)} runs (seeds {', '.join(str(c.seed) for c in comparisons)}): median "
                      f"(lowest..highest) of each figure ({header})", markup=False, soft_wrap=True)
        console.print(capacity_compare.spread_table(comparisons), markup=False, soft_wrap=True)
        for line in capacity_compare.spread_figures(comparisons):
            console.print(line, markup=False, soft_wrap=True)
    for comparison in comparisons:
        for path in (plot if runs == 1 else plot.with_name(f"{plot.stem}-seed{comparison.seed}{plot.suffix}"),):
            if path.exists():
                console.print(f"plot: {path}", markup=False, soft_wrap=True)
    _end(comparisons[-1].runs[-1][1])


def _compare_zero(console: Console, settings: DemoSettings, plot: Path, summary: Path | None, csv_path: Path | None,
                  ) -> None:
    from loadtest.measure.progress import Progress
    from loadtest.scenarios.compare import format_zero_table, run_zero_comparison, saving, zero_row
    from loadtest.scenarios.describe import describe_hpa

    def progress(min_replicas: int) -> Progress:
        return Progress(Console(stderr=True, highlight=False),
                        title=f"gpu-loadtest demo --min-replicas {min_replicas}")

    results = cancellable(lambda: run_zero_comparison(settings, plot=plot, summary=summary, csv=csv_path,
                                                       progress=progress))
    for min_replicas, result in results:
        print_summary(console, result.summary, f"--min-replicas {min_replicas}"
                      + (": interrupted, partial summary" if result.interrupted else ""))
    rows = [zero_row(m, r.summary) for m, r in results]
    header = f"comparison ({settings.profile.text()}; {describe_hpa(settings, min_replicas=False)})"
    console.print(f"\n{header}", markup=False, soft_wrap=True)
    console.print(format_zero_table(rows), markup=False, soft_wrap=True)
    text = saving(rows)
    if text:
        console.print(text, markup=False, soft_wrap=True)
    if plot.exists():
        console.print(f"plot: {plot}", markup=False, soft_wrap=True)
    _end(results[-1][1])
