"""``gpu-loadtest demo --from-report FILE``: the demo replays a recorded cluster. Its node, image and model delays and
its surges come from a capacity report (``gpu-loadtest capacity``'s JSON) or from a demo's own ``--summary`` (the same
``capacity`` figures), so "what would static or demand-following headroom have saved on last week's surges" is
``--from-report FILE --compare-capacity``.

The translation (pure, :func:`replay_of`):

* **Delays**, from the replicas the file lists (each scale-up's ``replicas``, else the report's top-level list), each
  with ``new_node`` and ``phases_s`` (``node``: created to bound, ``image``: bound to started, ``model``: started to
  Ready) and, in a report, ``sub_phases_s``. The node phase is the median, over the replicas that waited for a node
  created after them, of their wait for a GPU, less the autoscaler's own reaction where the report names it
  (``sub_phases_s.autoscaler``: the model adds its own: Karpenter's batch window, Cluster Autoscaler's 30 s for GPU
  pods and its scan). It is split as the report splits it where it can (``launch`` + ``registration`` to the Node,
  ``node_ready``, the rest the GPUs' driver and device plugin), else as the defaults split theirs. The image phase is
  the median over those replicas (the image was not on their new node), the model phase over every replica. A phase
  no replica has a value for keeps the demo's default, and the output says so.
* **Surges**, one per scale-up: a step from the rate its ``replicas_before`` serve to the rate that needs its
  ``replicas_needed`` (else ``replicas_asked``) at the HPA's target (``n`` replicas: ``n - 1/3`` replicas' worth,
  so 1 -> 10 and 4 -> 55 requests/s at 15 each, the demo's own 4), after the demo's 5-minute baseline. Each holds
  long enough for a replica that needs a node to come, twice over: 3.75 times the replayed node, image and model
  (the demo's own step holds 35 minutes for 9.4), and at least 1.5 times the scale-up's recorded time to capacity;
  then the demo's 2-minute ramp down to the next scale-up's starting rate, and a lull until the next scale-up as
  the file spaces them, between 1 and 15 minutes (the lull the demo's nodes need to be given back: the HPA's
  5-minute window and the NodePool's 5-minute consolidateAfter). The output says where a gap was cut or stretched.
  A scale-up that asked for no more replicas than it had, or whose counts are unknown, is left out, and said.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadtest.loadgen.profile import Profile, Segment
from loadtest.nodes import NodeTimings

__all__ = ["HOLD_FACTOR", "Replay", "ReplayError", "ReplaySurge", "read_report", "replay_of"]

HOLD_FACTOR = 2100 / 562
"""The demo's own step holds 35 minutes (2100 s) for a provisioning time of 562 s (node, image, model)."""
BASELINE_S, DROP_S, SHORTEST_LULL_S, LONGEST_LULL_S = 300.0, 120.0, 60.0, 900.0


class ReplayError(ValueError):
    """A file that is not a capacity report: one line naming it."""


@dataclass(frozen=True)
class ReplaySurge:
    """A recorded scale-up as a surge of the load: ``start`` seconds into the file's window (``None``: unknown),
    from ``before`` replicas to ``target``; ``recorded_s`` its recorded time to capacity."""

    start: float | None
    before: int
    target: int
    recorded_s: float | None


@dataclass(frozen=True)
class Replay:
    """What the demo takes from the file: its delays (``timings``), its surges and what it said about both."""

    source: str
    timings: NodeTimings
    surges: tuple[ReplaySurge, ...]
    notes: tuple[str, ...]

    @property
    def provisioning_s(self) -> float:
        t = self.timings
        return t.node_s + t.image_pull_s + t.model_load_s

    def hold_s(self, surge: ReplaySurge) -> float:
        """How long the surge's peak holds: in whole minutes, long enough for two node rounds (see the module)."""
        wanted = max(HOLD_FACTOR * self.provisioning_s, 1.5 * (surge.recorded_s or 0.0))
        return 60.0 * math.ceil(wanted / 60.0)

    def profile(self, per_replica: float) -> tuple[Profile, list[str]]:
        """The load in real time, ``per_replica`` requests/s a replica serving at the HPA's target, and one line per
        surge saying what it became."""
        def rate(replicas: int) -> float:
            return round(per_replica * (replicas - 1 / 3), 1)

        segments = [Segment(BASELINE_S, rate(self.surges[0].before), rate(self.surges[0].before))]
        lines = []
        for i, surge in enumerate(self.surges):
            after = self.surges[i + 1] if i + 1 < len(self.surges) else None
            hold = self.hold_s(surge)
            low = rate(after.before if after is not None else surge.before)
            lull, said = self._lull(surge, after, hold)
            peak = rate(surge.target)
            segments += [Segment(hold, peak, peak), Segment(DROP_S, peak, low), Segment(lull, low, low)]
            lines.append(f"surge {i + 1}: {surge.before} -> {surge.target} replicas, {rate(surge.before):g} -> "
                         f"{rate(surge.target):g} requests/s, held {hold / 60:g} min, then {lull / 60:g} min at "
                         f"{low:g}{said}")
        return Profile(tuple(segments)), lines

    def _lull(self, surge: ReplaySurge, after: ReplaySurge | None, hold: float) -> tuple[float, str]:
        if after is None:
            return LONGEST_LULL_S, ""
        if surge.start is None or after.start is None:
            return LONGEST_LULL_S, " (the file does not say when the next scale-up came)"
        gap = after.start - surge.start - hold - DROP_S
        lull = min(max(gap, SHORTEST_LULL_S), LONGEST_LULL_S)
        if lull == gap:
            return lull, ""
        return lull, f" (the file's {(after.start - surge.start) / 60:.0f} min to the next scale-up " \
                     f"{'cut' if gap > lull else 'stretched'})"


def read_report(path: Path) -> Mapping[str, Any]:
    """The file's JSON object; one-line :class:`ReplayError` for a file that is missing or not JSON."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ReplayError(f"--from-report {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReplayError(f"--from-report {path}: not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ReplayError(f"--from-report {path}: expected a JSON object (a capacity report or a demo's --summary)")
    return document


def _capacity(document: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """The ``capacity`` figures: a report's or a demo summary's, or the no-headroom run's of a --compare-capacity
    summary (one run, or the first of --runs)."""
    runs = document.get("runs")
    if isinstance(document.get("comparisons"), list) and document["comparisons"]:
        runs = document["comparisons"][0].get("runs")
    if isinstance(runs, dict) and isinstance(runs.get("none"), dict):
        document = runs["none"]
    capacity = document.get("capacity")
    if not isinstance(capacity, dict) or not isinstance(capacity.get("surges"), list):
        raise ReplayError(f"--from-report {where}: not a capacity report or a demo's --summary with GPU nodes "
                          "(no capacity.surges in it)")
    return capacity


def replay_of(document: Mapping[str, Any], where: str, defaults: NodeTimings | None = None) -> Replay:
    """The replay a report (or a demo summary) asks for; :class:`ReplayError` when it has nothing to replay."""
    capacity = _capacity(document, where)
    surges = [s for s in capacity["surges"] if isinstance(s, dict)]
    replicas = [r for s in surges for r in s.get("replicas") or () if isinstance(r, dict)] or \
        [r for r in document.get("replicas") or () if isinstance(r, dict)]
    timings, notes = _timings(replicas, defaults or NodeTimings())
    kept, left = _surges(surges)
    if not kept:
        raise ReplayError(f"--from-report {where}: no scale-up to replay ({len(surges)} in it"
                          + (f"; {'; '.join(left)}" if left else "") + ")")
    return Replay(where, timings, tuple(kept), tuple(notes + left))


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if isinstance(v, int | float)]
    return None if not known else round(statistics.median(known), 1)


def _phase(replica: Mapping[str, Any], name: str, group: str = "phases_s") -> float | None:
    value = (replica.get(group) or {}).get(name)
    return value if isinstance(value, int | float) else None


def _timings(replicas: Sequence[Mapping[str, Any]], defaults: NodeTimings) -> tuple[NodeTimings, list[str]]:
    new = [r for r in replicas if r.get("new_node")]
    notes: list[str] = []
    waits = []
    for r in new:
        node, autoscaler = _phase(r, "node"), _phase(r, "autoscaler", "sub_phases_s")
        waits.append(None if node is None else max(0.0, node - (autoscaler or 0.0)))
    node = _median(waits)
    timings = defaults
    if node is None:
        notes.append(f"node: unknown in the file (no replica that waited for a new node has its wait): the "
                     f"default, {defaults.node_s:g} s")
    else:
        timings, split = _split_node(node, new, defaults)
        notes.append(f"node: {node:g} s, the median wait for a GPU of {sum(w is not None for w in waits)} replicas "
                     f"that waited for a new node, the autoscaler's own reaction left to the model; {split}")
    image = _median([_phase(r, "image") for r in new])
    model = _median([_phase(r, "model") for r in replicas])
    for name, field, value, of in (("image", "image_pull_s", image, "replicas on a new node"),
                                   ("model", "model_load_s", model, "replicas")):
        if value is None:
            notes.append(f"{name}: unknown in the file: the default, {getattr(defaults, field):g} s")
        else:
            count = sum(_phase(r, name) is not None for r in (new if name == "image" else replicas))
            timings = replace(timings, **{field: value})
            notes.append(f"{name}: {value:g} s, the median of {count} {of}")
    return timings, notes


def _split_node(node: float, new: Sequence[Mapping[str, Any]], defaults: NodeTimings) -> tuple[NodeTimings, str]:
    """``node`` seconds split into launch, ready and GPUs: the report's own split where it has launch and Ready,
    else the defaults' proportions."""
    def to_node(r: Mapping[str, Any]) -> float | None:
        launch = _phase(r, "launch", "sub_phases_s")
        return None if launch is None else launch + (_phase(r, "registration", "sub_phases_s") or 0.0)

    launch = _median([to_node(r) for r in new])
    ready = _median([_phase(r, "node_ready", "sub_phases_s") for r in new])
    if launch is not None and ready is not None and launch + ready <= node:
        timings = replace(defaults, launch_s=launch, ready_s=ready, gpu_s=round(node - launch - ready, 1))
        return timings, f"launch {launch:g} s, Ready {ready:g} s, GPUs {timings.gpu_s:g} s as the file has them"
    launch, ready = (round(x * node / defaults.node_s, 1) for x in (defaults.launch_s, defaults.ready_s))
    timings = replace(defaults, launch_s=launch, ready_s=ready, gpu_s=round(node - launch - ready, 1))
    return timings, (f"split as the defaults split theirs: launch {launch:g} s, Ready {ready:g} s, GPUs "
                     f"{timings.gpu_s:g} s")


def _surges(surges: Sequence[Mapping[str, Any]]) -> tuple[list[ReplaySurge], list[str]]:
    kept, said = [], []
    for i, surge in enumerate(surges, start=1):
        before, target = surge.get("replicas_before"), surge.get("replicas_needed") or surge.get("replicas_asked")
        if not isinstance(target, int):
            said.append(f"scale-up {i} left out: how many replicas it asked for is unknown")
            continue
        start = surge.get("load_step_s")
        start = start if isinstance(start, int | float) else surge.get("first_decision_s")
        if not isinstance(before, int) or before < 1:
            said.append(f"scale-up {i}: {'from 0 replicas' if before == 0 else 'the replicas before it unknown'}: "
                        "replayed from 1 (the demo with GPU nodes keeps at least one)")
            before = 1
        if target <= before:
            said.append(f"scale-up {i} left out: it asked for {target} replicas with {before} serving")
            continue
        recorded = surge.get("time_to_capacity_s")
        kept.append(ReplaySurge(start if isinstance(start, int | float) else None, before, target,
                                recorded if isinstance(recorded, int | float) else None))
    kept.sort(key=lambda s: math.inf if s.start is None else s.start)
    return kept, said
