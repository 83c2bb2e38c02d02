"""The capacity report of one workload over a window of a cluster's records (pure): its scale-ups as the demo
measures surges, every replica created in the window with its phases, p50/p90/max of each phase, the per-second
timeline, and one-line notes on what the records lack.

Its JSON (``to_json``) is the demo's own time-to-capacity figures (the ``capacity`` of ``gpu-loadtest demo``'s
summary: ``time_scale``, ``surges`` as ``ScaleUp.to_json``, ``nodes_launched``, ``pending_pod_seconds``,
``placeholders_preempted``, ``gpu_node_seconds``) with, in each surge, ``decided_at``, its ``decisions``, its
``replicas`` (``Replica.to_json``), ``state``, ``placeholders_taken`` and ``stuck``; beside it the workload, the
window, the sources, ``quantiles``, ``provisioning`` and ``notes``. Times are seconds since the window's start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from loadtest.hpa.record import SyncRecord
from loadtest.loadgen.open_loop import percentile
from loadtest.measure.cluster.objects import Records
from loadtest.measure.cluster.replicas import PHASES, SUB_PHASES, Replica, is_placeholder, replicas, workload_pods
from loadtest.measure.cluster.rows import timeline
from loadtest.measure.cluster.scale_ups import ClusterScaleUp, Decision, decisions, launches, scale_ups
from loadtest.measure.time_to_capacity import PHASES as SURGE_PHASES
from loadtest.measure.timeline import TimelineRow

__all__ = ["CapacityReport", "Workload", "build_report", "iso", "quantiles"]

EVENT_TTL_NOTE = "events live 1 h by default (kube-apiserver --event-ttl): --watch keeps them"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Workload:
    namespace: str
    deployment: str
    hpa: str | None = None  # None: the HPA whose scaleTargetRef is the Deployment


def quantiles(values: Sequence[float | None]) -> dict[str, Any]:
    """p50, p90 (nearest rank) and max of the known values, how many are known and how many unknown."""
    known = [v for v in values if v is not None]
    figures = {name: None if not known else round(percentile(known, q) or 0.0, 1)
               for name, q in (("p50", 50), ("p90", 90), ("max", 100))}
    return {**figures, "count": len(known), "unknown": len(values) - len(known)}


@dataclass
class CapacityReport:
    workload: Workload
    start: float
    end: float
    hpa: str | None
    autoscaler: str | None
    scale_ups: list[ClusterScaleUp]
    replicas: list[Replica]
    rows: list[TimelineRow]
    syncs: list[SyncRecord]
    notes: list[str] = field(default_factory=list)
    sources: dict[str, Any] = field(default_factory=dict)

    def capacity(self) -> dict[str, Any]:
        """The demo's ``capacity`` figures, with each scale-up's decisions and replicas."""
        surges = []
        for up in self.scale_ups:
            doc = up.figures.to_json()
            doc.update(decided_at=iso(up.decisions[0].t), state=up.state,
                       decisions=[{"t": round(d.t - self.start, 1), "size": d.size, "reason": d.reason}
                                  for d in up.decisions],
                       placeholders_taken=sum(1 for r in up.replicas if r.preemption and r.preemption.placeholder),
                       stuck=sum(1 for r in up.replicas if r.stuck), notes=list(up.notes),
                       replicas=[r.to_json(self.start) for r in up.replicas])
            surges.append(doc)
        pending = [s.figures.pending_pod_seconds for s in self.scale_ups]
        nodes = [s.figures.nodes_launched for s in self.scale_ups]
        unknown = [k for k, v in (("pending_pod_seconds", pending), ("nodes_launched", nodes)) if None in v]
        return {"time_scale": 1, "measured_from": "decision", "surges": surges,
                "gpu_node_seconds": self.rows[-1].gpu_node_seconds if self.rows else None,
                "nodes_launched": None if None in nodes else sum(n for n in nodes if n is not None),
                "pending_pod_seconds": None if None in pending else round(sum(p for p in pending if p), 1),
                "placeholders_preempted": sum(1 for r in self.replicas if r.preemption and r.preemption.placeholder),
                "stuck": sum(1 for r in self.replicas if r.stuck), "unknown": unknown, "headroom_decisions": []}

    def quantiles(self) -> dict[str, dict[str, Any]]:
        """Per phase over the window's replicas (all of them, and those that waited for a new node) and its
        scale-ups: p50, p90, max."""
        def of(replicas: Sequence[Replica]) -> dict[str, Any]:
            out = {p: quantiles([r.phases()[p] for r in replicas]) for p in PHASES}
            out["time_to_ready"] = quantiles([_time_to_ready(r) for r in replicas])
            for sub in SUB_PHASES:
                values = [r.sub_phases()[sub] for r in replicas if sub not in r.not_applicable()]
                out[sub] = quantiles(values)
            return out

        figures = [s.figures for s in self.scale_ups]
        ups = {"time_to_capacity_s": quantiles([f.time_to_capacity_s for f in figures]),
               "behind_demand_s": quantiles([f.behind_demand_s for f in figures])}
        ups.update({p: quantiles([f.phases_s.get(p) for f in figures]) for p in SURGE_PHASES})
        return {"replicas": of(self.replicas), "replicas_new_node": of([r for r in self.replicas if r.new_node]),
                "scale_ups": ups}

    def provisioning(self) -> dict[str, Any]:
        """What ``headroom.auto.provisioningTime`` would be from this window: the p90 time to Ready of the replicas
        that waited for a new node (the chart's recording rule reads the same over a day)."""
        figures = quantiles([_time_to_ready(r) for r in self.replicas if r.new_node])
        return {"p90_s": figures["p90"], "replicas": figures["count"]}

    def to_json(self) -> dict[str, Any]:
        return {"report": "gpu-loadtest capacity", "version": 1,
                "workload": {"namespace": self.workload.namespace, "deployment": self.workload.deployment,
                             "hpa": self.hpa},
                "window": {"start": iso(self.start), "end": iso(self.end), "seconds": round(self.end - self.start)},
                "autoscaler": self.autoscaler, "sources": self.sources, "capacity": self.capacity(),
                "replicas": [r.to_json(self.start) for r in self.replicas], "quantiles": self.quantiles(),
                "provisioning": self.provisioning(), "notes": self.notes}


def _time_to_ready(r: Replica) -> float | None:
    ready = r.marks["ready"]
    return None if ready is None else max(0.0, ready - r.created)


def _hpa_of(records: Records, workload: Workload) -> str | None:
    if workload.hpa is not None:
        return workload.hpa
    return next((h.name for h in records.hpas if h.target_kind == "Deployment"
                 and h.target_name == workload.deployment), None)


def _autoscaler(records: Records, pods: set[str], every: Sequence[Replica]) -> str | None:
    if records.karpenter or any(r.autoscaler == "karpenter" for r in every):
        return "karpenter"
    return "cluster-autoscaler" if launches(records, pods) is not None else None


def _notes(records: Records, workload: Workload, hpa: str | None, found: Sequence[Decision],
           autoscaler: str | None, start: float, end: float) -> list[str]:
    where = f"{workload.namespace}/{workload.deployment}"
    notes = []
    if hpa is None:
        notes.append(f"no HorizontalPodAutoscaler in {workload.namespace} targets deployment {workload.deployment}: "
                     "no scale-up decisions to measure from; the replicas created in the window are listed")
    elif not [d for d in found if start <= d.t <= end and d.direction == 1]:
        oldest = min((e.first for e in records.events), default=None)
        reach = f"; the records' oldest event is from {iso(oldest)}" if oldest is not None else ""
        notes.append(f"no scale-up of {where} between {iso(start)} and {iso(end)} in the records{reach} "
                     f"({EVENT_TTL_NOTE})")
    oldest = min((e.first for e in records.events), default=None)
    if oldest is not None and oldest > start + 60 and hpa is not None and any(d.t >= start for d in found):
        notes.append(f"the records' events reach back to {iso(oldest)} only, not to the window's start "
                     f"({EVENT_TTL_NOTE})")
    if autoscaler is None:
        served = "not served" if records.karpenter is False else "not readable"
        notes.append(f"no Karpenter NodeClaims (karpenter.sh/v1 {served}) and no Cluster Autoscaler TriggeredScaleUp "
                     "events for the workload: the node's launch and registration are unknown")
    return notes


def build_report(records: Records, workload: Workload, start: float, end: float, *, rounds_within: float = 300.0,
                 sources: dict[str, Any] | None = None, notes: Sequence[str] = ()) -> CapacityReport:
    """``notes``: what reading the cluster already had to say (a refused read, a missing object)."""
    hpa = _hpa_of(records, workload)
    found, folded = decisions(records.events, hpa, workload.deployment) if hpa else ([], [])
    every = replicas(records, workload.deployment, float("-inf"), end)
    made = [r for r in every if start <= r.created <= end]
    in_window = [d for d in found if start <= d.t <= end]
    ups = scale_ups(in_window, every, records, t0=start, until=end, rounds_within=rounds_within)
    pods = {r.pod for r in every} | {p.name for p in records.pods if is_placeholder(p)}
    autoscaler = _autoscaler(records, pods, every)
    placeholders = [p for p in records.pods if is_placeholder(p) and p.namespace == workload.namespace]
    rows = timeline(every, placeholders, records.nodes, found, start, end)
    syncs = [SyncRecord(d.t - start, d.before if d.before is not None else d.size, d.size, reason=d.reason)
             for d in in_window]
    if not workload_pods(records.pods, workload.deployment) and not made:
        notes = [*notes, f"no pod of deployment {workload.namespace}/{workload.deployment} in the records"]
    return CapacityReport(workload, start, end, hpa, autoscaler, ups, made, rows, syncs,
                          [*notes, *folded, *_notes(records, workload, hpa, found, autoscaler, start, end)],
                          dict(sources or {}))
