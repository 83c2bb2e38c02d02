"""Resource metrics (cpu/memory utilisation of a target's pods) the way the HPA controller computes them (pure).

Inputs are what the controller reads: a ``PodMetricsList`` from ``metrics.k8s.io`` (usage per container) and the
pods' specs (requests per container). ``utilization = 100 * sum(usage) / sum(requests)`` over the pods that have
both, truncated to an integer; ``ratio = utilization / target``. A pod without metrics counts as idle when scaling
up and at ``max(100, target)`` % of its request when scaling down (spec k8s-metrics-api, Resource Utilization).
Readiness and the cpu initialisation period are not modelled: every pod given is taken as Running and Ready.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadtest.hpa.spec import Tolerances, milli

NO_METRICS = "no metrics returned matched known pods"


class ResourceMetricError(ValueError):
    """The controller's error for this metric: it keeps the current scale (and reports the condition)."""


@dataclass(frozen=True)
class ResourceDecision:
    replicas: int
    utilization: int  # percent of requests, as status.currentMetrics[].resource.current.averageUtilization
    ratio: float
    average_milli: int  # status ... current.averageValue (milli)


def usage_by_pod(pod_metrics_list: Mapping[str, Any], resource: str) -> dict[str, int]:
    """Milli-units per pod: the sum over its containers of ``usage[resource]`` (``PodMetricsList`` JSON)."""
    usage: dict[str, int] = {}
    for item in pod_metrics_list["items"]:
        usage[item["metadata"]["name"]] = sum(milli(c["usage"][resource]) for c in item["containers"])
    return usage


def requests_by_pod(pods: Sequence[Mapping[str, Any]], resource: str) -> dict[str, int]:
    """Milli-units per pod: the sum of its containers' requests; a container without one is an error."""
    requests: dict[str, int] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        total = 0
        for container in pod["spec"]["containers"]:
            request = (container.get("resources") or {}).get("requests", {}).get(resource)
            if request is None:
                raise ResourceMetricError(f"missing request for {resource} in container {container['name']} "
                                          f"of pod {name}")
            total += milli(request)
        requests[name] = total
    return requests


def _utilization(usage: Mapping[str, int], requests: Mapping[str, int]) -> tuple[int, int]:
    matched = [name for name in usage if name in requests]
    total_requests = sum(requests[n] for n in matched)
    if total_requests == 0:
        raise ResourceMetricError(NO_METRICS)
    total_usage = sum(usage[n] for n in matched)
    return total_usage * 100 // total_requests, total_usage // len(matched)


def decide(usage: Mapping[str, int], requests: Mapping[str, int], target_utilization: int, current: int,
           tol: Tolerances | None = None) -> ResourceDecision:
    """Replicas for an ``averageUtilization`` target over the pods in ``requests`` (the target's pods)."""
    tol = tol or Tolerances()
    present = {n: v for n, v in usage.items() if n in requests}
    utilization, average = _utilization(present, requests)
    ratio = utilization / target_utilization
    missing = [n for n in requests if n not in present]
    if not missing:
        replicas = current if tol.within(ratio) else math.ceil(ratio * len(present))
        return ResourceDecision(replicas, utilization, ratio, average)
    filled = dict(present)
    for name in missing:
        filled[name] = requests[name] * max(100, target_utilization) // 100 if ratio < 1.0 else 0
    new_utilization, _ = _utilization(filled, requests)
    new_ratio = new_utilization / target_utilization
    flipped = (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio)
    if tol.within(new_ratio) or flipped:
        return ResourceDecision(current, utilization, ratio, average)
    replicas = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        replicas = current
    return ResourceDecision(replicas, utilization, ratio, average)
