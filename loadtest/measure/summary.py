"""The figures a scaling run is judged by, computed from its timeline (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from loadtest.hpa.record import SyncRecord
from loadtest.loadgen.open_loop import percentile
from loadtest.measure.timeline import TimelineRow

__all__ = ["PhaseLatency", "Summary", "summarize"]


@dataclass(frozen=True)
class PhaseLatency:
    requests: int
    p50_ms: float | None
    p95_ms: float | None


@dataclass
class Summary:
    """``scale_up_seconds``: load step to the first scale-up decision; ``scale_down_seconds``: load drop to the
    first scale-down decision; ``back_to_initial_seconds``: load drop to the replica count being back where it
    started (``None`` when that did not happen). When the run knows how many replicas its peak load needs
    (``needed_replicas``), ``scale_ups_to_needed`` counts the scale-up decisions from the load step to the first
    that asked for at least that many (``None`` when none did). ``decisions`` lists every sync. ``gpu_seconds``: the
    GPU time the replicas held over the profile (replica-seconds, cold starts included), ``seconds_at_zero`` the
    profile's seconds that ended with no replica at all (both ``None`` when the run did not record them)."""

    initial_replicas: int | None
    peak_replicas: int | None
    final_replicas: int | None
    peak_desired_replicas: int | None
    scale_up_seconds: float | None
    peak_reached_seconds: float | None
    scale_down_seconds: float | None
    back_to_initial_seconds: float | None
    load_step_at: float | None
    load_drop_at: float | None
    duration_seconds: float
    requests: dict[str, int]
    latency_by_phase: dict[str, PhaseLatency]
    scale_events: list[dict[str, Any]]
    needed_replicas: int | None = None
    scale_ups_to_needed: int | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    gpu_seconds: float | None = None
    seconds_at_zero: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        """Requests that got no answer: errors and those dropped at the in-flight bound."""
        return self.requests.get("errors", 0) + self.requests.get("dropped", 0)

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        extra = doc.pop("extra")
        return {**doc, **extra}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def summarize(
    rows: Sequence[TimelineRow],
    syncs: Sequence[SyncRecord],
    load_step_at: float | None,
    load_drop_at: float | None,
    extra: dict[str, Any] | None = None,
    needed_replicas: int | None = None,
) -> Summary:
    """Figures from a run; ``rows`` must be in time order. Replica counts come from ``current_replicas``."""
    counts = [(r.t, r.current_replicas) for r in rows if r.current_replicas is not None]
    initial = counts[0][1] if counts else None
    peak = max((c for _, c in counts), default=None)
    final = counts[-1][1] if counts else None
    desired = [r.desired_replicas for r in rows if r.desired_replicas is not None]
    desired += [s.desired for s in syncs]

    scale_up = scale_down = peak_reached = back = None
    if load_step_at is not None:
        first_up = next((s for s in syncs if s.t >= load_step_at and s.direction > 0), None)
        scale_up = None if first_up is None else first_up.t - load_step_at
        if peak is not None and initial is not None and peak > initial:
            at_peak = next(t for t, c in counts if c == peak)
            peak_reached = at_peak - load_step_at if at_peak >= load_step_at else None
    if load_drop_at is not None:
        first_down = next((s for s in syncs if s.t >= load_drop_at and s.direction < 0), None)
        scale_down = None if first_down is None else first_down.t - load_drop_at
        if initial is not None and peak is not None and peak > initial:
            back_at = next((t for t, c in counts if t >= load_drop_at and c <= initial), None)
            back = None if back_at is None else back_at - load_drop_at

    by_phase: dict[str, list[float]] = {}
    for row in rows:
        by_phase.setdefault(row.phase, []).extend(row.latencies_s)
    latency = {}
    for phase, values in by_phase.items():
        p50, p95 = percentile(values, 50), percentile(values, 95)
        latency[phase] = PhaseLatency(len(values), _rounded(None if p50 is None else p50 * 1e3),
                                      _rounded(None if p95 is None else p95 * 1e3))
    requests = {"sent": sum(r.sent or 0 for r in rows), "ok": sum(r.ok or 0 for r in rows),
                "errors": sum(r.errors or 0 for r in rows), "dropped": sum(r.dropped or 0 for r in rows)}
    events = [{"t": _rounded(s.t), "from": s.current, "to": s.desired, "metric": _rounded(s.metric),
               "reason": s.reason} for s in syncs if s.direction]
    ups_to_needed = None
    if needed_replicas is not None and load_step_at is not None:
        ups = [s for s in syncs if s.t >= load_step_at and s.direction > 0]
        reached = next((i for i, s in enumerate(ups) if s.desired >= needed_replicas), None)
        ups_to_needed = None if reached is None else reached + 1
    decisions = [{"t": _rounded(s.t), "from": s.current, "to": s.desired,
                  "readings": {k: _rounded(v) for k, v in s.readings.items()}, "reason": s.reason or None,
                  "error": s.error} for s in syncs]
    in_profile = [r for r in rows if r.phase != "drain"]
    used = [r.gpu_seconds for r in in_profile if r.gpu_seconds is not None]
    pods = [r.pods for r in in_profile if r.pods is not None]
    return Summary(
        initial_replicas=initial,
        peak_replicas=peak,
        final_replicas=final,
        peak_desired_replicas=max(desired, default=None),
        scale_up_seconds=_rounded(scale_up),
        peak_reached_seconds=_rounded(peak_reached),
        scale_down_seconds=_rounded(scale_down),
        back_to_initial_seconds=_rounded(back),
        load_step_at=load_step_at,
        load_drop_at=load_drop_at,
        duration_seconds=float(rows[-1].t + 1) if rows else 0.0,
        requests=requests,
        latency_by_phase=latency,
        scale_events=events,
        needed_replicas=needed_replicas,
        scale_ups_to_needed=ups_to_needed,
        decisions=decisions,
        gpu_seconds=round(max(used), 1) if used else None,
        seconds_at_zero=sum(1 for p in pods if p == 0) if pods else None,
        extra=dict(extra or {}),
    )
