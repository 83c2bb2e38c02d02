"""An HPA controller loop for Pods metrics: read each from the metrics API, decide with :mod:`loadtest.hpa`, and
scale a workload. The decision logic is entirely ``loadtest.hpa.Autoscaler`` (several metrics: the largest
proposal, as the controller takes); this module only does the I/O."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from loadtest.hpa import Autoscaler, FetchError, MetricType, Observations, Pod, PodValues, Reading
from loadtest.metrics_api import CustomMetricsClient, MetricsApiError
from loadtest.timeline import SyncRecord

__all__ = ["HpaLoop", "Workload"]


class Workload(Protocol):
    """The scale target: ``spec_replicas`` is what was last asked for, ``pods()`` what its selector matches."""

    @property
    def spec_replicas(self) -> int: ...

    def pods(self) -> tuple[Pod, ...]: ...

    async def scale(self, replicas: int) -> None: ...


class HpaLoop:
    def __init__(self, autoscaler: Autoscaler, metrics: CustomMetricsClient, workload: Workload, *,
                 namespace: str, selector: str, clock: Callable[[], float]) -> None:
        if not autoscaler.spec.metrics or any(m.type is not MetricType.PODS for m in autoscaler.spec.metrics):
            raise ValueError("HpaLoop drives Pods metrics")
        self.autoscaler = autoscaler
        self.metrics = metrics
        self.workload = workload
        self.namespace = namespace
        self.selector = selector
        self.clock = clock
        self.history: list[SyncRecord] = []

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.autoscaler.spec.metrics)

    async def read(self) -> dict[str, Reading]:
        """One fetch as the controller does it: discovery, then the Pods request of each metric (by its key)."""
        try:
            version = await self.metrics.preferred_version()
        except MetricsApiError as exc:
            return {m.key: FetchError(str(exc)) for m in self.autoscaler.spec.metrics}
        readings: dict[str, Reading] = {}
        for metric in self.autoscaler.spec.metrics:
            try:
                values = await self.metrics.pods_metric(version, self.namespace, metric.name, self.selector)
            except MetricsApiError as exc:
                readings[metric.key] = FetchError(str(exc))
            else:
                readings[metric.key] = PodValues.from_quantities(values)
        return readings

    async def sync(self) -> SyncRecord:
        readings = await self.read()
        now = self.clock()
        observed = Observations(self.workload.spec_replicas, readings, self.workload.pods())
        decision = self.autoscaler.reconcile(now, observed)
        if decision.rescale:
            await self.workload.scale(decision.desired)
        seen = {p.metric.name: None if p.current_milli is None else p.current_milli / 1000
                for p in decision.proposals}
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
