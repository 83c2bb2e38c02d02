"""Single-flight instant queries, with reuse no longer than Prometheus' own scrape interval.

Every HPA asks again every 15 s, and many HPAs (and adapter replicas behind one Service) ask the same thing.
Identical queries in flight share one Prometheus call; its error is shared too, but never kept. A finished
result may be reused for ``ttl_s``, capped by the smallest scrape interval of Prometheus' active targets: a
reused value is then never older than the data could be anyway. While that interval is unknown (the targets
API failed, e.g. behind a Thanos Querier, or lists no targets) nothing is reused beyond coalescing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from adapter.prometheus.client import PrometheusClient, PrometheusError, Sample
from adapter.prometheus.coalescing import CoalescingCache

log = logging.getLogger("adapter.querycache")

QueryObserver = Callable[[str, float, PrometheusError | None], None]
"""Told about every call that reached Prometheus: (label, seconds, error or None)."""


@dataclass
class CacheStats:
    hits: int = 0  # answered from a kept result
    coalesced: int = 0  # joined a query already in flight
    misses: int = 0  # sent a query to Prometheus


class QueryCache:
    def __init__(self, client: PrometheusClient, *, ttl_s: float = 5.0, max_entries: int = 10_000,
                 observe: QueryObserver | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.ttl_s = max(ttl_s, 0.0)
        self.scrape_interval_s: float | None = None  # None: unknown, so no reuse
        self._observe = observe
        self._cache: CoalescingCache[list[Sample]] = CoalescingCache(lambda _: self.effective_ttl_s, max_entries,
                                                                     clock)
        self._unknown_logged = False

    @property
    def effective_ttl_s(self) -> float:
        """How long a result is reused now: 0 while the scrape interval is unknown."""
        if self.scrape_interval_s is None:
            return 0.0
        return min(self.ttl_s, self.scrape_interval_s)

    @property
    def stats(self) -> CacheStats:
        return CacheStats(self._cache.hits, self._cache.coalesced, self._cache.misses)

    def __len__(self) -> int:
        return len(self._cache)

    async def query(self, promql: str, label: str = "") -> list[Sample]:
        """An instant query at "now"; ``label`` names the asker (its rule) in the observer's records."""
        return list(await self._cache.get(promql, lambda: self._fetch(promql, label)))

    async def _fetch(self, promql: str, label: str) -> list[Sample]:
        began = time.perf_counter()
        error: PrometheusError | None = None
        try:
            return await self.client.query(promql)
        except PrometheusError as exc:
            error = exc
            raise
        finally:
            if self._observe is not None:
                self._observe(label, time.perf_counter() - began, error)

    def set_scrape_interval(self, seconds: float | None) -> None:
        if seconds is None:
            if not self._unknown_logged:
                log.warning("Prometheus' scrape interval is unknown: query results are shared only while in "
                            "flight, never reused")
                self._unknown_logged = True
            self._cache.clear()
        else:
            if self._unknown_logged or self.scrape_interval_s != seconds:
                log.info("query results reused for up to %gs (scrape interval %gs, --query-cache-ttl %gs)",
                         min(self.ttl_s, seconds), seconds, self.ttl_s)
            self._unknown_logged = False
            if self.scrape_interval_s is not None and seconds < self.scrape_interval_s:
                self._cache.clear()  # kept under the old, longer cap
        self.scrape_interval_s = seconds

    async def refresh_freshness(self, intervals: Sequence[float] | None = None) -> None:
        """Take the smallest of ``intervals`` (Prometheus' scrape intervals as discovery just read them, empty
        when unknown) as the reuse cap; ``None`` reads them from Prometheus here."""
        if self.ttl_s == 0:
            return  # coalescing only: the interval would change nothing
        if intervals is None:
            try:
                intervals = await self.client.scrape_intervals()
            except PrometheusError as exc:
                log.debug("cannot read scrape intervals: %s", exc)
                intervals = []
        self.set_scrape_interval(min(intervals) if intervals else None)

