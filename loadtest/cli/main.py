"""``gpu-loadtest``: ``demo`` (the closed scaling loop on this machine), ``run`` (load against any endpoint, watching
a cluster), ``replica`` (one inference stand-in)."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

import clikit
from clikit.extras import MissingExtra, require_extra
from loadtest.clock import REAL_TIME
from loadtest.hpa.scale_on import PODS_CHOICES, ScaleOn
from loadtest.hpa.watch import KubeError
from loadtest.loadgen.open_loop import Arrivals
from loadtest.loadgen.profile import Profile, ProfileError, Segment, parse_duration, parse_profile, parse_rate
from loadtest.loadgen.taurus.plan import TaurusFileError
from loadtest.measure.range_data import PromRangeError
from loadtest.measure.summary import Summary
from loadtest.nodes.layer import CAPACITY_TIME_SCALE, NodesKind
from loadtest.scenarios.capacity_options import (
    CAPACITY_SURGES,
    PLACEHOLDER_IMAGES,
    CapacityOptionError,
    capacity_config,
    capacity_profile,
)

if TYPE_CHECKING:
    from loadtest.scenarios.demo import DemoSettings
    from loadtest.scenarios.outputs import RunResult

app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True,
                  help="Load generation and the closed-loop GPU autoscaling demo.")

T = TypeVar("T")


class UsageError(Exception):
    pass


class DemoFailed(Exception):
    """The demo could not complete (a process failed); exit code 1 after the partial summary."""

    code = 1


def _cancellable(factory: Callable[[], Awaitable[T]]) -> T:
    """Run ``factory()``; SIGINT/SIGTERM cancel it once (it then cleans up and reports what it has)."""

    async def main() -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        fired = False

        def stop() -> None:
            nonlocal fired
            if not fired:
                fired = True
                task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        try:
            return await factory()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    return asyncio.run(main())


def _fmt(value: float | int | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def print_summary(console: Console, summary: Summary, title: str) -> None:
    s = summary
    console.print(f"\n{title}", markup=False, soft_wrap=True)
    lines = [
        ("replicas", f"initial {_fmt(s.initial_replicas)}, peak {_fmt(s.peak_replicas)} "
                     f"(desired peak {_fmt(s.peak_desired_replicas)}), final {_fmt(s.final_replicas)}"),
        ("load step -> first scale-up decision", _fmt(s.scale_up_seconds, " s")),
        ("load step -> peak replicas ready", _fmt(s.peak_reached_seconds, " s")),
        ("load drop -> first scale-down decision", _fmt(s.scale_down_seconds, " s")),
        ("load drop -> back to the initial count", _fmt(s.back_to_initial_seconds, " s")),
        ("requests", ", ".join(f"{k} {v}" for k, v in s.requests.items())),
    ]
    if s.extra.get("error_kinds"):
        lines.append(("errors by kind", ", ".join(f"{kind} {n}" for kind, n in s.extra["error_kinds"].items())))
    if s.extra.get("load") == "closed loop":
        lines.insert(0, ("load", f"closed loop, {s.extra['executions']}"))
    for phase, lat in s.latency_by_phase.items():
        lines.append((f"latency {phase}", f"p50 {_fmt(lat.p50_ms, ' ms')}, p95 {_fmt(lat.p95_ms, ' ms')} "
                                          f"({lat.requests} requests)"))
    if s.gpu_seconds is not None:
        at_zero = "" if s.seconds_at_zero is None else f", {s.seconds_at_zero} s of it at zero replicas"
        lines.append(("GPU-seconds (replica-seconds)", f"{_fmt(s.gpu_seconds)} over the {s.duration_seconds:g} s "
                                                       f"profile{at_zero}"))
    cold = s.extra.get("cold_start")
    if cold:
        if cold["requests"]:
            firsts = ", ".join(f"{w:g} s" for w in cold["first_request_waits_seconds"])
            lines.append(("cold-start wait at the gateway",
                          f"p50 {_fmt(cold['wait_p50_seconds'], ' s')}, max {_fmt(cold['wait_max_seconds'], ' s')} "
                          f"over {cold['requests']} requests that found no replica ready (first after idle: "
                          f"{firsts or '-'})"))
        else:
            lines.append(("cold-start wait at the gateway", "none: every request found a replica ready"))
        lines.append(("gateway", f"received {cold['received']}, forwarded {cold['forwarded']}, timed out "
                                  f"{cold['timed_out']}, client left {cold['abandoned']}, upstream errors "
                                  f"{cold['upstream_errors']}"))
    capacity = s.extra.get("capacity")
    if capacity:
        if capacity["time_scale"] != 1:
            lines.insert(0, ("clock", f"the lines up to GPU-seconds in the demo's seconds; surges and GPU nodes in "
                                      f"real-time seconds (the run went {capacity['time_scale']:g}x faster)"))
        lines += _capacity_lines(capacity)
    for key in ("plot", "csv"):
        if s.extra.get(key):
            lines.append((key, str(s.extra[key])))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        console.print(f"  {key:<{width}}  {value}", markup=False, soft_wrap=True)
    labels = s.extra.get("labels") or {}
    if labels:
        console.print("  per label (requests, errors, latency of the answered)", markup=False)
        width = max(len(label) for label in labels)
        for label, st in labels.items():
            console.print(f"    {label:<{width}}  {st['requests']} requests, {st['errors']} errors, "
                          f"p50 {_fmt(st['p50_ms'], ' ms')}, p95 {_fmt(st['p95_ms'], ' ms')}, "
                          f"p99 {_fmt(st['p99_ms'], ' ms')}", markup=False, soft_wrap=True)


def _capacity_lines(capacity: dict[str, Any]) -> list[tuple[str, str]]:
    """Each surge's time to capacity with its phases, then the node totals (real-time equivalents)."""
    lines = []
    for surge in capacity["surges"]:
        phases = ", ".join(f"{k} {_fmt(v, ' s')}" for k, v in surge["phases_s"].items())
        reached = _fmt(surge["time_to_capacity_s"], " s") if surge["time_to_capacity_s"] is not None else \
            "not reached before the load fell"
        behind = surge.get("behind_demand_s")
        lag = "" if behind is None or behind == surge["time_to_capacity_s"] else \
            f"; {_fmt(behind, ' s')} after the load needed them"
        lines.append((f"surge {surge['surge']}: time to capacity",
                      f"{reached} ({surge['replicas_before']} -> {surge['replicas_asked']} replicas; {phases}{lag})"))
        lines.append((f"surge {surge['surge']}: waiting",
                      f"first new replica {_fmt(surge['first_replica_wait_s'], ' s')} for a GPU, "
                      f"{_fmt(surge['pending_pod_seconds'])} pending pod-seconds, {surge['requests_failed']} requests "
                      f"failed, {surge['requests_queued']} queued, {surge['nodes_launched']} nodes launched"))
    lines.append(("GPU nodes", f"{_fmt(capacity['gpu_node_seconds'])} GPU-node-seconds, {capacity['nodes_launched']} "
                               f"launched, {_fmt(capacity['pending_pod_seconds'])} pending pod-seconds, "
                               f"{capacity['placeholders_preempted']} placeholders preempted (real-time seconds: the "
                               f"run went {capacity['time_scale']:g}x faster)"))
    return lines


def _prepare_outputs(*paths: Path | None) -> None:
    """Create the output directories now, so a bad path fails before the run rather than after it."""
    for path in paths:
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"{path}: cannot create its directory: {exc.strerror}") from None


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


def parse_headers(items: list[str], flag: str) -> list[tuple[str, str]]:
    """``Name: value`` options as (name, value) pairs, in order."""
    headers = []
    for item in items:
        name, colon, value = item.partition(":")
        if not colon or not _TOKEN.match(name.strip()):
            raise UsageError(f"{flag} {item!r}: expected 'Name: value'")
        if any(ch in value for ch in "\r\n"):
            raise UsageError(f"{flag} {item!r}: a header value cannot span lines")
        headers.append((name.strip(), value.strip()))
    return headers


def _request_body(body: str | None, body_file: Path | None) -> bytes | None:
    if body is not None and body_file is not None:
        raise UsageError("--body and --body-file exclude each other")
    if body_file is None:
        return None if body is None else body.encode()
    try:
        return body_file.read_bytes()
    except OSError as exc:
        raise UsageError(f"--body-file {body_file}: {exc.strerror}") from None


def _profile_option(text: str, duration: str | None) -> Profile:
    """``--profile`` text; a bare rate (``50``) runs for ``--duration`` (default 60 s), and ``--duration``
    stretches or shrinks any other profile to that total length."""
    total = parse_duration(duration) if duration else None
    if total is not None and total <= 0:
        raise ProfileError("--duration must be longer than 0 s")
    if ":" not in text:
        rate = parse_rate(text, f"--profile {text!r}", "expected DURATION:RATE,... or a bare rate")
        return Profile((Segment(60.0 if total is None else total, rate, rate),))
    profile = parse_profile(text)
    return profile if total is None else profile.scaled(time_factor=total / profile.duration)


@app.command()
def demo(
    quick: Annotated[bool, typer.Option(
        "--quick", help="The short profile for CI (about a minute; 40 s with --min-replicas 0).")] = False,
    metric: Annotated[ScaleOn | None, typer.Option(
        "--metric", help="What the HPA scales on: gpu (DCGM_FI_DEV_GPU_UTIL per pod, the default), queue "
                         "(vllm:num_requests_waiting per pod), both, or gateway (a buffering gateway in front of the "
                         "replicas: its queue and the pool's running requests, External metrics; the default with "
                         "--min-replicas 0).")] = None,
    min_replicas: Annotated[int | None, typer.Option(
        "--min-replicas", min=0, help="minReplicas; 0 scales to zero on the gateway's queue (the scale-to-zero "
                                      "demo: its own profile, cold starts, the gateway).")] = None,
    cold_start: Annotated[str | None, typer.Option(
        "--cold-start", help="Each replica's model load before it is ready (default 0s; 20s, 2s with --quick, in "
                             "the scale-to-zero demo).")] = None,
    gateway_timeout: Annotated[str | None, typer.Option(
        "--gateway-timeout", help="How long the gateway holds a request for a replica before answering 503 "
                                  "(default 60s; 15s with --quick).")] = None,
    compare: Annotated[bool, typer.Option(
        "--compare", help="Run the same profile once per --metric choice (gpu, queue, both); with --min-replicas 0, "
                          "once with minReplicas 1 and once with 0. Print one table and plot all runs together.")
    ] = False,
    summary: Annotated[Path | None, typer.Option("--summary", help="Write the summary as JSON here.")] = None,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="PNG of the run (default out/demo.png; out/demo-compare.png with --compare).")] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Per-second timeline as CSV.")] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", help="Override the load profile, e.g. '15s:8,10s:8..55,60s:55,10s:55..8,55s:8'.")] = None,
    sync_period: Annotated[str | None, typer.Option(
        "--sync-period", help="HPA sync period (default 15s; 3s with --quick, 2s with --quick "
                                      "--min-replicas 0).")] = None,
    scale_down_window: Annotated[str | None, typer.Option(
        "--scale-down-window", help="behavior.scaleDown.stabilizationWindowSeconds (default 30s; 6s with --quick, 4s "
                                    "with --quick --min-replicas 0).")
    ] = None,
    target: Annotated[float | None, typer.Option("--target", help="Average GPU utilisation per pod (default 60).")
                      ] = None,
    queue_target: Annotated[float | None, typer.Option(
        "--queue-target", help="Average requests waiting per pod (default 5); with the gateway, waiting there "
                               "per replica (default 5).")] = None,
    max_replicas: Annotated[int | None, typer.Option(
        "--max-replicas", min=1, max=64, help="maxReplicas, also the number of GPUs (default 8; 4 with "
                                              "--min-replicas 0).")] = None,
    arrivals: Annotated[Arrivals | None, typer.Option("--arrivals", help="uniform (default) or poisson.")] = None,
    nodes: Annotated[NodesKind | None, typer.Option(
        "--nodes", help="GPU nodes under the replicas: karpenter (the default: hpa-examples/karpenter/"
                        "nodepool-gpu.yaml), cluster-autoscaler (hpa-examples/cluster-autoscaler/"
                        "eksctl-gpu-nodegroups.yaml) or none (replicas start at once; the default with --compare, "
                        "--min-replicas 0, --metric gateway or --cold-start). With nodes, durations (--profile, "
                        "--sync-period, --scale-down-window) are real-time figures run --time-scale times faster.")
    ] = None,
    surge: Annotated[str, typer.Option(
        "--surge", help="With nodes: the load's surge from 8 to 55 requests/s, step (at once, held 35 min) or ramp "
                        "(over 10 min, held 30), after 5 min at 8 and followed by 15; --profile replaces it.")
    ] = "step",
    headroom: Annotated[str | None, typer.Option(
        "--headroom", help="Placeholder replicas holding spare GPUs (priority -10, preemptionPolicy Never): a count, "
                           "or auto[:MAX or :MIN..MAX] (an HPA on the capacity-headroom preset; default 0..4, the "
                           "chart's headroom.auto on Kubernetes 1.37+).")] = None,
    compare_capacity: Annotated[bool, typer.Option(
        "--compare-capacity", help="Run two surges with no headroom, static headroom of one node (or --headroom N) "
                                   "and auto headroom; print time to capacity, failed requests and GPU-node-seconds "
                                   "side by side.")] = False,
    time_scale: Annotated[float, typer.Option(
        "--time-scale", help="With --nodes: how many times faster than real time the demo runs (default 20).")
    ] = CAPACITY_TIME_SCALE,
    node_timing: Annotated[list[str] | None, typer.Option(
        "--node-timing", help="PHASE=DURATION in real time (repeatable): launch (45s), ready (20s), gpu (1m55s), "
                              "image_pull (5m34s), model_load (48s); docs/capacity.md cites each.")] = None,
    nodepool: Annotated[Path | None, typer.Option("--nodepool", help="A Karpenter NodePool manifest.")] = None,
    node_groups: Annotated[Path | None, typer.Option("--node-groups", help="An eksctl ClusterConfig.")] = None,
    placeholder_image: Annotated[str, typer.Option(
        "--placeholder-image", help="What the placeholders run: pause (the chart's default) or workload (its image, "
                                    "as the chart's headroom.placeholders.prePullImage: a replica that takes the "
                                    "GPU finds it pulled).")] = "pause",
    provisioning_time: Annotated[str | None, typer.Option(
        "--provisioning-time", help="Auto headroom: the time to capacity it plans for (default: the node, image "
                                    "and model phases added up).")] = None,
    headroom_signal: Annotated[str, typer.Option(
        "--headroom-signal", help="Auto headroom: what its HPA reads, requests (inference_request_rate_growth) or "
                                  "queue (inference_queue_growth_rate).")] = "requests",
    headroom_scale_up_window: Annotated[str | None, typer.Option(
        "--headroom-scale-up-window", help="Auto headroom: its HPA's behavior.scaleUp.stabilizationWindowSeconds, "
                                           "in real time.")] = None,
) -> None:
    """Closed-loop demo: exporter, Prometheus, adapter, inference replicas and an HPA loop on this machine."""
    require_extra("gpu-loadtest demo (its plot, --plot)", "loadtest", "matplotlib")
    from loadtest.scenarios.demo import (
        DEFAULT_SETTINGS,
        QUICK_SETTINGS,
        ZERO_QUICK_SETTINGS,
        ZERO_SETTINGS,
        capacity_settings,
        with_overrides,
    )

    if placeholder_image not in PLACEHOLDER_IMAGES:
        raise UsageError(f"--placeholder-image {placeholder_image!r}: expected pause or workload")
    if surge not in CAPACITY_SURGES:
        raise UsageError(f"--surge {surge!r}: expected {' or '.join(CAPACITY_SURGES)}")
    pod_only = min_replicas == 0 or metric is ScaleOn.GATEWAY or compare or cold_start is not None
    if nodes is None:  # GPU nodes unless the run asks for what only the pod-only loop has
        nodes = NodesKind.NONE if pod_only and headroom is None and not compare_capacity else NodesKind.KARPENTER
    if nodes is not NodesKind.NONE:
        if pod_only:
            raise UsageError("--nodes does not combine with --min-replicas 0, --metric gateway, --compare or "
                             "--cold-start (the model load is --node-timing model_load=...); --nodes none runs "
                             "the pod-only loop")
        config = capacity_config(nodes, headroom=headroom, time_scale=time_scale,
                                 timings=node_timing or [], nodepool=nodepool, node_groups=node_groups,
                                 placeholder_image=placeholder_image, provisioning_time=provisioning_time,
                                 replicas=max(min_replicas or 1, 1), headroom_signal=headroom_signal,
                                 headroom_scale_up_window=headroom_scale_up_window)
        real = parse_profile(profile) if profile else None
        if real is None and not quick:
            real = capacity_profile(surge, 2 if compare_capacity else 1)
        clock = {"sync_period_s": parse_duration(sync_period)} if sync_period is not None else {}
        if scale_down_window is not None:
            clock["scale_down_window_s"] = parse_duration(scale_down_window)
        settings = with_overrides(
            capacity_settings(config, quick=quick, profile=real, **clock), target=target,
            max_replicas=max_replicas, arrivals=arrivals, scale_on=metric, queue_target=queue_target,
            min_replicas=min_replicas)
        _check(settings)
        plot = plot or Path("out/demo-capacity.png" if compare_capacity else "out/demo-nodes.png")
        _prepare_outputs(plot, summary, csv_path)
        if compare_capacity:
            _compare_capacity(Console(highlight=False), settings, plot, summary, csv_path)
            return
        _run_one(settings, plot, summary, csv_path)
        return
    if (headroom is not None or compare_capacity or node_timing or nodepool or node_groups or provisioning_time
            or headroom_scale_up_window):
        raise UsageError("--headroom, --compare-capacity, --node-timing, --nodepool, --node-groups, "
                         "--provisioning-time and --headroom-scale-up-window need GPU nodes: --nodes karpenter or "
                         "cluster-autoscaler")
    zero = min_replicas == 0 or metric is ScaleOn.GATEWAY
    if zero:
        base = ZERO_QUICK_SETTINGS if quick else ZERO_SETTINGS
        metric = metric or ScaleOn.GATEWAY
    else:
        base = QUICK_SETTINGS if quick else DEFAULT_SETTINGS
    window = None if scale_down_window is None else parse_duration(scale_down_window)
    settings = with_overrides(
        base, profile=parse_profile(profile) if profile else None,
        sync_period_s=None if sync_period is None else parse_duration(sync_period),
        scale_down_window_s=None if window is None else REAL_TIME.demo_whole_seconds(window), target=target,
        max_replicas=max_replicas,
        arrivals=arrivals, scale_on=metric, queue_target=queue_target, min_replicas=min_replicas,
        cold_start_s=None if cold_start is None else parse_duration(cold_start),
        gateway_timeout_s=None if gateway_timeout is None else parse_duration(gateway_timeout))
    _check(settings)
    plot = plot or Path("out/demo-compare.png" if compare else "out/demo.png")
    _prepare_outputs(plot, summary, csv_path)
    console = Console(highlight=False)
    if compare and settings.gateway:
        _compare_zero(console, settings, plot, summary, csv_path)
        return
    if compare:
        _compare(console, settings, plot, summary, csv_path)
        return
    _run_one(settings, plot, summary, csv_path)


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
    result = _cancellable(lambda: run_demo(settings, outputs, progress))
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

    results = _cancellable(lambda: run_comparison(settings, PODS_CHOICES, plot=plot, summary=summary,
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
                      csv_path: Path | None) -> None:
    from loadtest.measure.progress import Progress
    from loadtest.scenarios.compare import format_capacity_table, run_capacity_comparison
    from loadtest.scenarios.demo import describe_hpa, describe_placeholders

    capacity = settings.capacity
    assert capacity is not None
    static = capacity.headroom or capacity.one_node(max(settings.needed_replicas - settings.min_replicas, 1))

    def progress(name: str) -> Progress:
        return Progress(Console(stderr=True, highlight=False), title=f"gpu-loadtest demo --headroom {name}")

    comparison = _cancellable(lambda: run_capacity_comparison(settings, static, plot=plot, summary=summary,
                                                              csv=csv_path, progress=progress))
    for name, result in comparison.runs:
        print_summary(console, result.summary, f"--headroom {name if name != 'static' else static}"
                      + (": interrupted, partial summary" if result.interrupted else ""))
    console.print(f"\ncomparison (--nodes {capacity.kind.value}, profile {settings.real_profile.text()} in real "
                  f"time, run {settings.clock.time_scale:g}x faster; {describe_hpa(settings)}; "
                  f"{describe_placeholders(capacity)}; auto headroom {capacity.headroom_signal}, figures in "
                  "real-time seconds)", markup=False, soft_wrap=True)
    console.print(format_capacity_table(comparison.rows), markup=False, soft_wrap=True)
    for line in comparison.figures:
        console.print(line, markup=False, soft_wrap=True)
    if plot.exists():
        console.print(f"plot: {plot}", markup=False, soft_wrap=True)
    _end(comparison.runs[-1][1])


def _compare_zero(console: Console, settings: DemoSettings, plot: Path, summary: Path | None, csv_path: Path | None,
                  ) -> None:
    from loadtest.measure.progress import Progress
    from loadtest.scenarios.compare import format_zero_table, run_zero_comparison, saving, zero_row
    from loadtest.scenarios.demo import describe_hpa

    def progress(min_replicas: int) -> Progress:
        return Progress(Console(stderr=True, highlight=False),
                        title=f"gpu-loadtest demo --min-replicas {min_replicas}")

    results = _cancellable(lambda: run_zero_comparison(settings, plot=plot, summary=summary, csv=csv_path,
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


@app.command()
def run(
    url: Annotated[str | None, typer.Option("--url", help="Endpoint to load, e.g. http://llm.example/infer.")
                   ] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", help="Open-loop rate profile, e.g. '30s:5,60s:50,30s:5', ramps as '20s:5..50', or a bare rate "
                          "with --duration.")] = None,
    taurus: Annotated[Path | None, typer.Option(
        "--taurus", help="Run a Taurus YAML file's executions and scenarios instead (closed loop: virtual users that "
                         "wait for each answer; docs/taurus.md).")] = None,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-o", help="With --taurus: override a setting as bzt -o does, e.g. -o execution.0.hold-for=30s "
                               "(repeatable).")] = None,
    duration: Annotated[str | None, typer.Option("--duration", help="Total length (stretches the profile).")
                        ] = None,
    timeout: Annotated[str | None, typer.Option("--timeout", help="Per-request timeout (default 5s).")] = None,
    max_inflight: Annotated[int | None, typer.Option(
        "--max-inflight", min=1, help="More in flight are dropped (default 256).")] = None,
    method: Annotated[str | None, typer.Option("--method", help="HTTP method (default GET, POST with a body).")
                      ] = None,
    header: Annotated[list[str] | None, typer.Option(
        "--header", "-H", help="'Name: value' sent with every request (repeatable), e.g. 'Authorization: Bearer ...'.")
    ] = None,
    body: Annotated[str | None, typer.Option(
        "--body", help="Request body sent with every request, e.g. an OpenAI /v1/completions JSON; Content-Type "
                       "defaults to application/json.")] = None,
    body_file: Annotated[Path | None, typer.Option("--body-file", help="Like --body, read from this file.")] = None,
    arrivals: Annotated[Arrivals | None, typer.Option("--arrivals", help="poisson (default) or uniform.")] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Per-second timeline as CSV.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="PNG of the run.")] = None,
    summary: Annotated[Path | None, typer.Option("--summary", help="Write the summary as JSON here.")] = None,
    hpa: Annotated[str | None, typer.Option("--hpa", help="Watch this HorizontalPodAutoscaler.")] = None,
    namespace: Annotated[str, typer.Option("-n", "--namespace")] = "default",
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="Default: $KUBECONFIG, ~/.kube/config, "
                                                                         "then in-cluster.")] = None,
    context: Annotated[str | None, typer.Option("--context")] = None,
    metric: Annotated[str | None, typer.Option(
        "--metric", help="Poll this API path, e.g. /apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/"
                         "DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dllm (items averaged).")] = None,
    watch_interval: Annotated[str, typer.Option("--watch-interval", help="How often --hpa/--metric are read.")
                              ] = "2s",
    prometheus_url: Annotated[str | None, typer.Option("--prometheus-url", help="For --query range data.")] = None,
    query: Annotated[str | None, typer.Option("--query", help="PromQL plotted and written to the CSV "
                                                              "(prom_value).")] = None,
) -> None:
    """Load against URL (open loop, --profile) or a Taurus file's requests (closed loop, --taurus); per-second CSV,
    plot and summary; optionally watch an HPA and a metric."""
    if plot is not None:
        require_extra("--plot", "loadtest", "matplotlib")
    if query is not None:
        require_extra("--query", "loadtest", "prometheus_api_client", "requests")
    from loadtest.hpa.watch import ClusterWatcher, api_client
    from loadtest.loadgen.taurus.plan import load_plan
    from loadtest.measure.progress import Progress
    from loadtest.scenarios.outputs import Outputs
    from loadtest.scenarios.run import RunOptions, TaurusOptions, run_load, run_taurus

    if bool(prometheus_url) != bool(query):
        raise UsageError("--prometheus-url and --query go together")
    if metric is not None and not metric.startswith("/"):
        raise UsageError(f"--metric {metric!r}: expected an API path starting with /")
    watch = {"watch_interval_s": parse_duration(watch_interval), "prometheus_url": prometheus_url, "query": query,
             "metric_label": (metric or hpa or "metric").rsplit("/", 1)[-1].split("?")[0]}
    if taurus is not None:
        given = {"--url": url, "--profile": profile, "--duration": duration, "--timeout": timeout,
                 "--max-inflight": max_inflight, "--method": method, "--header": header, "--body": body,
                 "--body-file": body_file, "--arrivals": arrivals}
        clash = next((flag for flag, value in given.items() if value), None)
        if clash:
            raise UsageError(f"{clash}: not with --taurus (the file says what to send, and how much)")
        options: RunOptions | TaurusOptions = TaurusOptions(plan=load_plan(taurus, option or []), **watch)
    else:
        if option:
            raise UsageError("-o/--option: only with --taurus (it overrides the file's settings)")
        if url is None or profile is None:
            raise UsageError("give --url and --profile (open loop), or --taurus FILE (closed loop)")
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--url {url!r}: expected an http:// or https:// URL")
        content = _request_body(body, body_file)
        headers = parse_headers(header or [], "--header")
        if content is not None and not any(name.lower() == "content-type" for name, _ in headers):
            headers.append(("Content-Type", "application/json"))
        options = RunOptions(url=url, profile=_profile_option(profile, duration),
                             method=(method or ("POST" if content is not None else "GET")).upper(),
                             headers=tuple(headers), body=content, timeout_s=parse_duration(timeout or "5s"),
                             max_inflight=max_inflight or 256, arrivals=arrivals or Arrivals.POISSON, **watch)
    _prepare_outputs(csv_path, plot, summary)
    watcher = None
    if hpa or metric:
        watcher = ClusterWatcher(api_client(kubeconfig, context), namespace, hpa, metric)
    console = Console(highlight=False)
    progress = Progress(Console(stderr=True, highlight=False), title="gpu-loadtest run")
    outputs = Outputs(plot=plot, summary=summary, csv=csv_path)
    if isinstance(options, TaurusOptions):
        taurus_options = options
        result = _cancellable(lambda: run_taurus(taurus_options, watcher, outputs, progress))
    else:
        load_options = options
        result = _cancellable(lambda: run_load(load_options, watcher, outputs, progress))
    print_summary(console, result.summary, "interrupted: partial summary" if result.interrupted else "summary")
    if result.interrupted:
        raise typer.Exit(130)


@app.command()
def replica(
    name: Annotated[str, typer.Option("--name")] = "infer-0",
    gpu: Annotated[int, typer.Option("--gpu", min=0)] = 0,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="0: any free port (printed).")] = 0,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    service_ms: Annotated[float, typer.Option("--service-ms", min=0.0, help="GPU time per request.")] = 40.0,
    busy_window: Annotated[float, typer.Option("--busy-window", min=0.1, help="Seconds the busy share covers.")
                           ] = 2.0,
    grace: Annotated[float, typer.Option("--grace", min=0.0, help="Seconds to finish requests after SIGTERM.")
                     ] = 10.0,
    model: Annotated[str, typer.Option("--model", help="The model /v1/completions serves.")] = "demo-model",
    require_header: Annotated[list[str] | None, typer.Option(
        "--require-header", help="'Name: value' every /v1/completions request must carry (repeatable).")] = None,
    cold_start: Annotated[str, typer.Option(
        "--cold-start", help="Model load time: /healthz and inference answer 503 for this long after start-up.")
    ] = "0s",
) -> None:
    """One inference stand-in: /infer and /v1/completions hold the simulated GPU for --service-ms; /metrics (vLLM
    names), /stats, /healthz."""
    from loadtest.standins.replica import ReplicaConfig, serve

    required = tuple((name.lower(), value) for name, value in parse_headers(require_header or [], "--require-header"))
    asyncio.run(serve(ReplicaConfig(name=name, gpu=gpu, service_s=service_ms / 1000.0, busy_window_s=busy_window,
                                    host=host, port=port, grace_s=grace, model=model, required_headers=required,
                                    cold_start_s=parse_duration(cold_start))))


def main(argv: list[str] | None = None) -> None:
    """Usage and configuration errors are one line on stderr, never a traceback."""
    clikit.run(app, "gpu-loadtest", argv, (UsageError, ProfileError, KubeError, PromRangeError, DemoFailed,
                                              MissingExtra, CapacityOptionError, TaurusFileError))
