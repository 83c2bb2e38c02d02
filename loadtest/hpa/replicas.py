"""Replica proposals per metric, and how several proposals combine (replica_calculator.go and
``computeReplicasForMetrics`` in horizontal.go).

Values are integer milli-units; ratios are floats computed the way the controller does (each integer converted to
a float, then divided), so results agree with it at the tolerance edges.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from loadtest.hpa.observe import (
    ExternalValues,
    FetchError,
    ObjectValue,
    Observations,
    Pod,
    PodPhase,
    PodValues,
    Reading,
    ResourceSample,
    ResourceUsage,
)
from loadtest.hpa.spec import ControllerConfig, MetricSpec, MetricType, TargetType, Tolerances

__all__ = [
    "MAX_INT32",
    "MAX_INT64",
    "NO_PODS",
    "NO_POD_METRICS",
    "Combined",
    "MetricProposal",
    "combine",
    "propose",
]

MAX_INT32 = 2**31 - 1
MIN_INT32 = -(2**31)
MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)

NO_PODS = "no pods returned by selector while calculating replica count"
NO_POD_METRICS = "did not receive metrics for targeted pods (pods might be unready)"
NO_MATCHING_METRICS = "no metrics returned matched known pods"


class _MetricFailed(Exception):
    pass


@dataclass(frozen=True)
class MetricProposal:
    """One metric's outcome: a replica count, or the error that made it invalid.

    ``current_milli`` is what ``status.currentMetrics`` would show: the average for Pods metrics and AverageValue
    targets, the value (External: the sum) for Value targets. ``ratio`` is usage / target as first computed.
    """

    metric: MetricSpec
    replicas: int | None = None
    current_milli: int | None = None
    ratio: float | None = None
    error: str | None = None
    utilization: int | None = None  # Resource Utilization targets: status ... current.averageUtilization


def propose(
    metric: MetricSpec, reading: Reading | None, observed: Observations, tolerances: Tolerances,
    now: float = 0.0, config: ControllerConfig | None = None,
) -> MetricProposal:
    """The replica count this metric asks for, given the reading the metrics API gave for it. ``now`` and
    ``config``'s cpu periods matter to Resource metrics on cpu only (which pods count as ready)."""
    try:
        return _propose(metric, reading, observed, tolerances, _CpuReadiness(now, config or ControllerConfig()))
    except _MetricFailed as failure:
        return MetricProposal(metric, error=str(failure))


def _propose(metric: MetricSpec, reading: Reading | None, observed: Observations, tol: Tolerances,
             cpu: _CpuReadiness) -> MetricProposal:
    target = metric.target_milli
    if metric.type is MetricType.RESOURCE:
        try:
            return _resource_proposal(metric, reading, observed, tol, cpu)
        except _MetricFailed as failure:  # the controller's wording (computeStatusForResourceMetricGeneric)
            what = "utilization" if metric.target_type is TargetType.UTILIZATION else "usage"
            raise _MetricFailed(f"failed to get {metric.name} {what}: {failure}") from None
    if reading is None or isinstance(reading, FetchError):
        detail = "no reading was observed" if reading is None else reading.message
        what = "external metric" if metric.type is MetricType.EXTERNAL else "metric"
        raise _MetricFailed(f"unable to get {what} {metric.name}: {detail}")

    if metric.type is MetricType.PODS:
        values = _expect(reading, PodValues, metric).milli_by_pod
        if not values:
            raise _MetricFailed(f"unable to get metric {metric.name}: no metrics returned from custom metrics API")
        replicas, usage, ratio = _pods_replicas(values, observed.pods, target, observed.spec_replicas, tol)
        return MetricProposal(metric, replicas, usage, ratio)


    if metric.type is MetricType.OBJECT:
        usage = _expect(reading, ObjectValue, metric).milli
    else:
        items = _expect(reading, ExternalValues, metric).milli_items
        if not items:
            raise _MetricFailed(
                f"unable to get external metric {metric.name}: no metrics returned from external metrics API"
            )
        usage = _saturating_sum(items)

    if metric.target_type is TargetType.VALUE:
        ratio = float(usage) / float(target)
        replicas = _value_replicas(ratio, observed.spec_replicas, observed.pods, tol)
        return MetricProposal(metric, replicas, usage, ratio)
    return _average_value_proposal(metric, usage, observed.status, tol)


_R = TypeVar("_R", PodValues, ObjectValue, ExternalValues, ResourceUsage)


def _expect(reading: Reading, kind: type[_R], metric: MetricSpec) -> _R:
    if not isinstance(reading, kind):
        raise TypeError(f"metric {metric.key!r} is a {metric.type} metric; it needs a {kind.__name__} reading")
    return reading


@dataclass(frozen=True)
class _CpuReadiness:
    """The controller's extra readiness rules for cpu (groupPods): a pod with a sample is still unready when it
    has no Ready condition or start time; within the cpu initialisation period after its start, when it is not
    Ready or its sample's window began before it became Ready; after that, when it is not Ready and has never
    been (it became unready within the initial readiness delay after its start)."""

    now: float
    config: ControllerConfig

    def rule(self, resource: str, samples: Mapping[str, ResourceSample]) -> Callable[[Pod], bool] | None:
        """``pod -> unready`` for a Resource metric on cpu; ``None`` (no extra rule) for anything else."""
        if resource != "cpu":
            return None
        return lambda pod: self.unready(pod, samples[pod.name])

    def unready(self, pod: Pod, sample: ResourceSample) -> bool:
        if pod.ready is None or pod.start_time is None:
            return True
        if pod.start_time + self.config.cpu_initialization_period_seconds > self.now:
            return not pod.ready or sample.timestamp < pod.ready_since + sample.window_s
        return not pod.ready and pod.start_time + self.config.initial_readiness_delay_seconds > pod.ready_since


def _group_pods(metrics: dict[str, int], pods: Sequence[Pod], unready_with_sample: Callable[[Pod], bool] | None
                ) -> tuple[int, list[str], list[str]]:
    """(ready count, unready, missing) as groupPods sorts the target's pods; the metrics of ignored (deleting,
    Failed) and unready (Pending, or failing ``unready_with_sample``) pods are removed from ``metrics``."""
    ready_count = 0
    unready: list[str] = []
    missing: list[str] = []
    for pod in pods:
        if pod.deleting or pod.phase is PodPhase.FAILED:
            metrics.pop(pod.name, None)  # ignored altogether
        elif pod.phase is PodPhase.PENDING:
            metrics.pop(pod.name, None)
            unready.append(pod.name)
        elif pod.name not in metrics:
            missing.append(pod.name)
        elif unready_with_sample is not None and unready_with_sample(pod):
            metrics.pop(pod.name)
            unready.append(pod.name)
        else:
            ready_count += 1
    return ready_count, unready, missing


def _pods_replicas(
    values: Mapping[str, int], pods: Sequence[Pod], target: int, current: int, tol: Tolerances,
    unready_with_sample: Callable[[Pod], bool] | None = None,
) -> tuple[int, int, float]:
    """(replicas, usage, ratio) for a Pods metric (and a Resource AverageValue target), with the missing/unready
    pod rules of ``calcPlainMetricReplicas``."""
    if not pods:
        raise _MetricFailed(NO_PODS)
    metrics = dict(values)
    ready_count, unready, missing = _group_pods(metrics, pods, unready_with_sample)
    if not metrics:
        raise _MetricFailed(NO_POD_METRICS)

    usage = _average(metrics.values())
    ratio = float(usage) / float(target)
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        replicas = current if tol.within(ratio) else _ceil_replicas(ratio * float(ready_count))
        return replicas, usage, ratio

    # Assume the worst for the direction we are heading: missing pods at target on the way down, idle on the way
    # up (a ratio of exactly 1 counts as "up"); unready pods idle on the way up.
    for name in missing:
        metrics[name] = target if ratio < 1.0 else 0
    if scale_up_with_unready:
        metrics.update(dict.fromkeys(unready, 0))
    new_ratio = float(_average(metrics.values())) / float(target)
    flipped = (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio)
    if tol.within(new_ratio) or flipped:
        return current, usage, ratio
    replicas = _ceil_replicas(new_ratio * float(len(metrics)))
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current, usage, ratio
    return replicas, usage, ratio


def _resource_proposal(metric: MetricSpec, reading: Reading | None, observed: Observations, tol: Tolerances,
                       cpu: _CpuReadiness) -> MetricProposal:
    if reading is None or isinstance(reading, FetchError):
        detail = "no reading was observed" if reading is None else reading.message
        raise _MetricFailed(f"unable to get metrics for resource {metric.name}: {detail}")
    samples = _expect(reading, ResourceUsage, metric).by_pod
    if not samples:
        raise _MetricFailed(f"unable to get metrics for resource {metric.name}: no metrics returned from resource "
                            "metrics API")
    if metric.target_type is TargetType.AVERAGE_VALUE:
        values = {name: s.milli for name, s in samples.items()}
        replicas, usage, ratio = _pods_replicas(values, observed.pods, metric.target_milli, observed.spec_replicas,
                                                tol, cpu.rule(metric.name, samples))
        return MetricProposal(metric, replicas, usage, ratio)
    return _utilization_proposal(metric, samples, observed, tol, cpu)


def _utilization_proposal(metric: MetricSpec, samples: Mapping[str, ResourceSample], observed: Observations,
                          tol: Tolerances, cpu: _CpuReadiness) -> MetricProposal:
    """A Resource Utilization target (GetResourceReplicas): ``100 * sum(usage) / sum(requests)`` over the pods
    with both, truncated, against the target percentage; missing pods at ``max(100, target)`` % of their request
    on the way down and idle on the way up, unready pods idle on the way up."""
    pods, target, current = observed.pods, metric.target_milli, observed.spec_replicas
    if not pods:
        raise _MetricFailed(NO_PODS)
    metrics = {name: s.milli for name, s in samples.items()}
    ready_count, unready, missing = _group_pods(metrics, pods, cpu.rule(metric.name, samples))
    requests = _pod_requests(pods, metric.name)
    if not metrics:
        raise _MetricFailed(NO_POD_METRICS)
    ratio, utilization, average = _utilization(metrics, requests, target)
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        replicas = current if tol.within(ratio) else _ceil_replicas(ratio * float(ready_count))
        return MetricProposal(metric, replicas, average, ratio, utilization=utilization)
    if ratio < 1.0:
        for name in missing:
            metrics[name] = requests[name] * max(100, target) // 100
    elif ratio > 1.0:
        metrics.update(dict.fromkeys(missing, 0))
    if scale_up_with_unready:
        metrics.update(dict.fromkeys(unready, 0))
    new_ratio, _, _ = _utilization(metrics, requests, target)
    flipped = (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio)
    replicas = current
    if not (tol.within(new_ratio) or flipped):
        replicas = _ceil_replicas(new_ratio * float(len(metrics)))
        if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
            replicas = current
    return MetricProposal(metric, replicas, average, ratio, utilization=utilization)


def _pod_requests(pods: Sequence[Pod], resource: str) -> dict[str, int]:
    """Each pod's summed container requests (calculatePodRequests); a container without one fails the metric."""
    requests: dict[str, int] = {}
    for pod in pods:
        total = 0
        for container, container_requests in pod.containers:
            if resource not in container_requests:
                raise _MetricFailed(f"missing request for {resource} in container {container} of Pod {pod.name}")
            total += container_requests[resource]
        requests[pod.name] = total
    return requests


def _utilization(metrics: Mapping[str, int], requests: Mapping[str, int], target: int) -> tuple[float, int, int]:
    """(ratio, utilization %, average milli) over the pods with a request (GetResourceUtilizationRatio)."""
    matched = [name for name in metrics if name in requests]
    total_requests = sum(requests[n] for n in matched)
    if total_requests == 0:
        raise _MetricFailed(NO_MATCHING_METRICS)
    total = sum(metrics[n] for n in matched)
    utilization = total * 100 // total_requests
    return float(utilization) / float(target), utilization, total // len(matched)


def _value_replicas(ratio: float, current: int, pods: Sequence[Pod], tol: Tolerances) -> int:
    """Object/External Value targets: scale the count of Running+Ready pods by the ratio (``ceil(ratio)`` at 0)."""
    if current == 0:
        return _ceil_replicas(ratio)
    if tol.within(ratio):
        return current
    if not pods:
        raise _MetricFailed(f"unable to calculate ready pods: {NO_PODS}")
    ready = sum(1 for pod in pods if pod.phase is PodPhase.RUNNING and pod.ready)
    return _ceil_replicas(ratio * float(ready))


def _average_value_proposal(metric: MetricSpec, usage: int, status: int, tol: Tolerances) -> MetricProposal:
    """Object/External AverageValue targets: ``ceil(usage / target)``, judged against ``status.replicas``."""
    target = metric.target_milli
    ratio = _ieee_div(float(usage), float(target) * float(status))
    replicas = status if tol.within(ratio) else _ceil_replicas(float(usage) / float(target))
    average = math.ceil(float(usage) / float(status)) if status else None
    return MetricProposal(metric, replicas, average, ratio)


def _ieee_div(numerator: float, denominator: float) -> float:
    """Float division with Go's results for a zero denominator (+-Inf, NaN) instead of an exception."""
    if denominator:
        return numerator / denominator
    if numerator == 0 or math.isnan(numerator):
        return math.nan
    return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)


def _average(values: Iterable[int]) -> int:
    """Integer mean, truncated toward zero like Go's int64 division."""
    items = list(values)
    total = sum(items)
    quotient = abs(total) // len(items)
    return quotient if total >= 0 else -quotient


def _saturating_sum(values: Iterable[int]) -> int:
    total = 0
    for value in values:
        total = min(MAX_INT64, max(MIN_INT64, total + value))
    return total


def _ceil_replicas(value: float) -> int:
    """``ceil`` into an int32 replica count, saturating instead of overflowing."""
    if math.isnan(value):
        raise ValueError("replica computation produced NaN")
    if value >= MAX_INT32:
        return MAX_INT32
    if value <= MIN_INT32:
        return MIN_INT32
    return math.ceil(value)


@dataclass(frozen=True)
class Combined:
    """The metrics' joint proposal. ``replicas`` is None when the controller would not scale this sync."""

    replicas: int | None
    metric: MetricSpec | None
    error: str | None
    first_failure: MetricProposal | None


def combine(proposals: Sequence[MetricProposal], spec_replicas: int) -> Combined:
    """Maximum of the valid proposals; refused when all fail, or when some fail and the rest would scale down.

    The metric named is the first with the maximum, except that while the maximum so far is 0 every later valid
    proposal takes its place (the controller's ``replicas == 0 || proposal > replicas``): when all ask for 0 replicas,
    the last one is named.
    """
    failed = [p for p in proposals if p.replicas is None]
    first_failure = failed[0] if failed else None
    error = None
    if first_failure is not None:
        counts = f"{len(failed)} invalid out of {len(proposals)}"
        error = f"invalid metrics ({counts}), first error is: {first_failure.error}"
    replicas, metric = 0, None
    for proposal in proposals:
        if proposal.replicas is not None and (replicas == 0 or proposal.replicas > replicas):
            replicas, metric = proposal.replicas, proposal.metric
    if metric is None:
        return Combined(None, None, error, first_failure)
    if failed and replicas < spec_replicas:
        return Combined(None, None, error, first_failure)
    return Combined(replicas, metric, error, first_failure)
