"""``gpu-loadtest demo``'s GPU-node options, checked when the command line is read: one-line errors naming the
flag and the value (an instance type with no known GPU count, a headroom larger than the capacity's GPU limit, a
phase that does not exist)."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from clikit.durations import DurationError, parse_go_duration
from loadtest.node_layer import PAUSE_IMAGE, WORKLOAD_IMAGE, NodeLayerConfig, NodesKind
from loadtest.nodes import InstanceTypeError, NodeTimings, ShapeError, load_node_groups, load_nodepool
from loadtest.nodes.shapes import EKSCTL_NODE_GROUPS, KARPENTER_NODEPOOL

__all__ = ["PLACEHOLDER_IMAGES", "CapacityOptionError", "capacity_config", "parse_headroom", "parse_timings"]

PLACEHOLDER_IMAGES = {"workload": WORKLOAD_IMAGE, "pause": PAUSE_IMAGE}
AUTO_MAX = 4


class CapacityOptionError(ValueError):
    """A bad GPU-node option: one line naming the flag and the value."""


def parse_headroom(text: str) -> tuple[int, bool]:
    """``--headroom``: a number of placeholder replicas (one workload replica's GPUs each), or ``auto`` (at most 4
    placeholders, the chart's ``headroom.auto.maxReplicas``) or ``auto:N`` (at most N)."""
    if text == "auto" or text.startswith("auto:"):
        most = text.partition(":")[2] or str(AUTO_MAX)
        if not most.isdigit() or int(most) < 1:
            raise CapacityOptionError(f"--headroom {text!r}: expected auto or auto:N with N at least 1")
        return int(most), True
    try:
        count = int(text)
    except ValueError:
        raise CapacityOptionError(f"--headroom {text!r}: expected a number of replicas or auto") from None
    if count < 0:
        raise CapacityOptionError(f"--headroom {text!r}: expected 0 or more replicas")
    return count, False


def parse_timings(items: list[str]) -> NodeTimings:
    """``--node-timing PHASE=DURATION`` (repeatable): a phase of :class:`NodeTimings` in real seconds."""
    phases = {f.name.removesuffix("_s"): f.name for f in fields(NodeTimings)}
    timings = NodeTimings()
    for item in items:
        phase, equals, duration = item.partition("=")
        if not equals or phase not in phases:
            raise CapacityOptionError(f"--node-timing {item!r}: expected PHASE=DURATION with PHASE one of "
                                      f"{', '.join(phases)}")
        try:
            seconds = parse_go_duration(duration, f"--node-timing {phase}")
        except DurationError as exc:
            raise CapacityOptionError(str(exc)) from None
        if seconds < 0:
            raise CapacityOptionError(f"--node-timing {item!r}: a duration cannot be negative")
        timings = replace(timings, **{phases[phase]: seconds})
    return timings


def capacity_config(kind: NodesKind, *, headroom: str | None, time_scale: float, timings: list[str],
                    nodepool: Path | None, node_groups: Path | None, placeholder_image: str,
                    provisioning_time: str | None, replicas: int) -> NodeLayerConfig:
    """The node layer the options ask for, checked against the capacity's shape (``replicas``: the workload's
    replicas at the start)."""
    if time_scale <= 0:
        raise CapacityOptionError(f"--time-scale {time_scale:g}: expected a number above 0")
    count, auto = parse_headroom(headroom) if headroom is not None else (0, False)
    try:
        if kind is NodesKind.KARPENTER:
            shape: dict[str, object] = {"pool": load_nodepool(nodepool or KARPENTER_NODEPOOL)}
        else:
            shape = {"groups": load_node_groups(node_groups or EKSCTL_NODE_GROUPS)}
    except (ShapeError, InstanceTypeError) as exc:
        raise CapacityOptionError(str(exc)) from None
    provisioning = None
    if provisioning_time is not None:
        try:
            provisioning = parse_go_duration(provisioning_time, "--provisioning-time")
        except DurationError as exc:
            raise CapacityOptionError(str(exc)) from None
        if provisioning <= 0:
            raise CapacityOptionError(f"--provisioning-time {provisioning_time!r}: expected a duration above 0")
    config = NodeLayerConfig(kind, time_scale, parse_timings(timings), headroom=count, headroom_auto=auto,
                             placeholder_image=PLACEHOLDER_IMAGES[placeholder_image], provisioning_s=provisioning,
                             **shape)  # type: ignore[arg-type]
    try:
        config.check(replicas)
    except ValueError as exc:
        raise CapacityOptionError(str(exc)) from None
    return config
