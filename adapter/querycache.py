"""Single-flight instant queries, with reuse no longer than Prometheus' own scrape interval.

Every HPA asks again every 15 s, and many HPAs (and adapter replicas behind one Service) ask the same thing.
Identical queries in flight share one Prometheus call; its error is shared too, but never kept. A finished
result may be reused for ``ttl_s``, capped by the smallest scrape interval of Prometheus' active targets: a
reused value is then never older than the data could be anyway. While that interval is unknown (the targets
API failed, e.g. behind a Thanos Querier, or lists no targets) nothing is reused beyond coalescing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from adapter.prometheus import PrometheusClient, PrometheusError, Sample

log = logging.getLogger("adapter.querycache")

QueryObserver = Callable[[str, float, PrometheusError | None], None]
"""Told about every call that reached Prometheus: (label, seconds, error or None)."""


@dataclass
class CacheStats:
    hits: int = 0  # answered from a kept result
    coalesced: int = 0  # joined a query already in flight
    misses: int = 0  # sent a query to Prometheus


@dataclass(frozen=True)
class _Entry:
    samples: list[Sample]
    expires: float


class QueryCache:
    def __init__(self, client: PrometheusClient, *, ttl_s: float = 5.0, max_entries: int = 10_000,
                 observe: QueryObserver | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.ttl_s = max(ttl_s, 0.0)
        self.max_entries = max_entries
        self.stats = CacheStats()
        self.scrape_interval_s: float | None = None  # None: unknown, so no reuse
        self._observe = observe
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._inflight: dict[str, asyncio.Task[list[Sample]]] = {}
        self._unknown_logged = False

    @property
    def effective_ttl_s(self) -> float:
        """How long a result is reused now: 0 while the scrape interval is unknown."""
        if self.scrape_interval_s is None:
            return 0.0
        return min(self.ttl_s, self.scrape_interval_s)

    def __len__(self) -> int:
        return len(self._entries)

    async def query(self, promql: str, label: str = "") -> list[Sample]:
        """An instant query at "now"; ``label`` names the asker (its rule) in the observer's records."""
        entry = self._entries.get(promql)
        if entry is not None:
            if entry.expires > self._clock():
                self.stats.hits += 1
                return list(entry.samples)
            del self._entries[promql]
        task = self._inflight.get(promql)
        if task is not None and not task.cancelled():
            self.stats.coalesced += 1
        else:
            self.stats.misses += 1
            task = asyncio.get_running_loop().create_task(self._fetch(promql, label))
            self._inflight[promql] = task
            task.add_done_callback(_retrieve)
        # shield: a caller that goes away (client disconnect) must not cancel the query others wait for
        return list(await asyncio.shield(task))

    async def _fetch(self, promql: str, label: str) -> list[Sample]:
        started = self._clock()
        began = time.perf_counter()
        error: PrometheusError | None = None
        try:
            samples = await self.client.query(promql)
        except PrometheusError as exc:
            error = exc
            raise
        finally:
            self._inflight.pop(promql, None)
            if self._observe is not None:
                self._observe(label, time.perf_counter() - began, error)
        ttl = self.effective_ttl_s
        if ttl > 0:
            self._store(promql, _Entry(samples, started + ttl))  # counted from when the query was sent
        return samples

    def _store(self, promql: str, entry: _Entry) -> None:
        now = self._clock()
        # Entries are inserted roughly in expiry order: drop expired ones from the front as new ones arrive.
        while self._entries:
            oldest_key = next(iter(self._entries))
            if self._entries[oldest_key].expires > now and len(self._entries) < self.max_entries:
                break
            del self._entries[oldest_key]
        self._entries.pop(promql, None)
        self._entries[promql] = entry

    def set_scrape_interval(self, seconds: float | None) -> None:
        if seconds is None:
            if not self._unknown_logged:
                log.warning("Prometheus' scrape interval is unknown: query results are shared only while in "
                            "flight, never reused")
                self._unknown_logged = True
            self._entries.clear()
        else:
            if self._unknown_logged or self.scrape_interval_s != seconds:
                log.info("query results reused for up to %gs (scrape interval %gs, --query-cache-ttl %gs)",
                         min(self.ttl_s, seconds), seconds, self.ttl_s)
            self._unknown_logged = False
            if self.scrape_interval_s is not None and seconds < self.scrape_interval_s:
                self._entries.clear()  # kept under the old, longer cap
        self.scrape_interval_s = seconds

    async def refresh_freshness(self) -> None:
        """Re-read the smallest scrape interval from Prometheus (run at each discovery relist)."""
        if self.ttl_s == 0:
            return  # coalescing only: the interval would change nothing
        try:
            intervals = await self.client.scrape_intervals()
        except PrometheusError as exc:
            log.debug("cannot read scrape intervals: %s", exc)
            intervals = []
        self.set_scrape_interval(intervals[0] if intervals else None)


def _retrieve(task: asyncio.Task[list[Sample]]) -> None:
    """Mark the exception seen when every waiter left, so asyncio does not log it as never retrieved."""
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.exception()
