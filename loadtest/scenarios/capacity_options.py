"""``gpu-loadtest demo``'s GPU-node options, checked when the command line is read: one-line errors naming the
flag and the value (an instance type with no known GPU count, a headroom larger than the capacity's GPU limit, a
phase that does not exist)."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from loadtest.clock import DemoClock
from loadtest.loadgen.profile import Profile, ProfileError, parse_duration, parse_profile
from loadtest.nodes import InstanceTypeError, NodeTimings, ShapeError, load_node_groups, load_nodepool
from loadtest.nodes.layer import PAUSE_IMAGE, WORKLOAD_IMAGE, NodeLayerConfig, NodesKind
from loadtest.nodes.shapes import EKSCTL_NODE_GROUPS, KARPENTER_NODEPOOL, NodeGroup, NodePool

__all__ = [
    "AUTO_MAX",
    "AUTO_MIN",
    "CAPACITY_QUICK_PROFILE",
    "CAPACITY_SURGES",
    "CAPACITY_TIME_SCALE",
    "HEADROOM_SIGNALS",
    "PLACEHOLDER_IMAGES",
    "CapacityOptionError",
    "capacity_config",
    "capacity_profile",
    "parse_headroom",
    "parse_timings",
]

CAPACITY_TIME_SCALE = 20.0
"""The demo's default time scale with GPU nodes: a real 15 s HPA sync is 0.75 s, a 3-minute node 9 s."""
PLACEHOLDER_IMAGES = {"pause": PAUSE_IMAGE, "workload": WORKLOAD_IMAGE}
HEADROOM_SIGNALS = ("requests", "queue")

# GPU nodes in the loop: profiles in real seconds, run on a clock compressed CAPACITY_TIME_SCALE times. Each starts
# with 5 minutes at 8 requests/s (the preset's rate and slope windows fill with it, as in a cluster that has served
# for hours), then a surge to 55 requests/s (4 replicas at the 60 % target): a step, or a 10-minute ramp, held long
# enough that two rounds of scale-ups without headroom (a node's 3 minutes, the image's 5.5 and the model's 1 each)
# finish; then 15 minutes at 8, for the HPA's 5-minute window and the NodePool's consolidateAfter to give the nodes
# back. --compare-capacity runs two such surges; --quick one short step (CI).
CAPACITY_SURGES: dict[str, str] = {"step": "2100s:55", "ramp": "600s:8..55,1800s:55"}
CAPACITY_BASELINE, CAPACITY_DROP, CAPACITY_LULL = "300s:8", "120s:55..8", "900s:8"
CAPACITY_QUICK_PROFILE = "240s:8,720s:55,60s:55..8,480s:8"


def capacity_profile(surge: str = "step", count: int = 1) -> Profile:
    """``count`` surges of the given shape (``step`` or ``ramp``) after the baseline, each followed by the lull, in
    real seconds."""
    one = f"{CAPACITY_SURGES[surge]},{CAPACITY_DROP},{CAPACITY_LULL}"
    return parse_profile(",".join([CAPACITY_BASELINE, *[one] * count]))


AUTO_MIN, AUTO_MAX = 0, 4
"""``--headroom auto``'s bounds: the chart's ``headroom.auto.minReplicas`` and ``maxReplicas`` defaults on a cluster
where the HPA may scale to zero (Kubernetes 1.37+)."""


class CapacityOptionError(ValueError):
    """A bad GPU-node option: one line naming the flag and the value."""


def parse_headroom(text: str) -> tuple[int, int, bool]:
    """``--headroom``: a number of placeholder replicas (one workload replica's GPUs each), or ``auto`` (0 to 4
    placeholders, the chart's ``headroom.auto`` minReplicas and maxReplicas), ``auto:N`` (0 to N) or ``auto:M..N``
    (M to N). Returns (least, most, auto)."""
    if text == "auto" or text.startswith("auto:"):
        bounds = text.partition(":")[2] or str(AUTO_MAX)
        least, dots, most = bounds.partition("..")
        if not dots:
            least, most = str(AUTO_MIN), least
        if not (least.isdigit() and most.isdigit()) or int(most) < 1 or int(least) > int(most):
            raise CapacityOptionError(f"--headroom {text!r}: expected auto, auto:N or auto:M..N with 1 <= N and "
                                      "M <= N")
        return int(least), int(most), True
    try:
        count = int(text)
    except ValueError:
        raise CapacityOptionError(f"--headroom {text!r}: expected a number of replicas or auto") from None
    if count < 0:
        raise CapacityOptionError(f"--headroom {text!r}: expected 0 or more replicas")
    return count, count, False


def parse_timings(items: list[str], base: NodeTimings | None = None) -> NodeTimings:
    """``--node-timing PHASE=DURATION`` (repeatable): a phase of :class:`NodeTimings` in real seconds, over ``base``
    (the defaults, or the delays a replayed report gave)."""
    phases = {f.name.removesuffix("_s"): f.name for f in fields(NodeTimings)}
    timings = base or NodeTimings()
    for item in items:
        phase, equals, duration = item.partition("=")
        if not equals or phase not in phases:
            raise CapacityOptionError(f"--node-timing {item!r}: expected PHASE=DURATION with PHASE one of "
                                      f"{', '.join(phases)}")
        seconds = _seconds(duration, f"--node-timing {phase}")
        timings = replace(timings, **{phases[phase]: seconds})
    return timings


def _seconds(text: str, flag: str) -> float:
    """A duration option in seconds, read as the demo's other durations are (a Go duration or plain seconds:
    :func:`loadtest.loadgen.profile.parse_duration`), never negative."""
    if text.strip().startswith("-"):
        raise CapacityOptionError(f"{flag} {text!r}: a duration cannot be negative")
    try:
        return parse_duration(text)
    except ProfileError:
        raise CapacityOptionError(f"{flag} {text!r}: expected a duration (90s, 3m, 1m30s or seconds)") from None


def _duration(text: str | None, flag: str) -> float | None:
    """An optional duration option in seconds (None when not given)."""
    return None if text is None else _seconds(text, flag)


def capacity_config(kind: NodesKind, *, headroom: str | None, time_scale: float, timings: list[str],
                    nodepool: Path | None, node_groups: Path | None, placeholder_image: str,
                    provisioning_time: str | None, replicas: int, headroom_signal: str = "requests",
                    headroom_scale_up_window: str | None = None, base_timings: NodeTimings | None = None,
                    ) -> NodeLayerConfig:
    """The node layer the options ask for, checked against the capacity's shape (``replicas``: the workload's
    replicas at the start)."""
    if time_scale < 1:  # the load generator compresses real time; it cannot stretch it
        raise CapacityOptionError(f"--time-scale {time_scale:g}: expected 1 or more")
    least, count, auto = parse_headroom(headroom) if headroom is not None else (0, 0, False)
    if headroom_signal not in HEADROOM_SIGNALS:
        raise CapacityOptionError(f"--headroom-signal {headroom_signal!r}: expected {' or '.join(HEADROOM_SIGNALS)}")
    pool: NodePool | None = None
    groups: tuple[NodeGroup, ...] = ()
    try:
        if kind is NodesKind.KARPENTER:
            pool = load_nodepool(nodepool or KARPENTER_NODEPOOL)
        else:
            groups = load_node_groups(node_groups or EKSCTL_NODE_GROUPS)
    except (ShapeError, InstanceTypeError) as exc:
        raise CapacityOptionError(str(exc)) from None
    provisioning = _duration(provisioning_time, "--provisioning-time")
    if provisioning == 0:
        raise CapacityOptionError(f"--provisioning-time {provisioning_time!r}: expected a duration above 0")
    scale_up = _duration(headroom_scale_up_window, "--headroom-scale-up-window")
    config = NodeLayerConfig(kind, DemoClock(time_scale), parse_timings(timings, base_timings), headroom=count,
                             headroom_auto=auto,
                             placeholder_image=PLACEHOLDER_IMAGES[placeholder_image], provisioning_s=provisioning,
                             headroom_min=least, headroom_signal=headroom_signal, pool=pool, groups=groups,
                             headroom_scale_up_s=NodeLayerConfig.headroom_scale_up_s if scale_up is None else scale_up)
    try:
        config.check(replicas)
    except ValueError as exc:
        raise CapacityOptionError(str(exc)) from None
    return config
