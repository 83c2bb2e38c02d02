"""A cluster's records as the demo's per-second timeline (pure): one ``TimelineRow`` per second of the window, ``t``
seconds after its start, counted at the end of that second, in the demo's columns. The load is not in the API: its
columns (``sent``, ``ok``, ``errors``, ``dropped``, latencies) are unknown. From the records: ``desired_replicas``
(the HPA's decisions), ``current_replicas`` (the workload's Ready pods), ``pods`` (bound), ``pending_pods``
(unbound), ``placeholders`` (the headroom's bound placeholders), ``nodes`` and ``node_gpus`` (the GPU nodes the
workload's or its placeholders' pods ran on) and ``gpu_node_seconds`` (their GPUs times their life since the
window's start). Counts are of the objects in the records: a pod gone before the report (and not seen by
``--watch``) is missing from them; a replica counts as Ready from its first readiness where that is known, else from
its Ready condition's last transition (a restart's dip is not in the counts)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

from loadtest.measure.cluster.objects import Node, Pod
from loadtest.measure.cluster.replicas import Replica
from loadtest.measure.cluster.scale_ups import Decision
from loadtest.measure.timeline import TimelineRow

__all__ = ["LOAD_COLUMNS", "timeline"]

LOAD_COLUMNS = ("sent", "ok", "errors", "dropped", "p50_ms", "p95_ms")


class _Count:
    """How many of some spans ``[start, end)`` hold at a moment."""

    def __init__(self, spans: Sequence[tuple[float, float | None]]) -> None:
        self.starts = sorted(s for s, _ in spans)
        self.ends = sorted(e for _, e in spans if e is not None)

    def at(self, t: float) -> int:
        return bisect_right(self.starts, t) - bisect_right(self.ends, t)


def _until(*ends: float | None) -> float | None:
    known = [e for e in ends if e is not None]
    return min(known) if known else None


def timeline(replicas: Sequence[Replica], placeholders: Sequence[Pod], nodes: Sequence[Node],
             found: Sequence[Decision], t0: float, t1: float) -> list[TimelineRow]:
    """``replicas``: every workload pod of the records (those from before the window too)."""
    ready = _Count([(r.ready_since, r.deleted) for r in replicas if r.ready_since is not None])
    bound = _Count([(r.marks["scheduled"], r.deleted) for r in replicas if r.marks["scheduled"] is not None])
    pending = _Count([(r.created, _until(r.marks["scheduled"], r.deleted)) for r in replicas
                      if r.marks["scheduled"] is not None or not r.events_only])
    held = _Count([(p.scheduled, p.deleted) for p in placeholders if p.scheduled is not None])
    used = {r.node for r in replicas if r.node} | {p.node for p in placeholders if p.node}
    gpu_nodes = [n for n in nodes if n.name in used and n.gpus > 0]
    node_count = _Count([(n.created, n.deleted) for n in gpu_nodes])
    gpus = sorted([(n.created, n.gpus) for n in gpu_nodes] +
                  [(n.deleted, -n.gpus) for n in gpu_nodes if n.deleted is not None])
    desired_before = found[0].before if found else None
    sizes = [d.t for d in found]
    rows, gpu_seconds, live_gpus, k = [], 0.0, 0, 0
    while k < len(gpus) and gpus[k][0] <= t0:
        live_gpus, k = live_gpus + gpus[k][1], k + 1
    for second in range(max(0, math.ceil(t1 - t0))):
        at = t0 + second + 1
        while k < len(gpus) and gpus[k][0] <= at:  # a change within the second counts from when it came
            gpu_seconds += (live_gpus - (live_gpus + gpus[k][1])) * (gpus[k][0] - (at - 1))
            live_gpus += gpus[k][1]
            k += 1
        gpu_seconds += live_gpus
        i = bisect_right(sizes, at)
        rows.append(TimelineRow(
            t=float(second), phase="cluster", target_rps=None, sent=None, ok=None, errors=None, dropped=None,
            desired_replicas=found[i - 1].size if i else desired_before,
            current_replicas=ready.at(at), pods=bound.at(at), pending_pods=pending.at(at),
            placeholders=held.at(at), nodes=node_count.at(at), node_gpus=max(live_gpus, 0),
            gpu_node_seconds=round(gpu_seconds, 1)))
    return rows
