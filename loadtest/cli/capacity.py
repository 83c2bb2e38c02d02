"""``gpu-loadtest capacity``: its options (a table, :mod:`clikit.flags`), read into a report on a live cluster's
scale-ups (or a ``--watch`` journal's), then printed in the demo's words: the ``--compare-capacity`` table's row, each
scale-up's time to capacity and phases, each new replica's sub-phases, p50/p90/max per phase, and the headroom it
suggests."""

from __future__ import annotations

import signal
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from clikit.durations import DurationError, parse_go_duration, parse_prometheus_duration
from clikit.extras import require_extra
from clikit.flags import Flag, Options
from loadtest.cli.common import UsageError, prepare_outputs
from loadtest.cli.summary import surge_lines

__all__ = ["CAPACITY", "capacity"]

CAPACITY = (
    Flag("--deployment", str | None, None, "The workload: a Deployment (with --journal: the journal's, by default)."),
    Flag("--namespace", str | None, None, "Its namespace (default: the kubeconfig context's, or the journal's).",
         short="-n"),
    Flag("--hpa", str | None, None, "The HPA whose decisions start scale-ups (default: the one targeting it)."),
    Flag("--since", str, "1h", "The window: this long before --until, e.g. 2h, 90m, 3d (events live 1 h by "
                               "default: --watch keeps them)."),
    Flag("--until", str | None, None, "The window's end, RFC 3339 (default: now, or the journal's last line)."),
    Flag("--kubeconfig", str | None, None, "Default: $KUBECONFIG, ~/.kube/config, then in-cluster."),
    Flag("--context", str | None, None),
    Flag("--watch", Path | None, None,
         "Follow the cluster and append what it sends to this file (a journal) until Ctrl-C or --watch-for; then "
         "report from the whole file."),
    Flag("--watch-for", str | None, None, "With --watch: stop after this long, e.g. 30m."),
    Flag("--journal", Path | None, None, "Report from a --watch journal instead of a cluster."),
    Flag("--rounds-within", str, "5m",
         "An HPA decision this soon after the previous round's capacity is a further round of the same scale-up."),
    Flag("--json", Path | None, None, "The report as JSON: the demo's time-to-capacity figures and more."),
    Flag("--csv", Path | None, None,
         "Per-second timeline in the demo's columns (the load reads unknown); NAME-replicas.csv beside it."),
    Flag("--plot", Path | None, None, "PNG: replicas, pending pods and GPUs, each scale-up marked."),
)
"""``gpu-loadtest capacity``'s options."""


def _seconds(text: str, flag: str) -> float:
    try:
        return parse_go_duration(text, flag)
    except DurationError:
        try:
            return parse_prometheus_duration(text, flag)
        except DurationError:
            raise UsageError(f"{flag} {text!r}: expected a duration like 30m, 2h, 1h30m or 3d") from None


def _until(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--until {text!r}: expected an RFC 3339 time like 2026-03-02T10:00:00Z") from None
    if moment.tzinfo is None:
        raise UsageError(f"--until {text!r}: give the time zone (Z or +01:00)")
    return moment.timestamp()


def capacity(o: Options) -> None:
    """Time to capacity of a workload's scale-ups on a live cluster, from its own records (read-only): when the HPA
    decided, each new replica's wait for a node, image and model, p50/p90/max per phase."""
    from loadtest.scenarios.capacity_report import report_from_journal, write_report

    if o.plot is not None:
        require_extra("--plot", "loadtest", "matplotlib")
    if o.journal is not None and (o.watch is not None or o.kubeconfig or o.context):
        raise UsageError("--journal reads a journal: not with --watch, --kubeconfig or --context")
    if o.watch_for is not None and o.watch is None:
        raise UsageError("--watch-for goes with --watch")
    if o.journal is None and not o.deployment:
        raise UsageError("--deployment: name the workload's Deployment")
    window = _window(o)
    watch_for = None if o.watch_for is None else _seconds(o.watch_for, "--watch-for")
    prepare_outputs(o.json, o.csv, o.plot, o.watch)
    if o.journal is not None:
        report = report_from_journal(o.journal, _options(_journal_workload(o.journal, o), *window))
    else:
        report = _from_cluster(o, window, watch_for)
    write_report(report, json_path=o.json, csv_path=o.csv, plot_path=o.plot)
    print_report(Console(highlight=False), report, o)


def _from_cluster(o: Options, window: tuple[float, float | None, float], watch_for: float | None) -> Any:
    from loadtest.hpa.watch import api_client
    from loadtest.measure.cluster.reader import ClusterReader
    from loadtest.scenarios.capacity_report import report_from_cluster

    api = api_client(o.kubeconfig, o.context)
    namespace = o.namespace or _context_namespace(o.kubeconfig, o.context)
    options = _options(_workload(namespace, o.deployment, o.hpa), *window)
    console = Console(stderr=True, highlight=False)
    stop = threading.Event()
    if o.watch is not None:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())  # as Ctrl-C: the watch ends, the report comes
    try:
        return report_from_cluster(ClusterReader(api, namespace, o.deployment), options, watch=o.watch,
                                   watch_for_s=watch_for, stop=stop,
                                   on_watch=lambda line: console.print(line, markup=False))
    except KeyboardInterrupt:
        raise UsageError("interrupted before the cluster was read") from None
    finally:
        api.close()


def _window(o: Options) -> tuple[float, float | None, float]:
    """``--since``, ``--until`` and ``--rounds-within``, checked before anything is read."""
    since = _seconds(o.since, "--since")
    if since <= 0:
        raise UsageError("--since must be longer than 0 s")
    return since, _until(o.until), _seconds(o.rounds_within, "--rounds-within")


def _workload(namespace: str, deployment: str, hpa: str | None) -> Any:
    from loadtest.measure.cluster.report import Workload

    return Workload(namespace, deployment, hpa)


def _options(workload: Any, since: float, until: float | None, rounds_within: float) -> Any:
    from loadtest.scenarios.capacity_report import ReportOptions

    return ReportOptions(workload, since, until, rounds_within)


def _journal_workload(path: Path, o: Options) -> Any:
    from loadtest.measure.cluster.journal import replay

    header = (replay(path).headers or [{}])[-1]
    namespace, deployment = o.namespace or header.get("namespace"), o.deployment or header.get("deployment")
    if not namespace or not deployment:
        raise UsageError(f"--journal {path}: its header names no workload; give -n and --deployment")
    return _workload(namespace, deployment, o.hpa)


def _context_namespace(kubeconfig: str | None, context: str | None) -> str:
    from kubernetes import config as k8s_config

    try:
        _, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
        if context is not None:
            contexts, _ = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
            active = next((c for c in contexts if c.get("name") == context), active)
        return str((active or {}).get("context", {}).get("namespace") or "default")
    except (k8s_config.ConfigException, OSError):
        return "default"


def print_report(console: Console, report: Any, o: Options) -> None:
    from loadtest.scenarios.capacity_compare import capacity_row_from, format_capacity_table

    w = report.workload
    hours = (report.end - report.start) / 3600
    sources = report.sources
    console.print(f"\ncapacity of deployment {w.namespace}/{w.deployment}: {_iso(report.start)} to "
                  f"{_iso(report.end)} ({hours:g} h); HPA {report.hpa or 'none'}; autoscaler "
                  f"{report.autoscaler or 'none recorded'}; events from {sources.get('events') or 'nowhere'}"
                  f"{'; journal ' + sources['journal'] if sources.get('journal') else ''}", markup=False,
                  soft_wrap=True)
    for note in report.notes:
        console.print(f"  note: {note}", markup=False, soft_wrap=True)
    capacity = report.capacity()
    if capacity["surges"]:
        label = f"cluster {w.namespace}/{w.deployment}"
        console.print("\n" + format_capacity_table([capacity_row_from(label, capacity, None, None)]),
                      markup=False, soft_wrap=True)
    lines = surge_lines(capacity["surges"], label="scale-up", not_reached="not reached by the window's end",
                        behind_words="after the HPA asked for them all")
    lines += _replica_lines(report)
    provisioning = report.provisioning()
    if provisioning["p90_s"] is not None:
        lines.append(("headroom", f"p90 time to Ready of the {provisioning['replicas']} replicas that waited for a "
                                  f"new node: {provisioning['p90_s']:g} s (headroom.auto.provisioningTime: "
                                  f"{round(provisioning['p90_s'])}s; the chart's history rule measures it over a "
                                  "day)"))
    for key, path in (("json", o.json), ("csv", o.csv), ("plot", o.plot)):
        if path is not None:
            lines.append((key, str(path)))
    if lines:
        width = max(len(k) for k, _ in lines)
        console.print()
        for key, value in lines:
            console.print(f"  {key:<{width}}  {value}", markup=False, soft_wrap=True)
    if report.replicas or report.scale_ups:
        console.print("\n" + quantile_table(report.quantiles()), markup=False, soft_wrap=True)


def _iso(t: float) -> str:
    from loadtest.measure.cluster.report import iso

    return iso(t)


def _seconds_text(value: float | None) -> str:
    return "unknown" if value is None else f"{round(value, 1):g} s"


def _replica_lines(report: Any) -> list[tuple[str, str]]:
    """One line per new replica: where it went and its sub-phases (those that apply)."""
    lines = []
    scale_up = {r.pod: s.figures.surge for s in report.scale_ups for r in s.replicas}
    for r in report.replicas:
        subs = r.sub_phases()
        how = []
        if r.preemption is not None:
            what = {True: "placeholder", False: "pod", None: "pod (placeholder or not: not in the records)"}
            how.append(f"preempted {what[r.preemption.placeholder]} {r.preemption.victim} on {r.preemption.node}")
        if r.stuck is not None:
            taken = f" while {r.stuck.taken_by} took the GPU" if r.stuck.taken_by else ""
            until = "still Pending" if r.stuck.until is None else f"{r.stuck.until - r.stuck.since:g} s"
            how.append(f"STUCK, not slow: Pending, nominated to {r.stuck.node}{taken} ({until})")
        elif r.nominated_node:
            how.append(f"Pending, nominated to {r.nominated_node}")
        node = r.node or "no node yet"
        if r.new_node:
            node += f" (new: {r.autoscaler or 'autoscaler not recorded'}{', ' + r.nodeclaim if r.nodeclaim else ''})"
        if r.events_only:
            how.append("gone: only its events are in the records")
        phases = ", ".join(f"{k.replace('_', ' ')} {_seconds_text(v)}" for k, v in subs.items())
        where = scale_up.get(r.pod)
        lines.append((f"  {r.pod}", f"{'scale-up ' + str(where) if where else 'outside any scale-up'}, {node}"
                                     f"{'; ' + '; '.join(how) if how else ''}: {phases}"))
    return lines


def _quantile_cell(q: dict[str, Any] | None) -> str:
    if q is None or not (q["count"] or q["unknown"]):
        return "-"
    unknown = f", {q['unknown']} unknown" if q["unknown"] else ""
    if not q["count"]:
        return f"unknown ({q['unknown']})"
    return f"{q['p50']:g} / {q['p90']:g} / {q['max']:g} s ({q['count']}{unknown})"


def quantile_table(figures: dict[str, dict[str, dict[str, Any]]]) -> str:
    """p50 / p90 / max per phase (how many known, how many unknown): the scale-ups, every new replica, and those
    that waited for a new node."""
    from loadtest.scenarios.tables import markdown

    phases = list(dict.fromkeys([*figures["scale_ups"], *figures["replicas"]]))
    cells = [[p.removesuffix("_s").replace("_", " "), *(_quantile_cell(figures[g].get(p))
                                                         for g in ("scale_ups", "replicas", "replicas_new_node"))]
             for p in phases]
    return markdown(("phase", "scale-ups: p50 / p90 / max", "replicas", "replicas on a new node"), cells)
