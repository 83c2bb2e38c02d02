"""An HPA controller loop: read each metric from the metrics APIs, decide with :mod:`loadtest.hpa`, and scale a
workload. The decision logic is entirely ``loadtest.hpa.Autoscaler`` (several metrics: the largest proposal, as the
controller takes; scale to zero and back when ``minReplicas`` is 0); this module only does the I/O.

Pods metrics come from custom.metrics.k8s.io for the workload's pods; Object metrics from custom.metrics.k8s.io for
the described object (its ``Kind`` mapped to a resource by ``object_resources``); External metrics from
external.metrics.k8s.io with the metric's selector. Object and External metrics are the ones that can wake a
workload at 0 replicas.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from loadtest.hpa import (
    Autoscaler,
    Decision,
    ExternalValues,
    FetchError,
    MetricSpec,
    MetricType,
    ObjectValue,
    Observations,
    Pod,
    PodPhase,
    PodValues,
    Reading,
)
from loadtest.hpa.metrics_api import CustomMetricsClient, MetricsApiError
from loadtest.hpa.record import SyncRecord

__all__ = ["OBJECT_RESOURCES", "HpaLoop", "Workload", "WorkloadPod"]

# Kind -> the resource (with its API group) in a custom.metrics.k8s.io object path, as the controller's RESTMapper
# resolves it. A CRD (an InferencePool, say) is added with ``HpaLoop(object_resources=...)``.
OBJECT_RESOURCES: Mapping[str, str] = {
    "Namespace": "namespaces",
    "Pod": "pods",
    "Service": "services",
    "Deployment": "deployments.apps",
    "StatefulSet": "statefulsets.apps",
    "ReplicaSet": "replicasets.apps",
}


class WorkloadPod(Protocol):
    """A pod as the scale target reports it: its name and its phase, as the Kubernetes API writes it (``Running``,
    ``Pending``)."""

    @property
    def name(self) -> str: ...

    @property
    def phase(self) -> str: ...


class Workload(Protocol):
    """The scale target: ``spec_replicas`` is what was last asked for, ``pods()`` what its selector matches."""

    @property
    def spec_replicas(self) -> int: ...

    def pods(self) -> Sequence[WorkloadPod]: ...

    async def scale(self, replicas: int) -> None: ...


class HpaLoop:
    def __init__(self, autoscaler: Autoscaler, metrics: CustomMetricsClient, workload: Workload, *,
                 namespace: str, selector: str, clock: Callable[[], float],
                 object_resources: Mapping[str, str] | None = None) -> None:
        self.object_resources = {**OBJECT_RESOURCES, **(object_resources or {})}
        for metric in autoscaler.spec.metrics:
            if metric.type is MetricType.RESOURCE:
                raise ValueError(f"metric {metric.name!r}: HpaLoop reads Pods, Object and External metrics; a "
                                 "Resource metric comes from metrics.k8s.io, which it does not read")
            kind = metric.described_object.partition("/")[0]
            if metric.type is MetricType.OBJECT and kind not in self.object_resources:
                raise ValueError(f"metric {metric.name!r}: no resource known for kind {kind!r}; pass "
                                 f"object_resources={{{kind!r}: '<plural>.<group>'}}")
        self.autoscaler = autoscaler
        self.metrics = metrics
        self.workload = workload
        self.namespace = namespace
        self.selector = selector
        self.clock = clock
        self.history: list[SyncRecord] = []
        self.last_decision: Decision | None = None

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.autoscaler.spec.metrics)

    async def read(self) -> dict[str, Reading]:
        """One fetch as the controller does it: discovery for the custom metrics API (when a Pods or Object metric
        needs it), then each metric's request (by its key)."""
        version: str | FetchError | None = None
        if any(m.type is not MetricType.EXTERNAL for m in self.autoscaler.spec.metrics):
            try:
                version = await self.metrics.preferred_version()
            except MetricsApiError as exc:
                version = FetchError(str(exc))
        readings: dict[str, Reading] = {}
        for metric in self.autoscaler.spec.metrics:
            if isinstance(version, FetchError) and metric.type is not MetricType.EXTERNAL:
                readings[metric.key] = version
                continue
            try:
                # An External metric is read even when discovery failed: it needs no custom metrics API version.
                readings[metric.key] = await self._read_one(metric, version if isinstance(version, str) else "")
            except MetricsApiError as exc:
                readings[metric.key] = FetchError(str(exc))
        return readings

    async def _read_one(self, metric: MetricSpec, version: str) -> Reading:
        if metric.type is MetricType.PODS:
            return PodValues.from_quantities(await self.metrics.pods_metric(version, self.namespace, metric.name,
                                                                             self.selector))
        if metric.type is MetricType.OBJECT:
            kind, _, name = metric.described_object.partition("/")
            return ObjectValue.from_quantity(await self.metrics.object_metric(
                version, self.namespace, self.object_resources[kind], name, metric.name, metric.selector))
        return ExternalValues.from_quantities(await self.metrics.external_metric(self.namespace, metric.name,
                                                                                  metric.selector))

    async def sync(self) -> SyncRecord:
        readings = await self.read()
        now = self.clock()
        pods = tuple(Pod(p.name, PodPhase(p.phase)) for p in self.workload.pods())
        observed = Observations(self.workload.spec_replicas, readings, pods)
        decision = self.autoscaler.reconcile(now, observed)
        self.last_decision = decision
        if decision.rescale:
            await self.workload.scale(decision.desired)
        seen = {m.name: _value_seen(m, readings.get(m.key), decision) for m in self.autoscaler.spec.metrics}
        record = SyncRecord(now, decision.current, decision.desired, seen.get(self.metric_names[0]), decision.reason,
                            decision.error, readings=seen)
        self.history.append(record)
        return record

    async def run(self, period_s: float, on_sync: Callable[[SyncRecord], None] | None = None) -> None:
        """Sync at once, then every ``period_s`` (on a fixed schedule, like the controller's resync)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        n = 0
        while True:
            record = await self.sync()
            if on_sync is not None:
                on_sync(record)
            n += 1
            delay = start + n * period_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)


def _value_seen(metric: MetricSpec, reading: Reading | None, decision: Decision) -> float | None:
    """What the sync read for ``metric``, in its units: an Object metric's value, an External metric's sum (what the
    controller compares with a Value target, or divides by the replicas for an AverageValue one, also at 0
    replicas), a Pods metric's average over the pods the controller counted; ``None`` when it read nothing."""
    if isinstance(reading, ExternalValues):
        return sum(reading.milli_items) / 1000 if reading.milli_items else None
    if isinstance(reading, ObjectValue):
        return reading.milli / 1000
    proposal = next((p for p in decision.proposals if p.metric.key == metric.key), None)
    return None if proposal is None or proposal.current_milli is None else proposal.current_milli / 1000
