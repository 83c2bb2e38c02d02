"""The summary ``gpu-loadtest`` prints after a run: the figures it is judged by, then the cold starts, the time to
capacity of each surge and the GPU nodes, as the run had them."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from loadtest.measure.summary import Summary
from loadtest.measure.time_to_capacity import no_scale_up_needed

__all__ = ["UNKNOWN", "print_summary", "surge_lines"]


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
    lines = surge_lines(capacity["surges"])
    lines.append(("GPU nodes", f"{_fmt(capacity['gpu_node_seconds'])} GPU-node-seconds, {capacity['nodes_launched']} "
                               f"launched, {_fmt(capacity['pending_pod_seconds'])} pending pod-seconds, "
                               f"{capacity['placeholders_preempted']} placeholders preempted (real-time seconds: the "
                               f"run went {capacity['time_scale']:g}x faster)"))
    return lines


UNKNOWN = "unknown"


def surge_lines(surges: list[dict[str, Any]], *, label: str = "surge", not_reached: str = "not reached before the "
                "load fell", behind_words: str = "after the load needed them") -> list[tuple[str, str]]:
    """Two lines per surge (``label``: a cluster's report says scale-up): its time to capacity, replicas and phases,
    then what waited; a figure the records did not hold (named in the surge's ``unknown``) reads ``unknown``."""
    lines = []
    for surge in surges:
        if no_scale_up_needed(surge):
            lines.append((f"{label} {surge['surge']}: time to capacity",
                          f"no scale-up needed ({surge['replicas_before']} replicas served it; it needed "
                          f"{surge['replicas_needed']})"))
            continue
        unknown = set(surge.get("unknown") or ())

        def cell(key: str, unit: str = "", doc: dict[str, Any] = surge, name: str = "",
                 unknown: set[str] = unknown) -> str:
            return UNKNOWN if (name or key) in unknown else _fmt(doc[key], unit)

        phases = ", ".join(f"{k} {cell(k, ' s', surge['phases_s'], f'phases_s.{k}')}" for k in surge["phases_s"])
        reached = cell("time_to_capacity_s", " s") if surge["time_to_capacity_s"] is not None or \
            "time_to_capacity_s" in unknown else not_reached
        behind = surge.get("behind_demand_s")
        lag = "" if behind is None or behind == surge["time_to_capacity_s"] else \
            f"; {_fmt(behind, ' s')} {behind_words}"
        lines.append((f"{label} {surge['surge']}: time to capacity",
                      f"{reached} ({cell('replicas_before')} -> {cell('replicas_asked')} replicas; {phases}{lag})"))
        lines.append((f"{label} {surge['surge']}: waiting",
                      f"first new replica {cell('first_replica_wait_s', ' s')} for a GPU, "
                      f"{cell('pending_pod_seconds')} pending pod-seconds, {cell('requests_failed')} requests "
                      f"failed, {cell('requests_queued')} queued, {cell('nodes_launched')} nodes launched"))
    return lines
