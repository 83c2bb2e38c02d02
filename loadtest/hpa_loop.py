"""An HPA controller loop for one Pods metric: read it from the metrics API, decide with :mod:`loadtest.hpa`, and
scale a workload. The decision logic is entirely ``loadtest.hpa.Autoscaler``; this module only does the I/O."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from loadtest.hpa import Autoscaler, FetchError, Observations, Pod, PodValues, Reading
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
        if len(autoscaler.spec.metrics) != 1:
            raise ValueError("HpaLoop drives one Pods metric")
        self.autoscaler = autoscaler
        self.metrics = metrics
        self.workload = workload
        self.namespace = namespace
        self.selector = selector
        self.clock = clock
        self.history: list[SyncRecord] = []

    @property
    def metric_name(self) -> str:
        return self.autoscaler.spec.metrics[0].name

    async def read(self) -> Reading:
        """One metrics fetch as the controller does it: discovery, then the Pods request."""
        try:
            version = await self.metrics.preferred_version()
            values = await self.metrics.pods_metric(version, self.namespace, self.metric_name, self.selector)
        except MetricsApiError as exc:
            return FetchError(str(exc))
        return PodValues.from_quantities(values)

    async def sync(self) -> SyncRecord:
        reading = await self.read()
        now = self.clock()
        spec = self.autoscaler.spec.metrics[0]
        observed = Observations(self.workload.spec_replicas, {spec.key: reading}, self.workload.pods())
        decision = self.autoscaler.reconcile(now, observed)
        if decision.rescale:
            await self.workload.scale(decision.desired)
        proposal = decision.proposals[0] if decision.proposals else None
        current = None if proposal is None or proposal.current_milli is None else proposal.current_milli / 1000
        record = SyncRecord(now, decision.current, decision.desired, current, decision.reason, decision.error)
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
