"""``gpu-loadtest run``: its options (a table, :mod:`clikit.flags`), read into an open-loop run against a URL or a
closed-loop run of a Taurus file, optionally watching a cluster, then the summary printed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from clikit.extras import require_extra
from clikit.flags import Flag, Options
from loadtest.cli.common import UsageError, cancellable, parse_headers, prepare_outputs
from loadtest.cli.summary import print_summary
from loadtest.loadgen.open_loop import Arrivals
from loadtest.loadgen.profile import Profile, ProfileError, Segment, parse_duration, parse_profile, parse_rate

if TYPE_CHECKING:
    from loadtest.scenarios.run import RunOptions, TaurusOptions

__all__ = ["RUN", "profile_option", "run"]

RUN = (
    Flag("--url", str | None, None, "Endpoint to load, e.g. http://llm.example/infer."),
    Flag("--profile", str | None, None,
         "Open-loop rate profile, e.g. '30s:5,60s:50,30s:5', ramps as '20s:5..50', or a bare rate with --duration."),
    Flag("--taurus", Path | None, None,
         "Run a Taurus YAML file's executions and scenarios instead (closed loop: virtual users that wait for each "
         "answer; docs/taurus.md)."),
    Flag("--option", list[str] | None, None,
         "With --taurus: override a setting as bzt -o does, e.g. -o execution.0.hold-for=30s (repeatable).",
         short="-o"),
    Flag("--duration", str | None, None, "Total length (stretches the profile)."),
    Flag("--timeout", str | None, None, "Per-request timeout (default 5s)."),
    Flag("--max-inflight", int | None, None, "More in flight are dropped (default 256).", range=(1, None)),
    Flag("--method", str | None, None, "HTTP method (default GET, POST with a body)."),
    Flag("--header", list[str] | None, None,
         "'Name: value' sent with every request (repeatable), e.g. 'Authorization: Bearer ...'.", short="-H"),
    Flag("--body", str | None, None,
         "Request body sent with every request, e.g. an OpenAI /v1/completions JSON; Content-Type defaults to "
         "application/json."),
    Flag("--body-file", Path | None, None, "Like --body, read from this file."),
    Flag("--arrivals", Arrivals | None, None, "poisson (default) or uniform."),
    Flag("--csv", Path | None, None, "Per-second timeline as CSV."),
    Flag("--plot", Path | None, None, "PNG of the run."),
    Flag("--summary", Path | None, None, "Write the summary as JSON here."),
    Flag("--hpa", str | None, None, "Watch this HorizontalPodAutoscaler."),
    Flag("--namespace", str, "default", short="-n"),
    Flag("--kubeconfig", str | None, None, "Default: $KUBECONFIG, ~/.kube/config, then in-cluster."),
    Flag("--context", str | None, None),
    Flag("--metric", str | None, None,
         "Poll this API path, e.g. /apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/"
         "DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dllm (items averaged)."),
    Flag("--watch-interval", str, "2s", "How often --hpa/--metric are read."),
    Flag("--prometheus-url", str | None, None, "For --query range data."),
    Flag("--query", str | None, None, "PromQL plotted and written to the CSV (prom_value)."),
)
"""``gpu-loadtest run``'s options."""

_OPEN_LOOP_ONLY = ("url", "profile", "duration", "timeout", "max_inflight", "method", "header", "body", "body_file",
                   "arrivals")


def run(o: Options) -> None:
    """Load against URL (open loop, --profile) or a Taurus file's requests (closed loop, --taurus); per-second CSV,
    plot and summary; optionally watch an HPA and a metric."""
    if o.plot is not None:
        require_extra("--plot", "loadtest", "matplotlib")
    if o.query is not None:
        require_extra("--query", "loadtest", "prometheus_api_client", "requests")
    from loadtest.hpa.watch import ClusterWatcher, api_client
    from loadtest.measure.progress import Progress
    from loadtest.scenarios.outputs import Outputs
    from loadtest.scenarios.run import TaurusOptions, run_load, run_taurus

    if bool(o.prometheus_url) != bool(o.query):
        raise UsageError("--prometheus-url and --query go together")
    if o.metric is not None and not o.metric.startswith("/"):
        raise UsageError(f"--metric {o.metric!r}: expected an API path starting with /")
    watch = {"watch_interval_s": parse_duration(o.watch_interval), "prometheus_url": o.prometheus_url,
             "query": o.query, "metric_label": (o.metric or o.hpa or "metric").rsplit("/", 1)[-1].split("?")[0]}
    options: RunOptions | TaurusOptions = (_taurus_options(o, watch) if o.taurus is not None
                                           else _open_loop_options(o, watch))
    prepare_outputs(o.csv, o.plot, o.summary)
    watcher = None
    if o.hpa or o.metric:
        watcher = ClusterWatcher(api_client(o.kubeconfig, o.context), o.namespace, o.hpa, o.metric)
    progress = Progress(Console(stderr=True, highlight=False), title="gpu-loadtest run")
    outputs = Outputs(plot=o.plot, summary=o.summary, csv=o.csv)
    if isinstance(options, TaurusOptions):
        taurus_options = options
        result = cancellable(lambda: run_taurus(taurus_options, watcher, outputs, progress))
    else:
        load_options = options
        result = cancellable(lambda: run_load(load_options, watcher, outputs, progress))
    print_summary(Console(highlight=False), result.summary,
                  "interrupted: partial summary" if result.interrupted else "summary")
    if result.interrupted:
        raise typer.Exit(130)


def _taurus_options(o: Options, watch: dict[str, Any]) -> TaurusOptions:
    """``--taurus``: the file says what to send and how much, so no open-loop option goes with it."""
    from loadtest.loadgen.taurus.plan import load_plan
    from loadtest.scenarios.run import TaurusOptions

    given = {f"--{name.replace('_', '-')}": getattr(o, name) for name in _OPEN_LOOP_ONLY}
    clash = next((flag for flag, value in given.items() if value), None)
    if clash:
        raise UsageError(f"{clash}: not with --taurus (the file says what to send, and how much)")
    return TaurusOptions(plan=load_plan(o.taurus, o.option or []), **watch)


def _open_loop_options(o: Options, watch: dict[str, Any]) -> RunOptions:
    """``--url`` and ``--profile``: the requests and the rate they are sent at."""
    from loadtest.scenarios.run import RunOptions

    if o.option:
        raise UsageError("-o/--option: only with --taurus (it overrides the file's settings)")
    if o.url is None or o.profile is None:
        raise UsageError("give --url and --profile (open loop), or --taurus FILE (closed loop)")
    if not o.url.startswith(("http://", "https://")):
        raise UsageError(f"--url {o.url!r}: expected an http:// or https:// URL")
    content = _request_body(o.body, o.body_file)
    headers = parse_headers(o.header or [], "--header")
    if content is not None and not any(name.lower() == "content-type" for name, _ in headers):
        headers.append(("Content-Type", "application/json"))
    return RunOptions(url=o.url, profile=profile_option(o.profile, o.duration),
                      method=(o.method or ("POST" if content is not None else "GET")).upper(),
                      headers=tuple(headers), body=content, timeout_s=parse_duration(o.timeout or "5s"),
                      max_inflight=o.max_inflight or 256, arrivals=o.arrivals or Arrivals.POISSON, **watch)


def _request_body(body: str | None, body_file: Path | None) -> bytes | None:
    if body is not None and body_file is not None:
        raise UsageError("--body and --body-file exclude each other")
    if body_file is None:
        return None if body is None else body.encode()
    try:
        return body_file.read_bytes()
    except OSError as exc:
        raise UsageError(f"--body-file {body_file}: {exc.strerror}") from None


def profile_option(text: str, duration: str | None) -> Profile:
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
