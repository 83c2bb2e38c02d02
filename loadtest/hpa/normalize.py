"""From the metrics' proposal to the replica count the controller sets: stabilisation, rate limits, bounds
(horizontal.go: ``normalizeDesiredReplicas`` and its behavior variant).

Pure functions over the recommendation and scale-event history; times are seconds on any clock the caller uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from loadtest.hpa.spec import EffectiveRules, PolicyType, SelectPolicy

__all__ = [
    "SCALE_UP_LIMIT_FACTOR",
    "SCALE_UP_LIMIT_MINIMUM",
    "Limit",
    "Recommendation",
    "ScaleEvent",
    "limit_with_behavior",
    "limit_without_behavior",
    "scale_down_floor",
    "scale_up_ceiling",
    "stabilize_with_behavior",
    "stabilize_without_behavior",
]

SCALE_UP_LIMIT_FACTOR = 2
SCALE_UP_LIMIT_MINIMUM = 4


class Limit(StrEnum):
    """The ScalingLimited condition's reason: what bounded the count (``DesiredWithinRange``: nothing)."""

    DESIRED_WITHIN_RANGE = "DesiredWithinRange"
    TOO_MANY_REPLICAS = "TooManyReplicas"
    TOO_FEW_REPLICAS = "TooFewReplicas"
    SCALE_UP_LIMIT = "ScaleUpLimit"
    SCALE_DOWN_LIMIT = "ScaleDownLimit"


@dataclass(frozen=True)
class Recommendation:
    """A raw (unstabilised) desired count, as stored at every normalisation."""

    replicas: int
    at: float


@dataclass(frozen=True)
class ScaleEvent:
    """A rescale the controller made: ``change`` > 0 added pods, < 0 removed them."""

    change: int
    at: float


def stabilize_without_behavior(history: Sequence[Recommendation], now: float, desired: int, window: float) -> int:
    """Downscale stabilisation only: the highest of ``desired`` and the recommendations within ``window``.

    A recommendation exactly ``window`` seconds old still counts.
    """
    cutoff = now - window
    return max([desired, *(r.replicas for r in history if r.at >= cutoff)])


def stabilize_with_behavior(
    history: Sequence[Recommendation], now: float, desired: int, current: int, up_window: float, down_window: float
) -> int:
    """``current`` clamped to [lowest recent, highest recent] recommendation, ``desired`` included in both.

    Only recommendations strictly newer than each window's cutoff count, so a window of 0 looks at ``desired`` alone.
    """
    up_cutoff, down_cutoff = now - up_window, now - down_window
    lowest = min([desired, *(r.replicas for r in history if r.at > up_cutoff)])
    highest = max([desired, *(r.replicas for r in history if r.at > down_cutoff)])
    return min(max(current, lowest), highest)


def limit_without_behavior(current: int, desired: int, min_replicas: int, max_replicas: int) -> tuple[int, Limit]:
    """Clamp to [min, max] and to ``max(2 x current, 4)``."""
    up_limit = max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM)
    ceiling, reason = (max_replicas, Limit.TOO_MANY_REPLICAS)
    if max_replicas > up_limit:
        ceiling, reason = up_limit, Limit.SCALE_UP_LIMIT
    if desired < min_replicas:
        return min_replicas, Limit.TOO_FEW_REPLICAS
    if desired > ceiling:
        return ceiling, reason
    return desired, Limit.DESIRED_WITHIN_RANGE


def _period_start(current: int, events: Sequence[ScaleEvent], period: float, now: float) -> int:
    """Replicas at the start of the period: undo the changes made strictly within it."""
    cutoff = now - period
    return current - sum(e.change for e in events if e.at > cutoff)


def scale_up_ceiling(current: int, events: Sequence[ScaleEvent], rules: EffectiveRules, now: float) -> int:
    """The most replicas the scale-up policies allow now (``Max``: the most generous policy, ``Min``: the least)."""
    if rules.select_policy is SelectPolicy.DISABLED:
        return current
    allowed = []
    for policy in rules.policies:
        start = _period_start(current, events, policy.period_seconds, now)
        if policy.type is PolicyType.PODS:
            allowed.append(start + policy.value)
        else:  # rounded up, so that a small percentage can still add a pod
            allowed.append(math.ceil(float(start) * (1 + policy.value / 100)))
    return min(allowed) if rules.select_policy is SelectPolicy.MIN else max(allowed)


def scale_down_floor(current: int, events: Sequence[ScaleEvent], rules: EffectiveRules, now: float) -> int:
    """The fewest replicas the scale-down policies allow now (``Max``: the largest drop, ``Min``: the smallest)."""
    if rules.select_policy is SelectPolicy.DISABLED:
        return current
    allowed = []
    for policy in rules.policies:
        start = _period_start(current, events, policy.period_seconds, now)
        if policy.type is PolicyType.PODS:
            allowed.append(start - policy.value)
        else:
            allowed.append(int(float(start) * (1 - policy.value / 100)))  # truncated toward zero
    return max(allowed) if rules.select_policy is SelectPolicy.MIN else min(allowed)


def limit_with_behavior(
    current: int,
    desired: int,
    min_replicas: int,
    max_replicas: int,
    up: EffectiveRules,
    down: EffectiveRules,
    events: Sequence[ScaleEvent],
    now: float,
) -> tuple[int, Limit]:
    """Apply the scaling policies of the direction ``desired`` lies in, and the bound on that side."""
    if desired > current:
        ceiling = max(scale_up_ceiling(current, events, up, now), current)
        allowed, reason = (max_replicas, Limit.TOO_MANY_REPLICAS)
        if max_replicas > ceiling:
            allowed, reason = ceiling, Limit.SCALE_UP_LIMIT
        if desired > allowed:
            return allowed, reason
    elif desired < current:
        floor = min(scale_down_floor(current, events, down, now), current)
        allowed, reason = (min_replicas, Limit.TOO_FEW_REPLICAS)
        if min_replicas < floor:
            allowed, reason = floor, Limit.SCALE_DOWN_LIMIT
        if desired < allowed:
            return allowed, reason
    return desired, Limit.DESIRED_WITHIN_RANGE
