"""Relist series every --metrics-relist-interval and swap in a new catalogue; a failed relist keeps the old one.

The look-back window of each relist, unless --metrics-max-age fixes it, is the relist interval plus the longest
scrape interval among Prometheus' active targets (re-read every relist). A window of only the relist interval, as
prometheus-adapter defaults to, misses a series whose newest sample is older than that: always when the scrape
interval is longer than the relist interval, and for a moment every scrape when they are equal (the sample of
the scrape in progress is not stored yet and the previous one has just left the window), so metrics come and go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from yarl import URL

from adapter.background import BackgroundTask
from adapter.prometheus.client import PrometheusClient, PrometheusError
from adapter.rules import Catalogue, RulesConfig
from adapter.rules.catalogue import build_catalogue_from_shapes

log = logging.getLogger("adapter.discovery")

# Prometheus' own default scrape_interval: assumed when the active targets do not say (none, or no targets API).
DEFAULT_SCRAPE_INTERVAL_S = 60.0
# A value whose newest sample is older than this many scrape intervals is stale (--max-sample-age's default).
SAMPLE_AGE_SCRAPES = 3


class Discovery:
    def __init__(self, client: PrometheusClient, config: Callable[[], RulesConfig], *, interval_s: float = 60.0,
                 max_age_s: float | None = None) -> None:
        self._client = client
        self._config = config
        self.interval_s = interval_s
        self.max_age_s = max_age_s  # None: the relist interval plus the longest scrape interval
        self.scrape_intervals: list[float] = []  # distinct, smallest first, as read at the last relist
        self.catalogue: Catalogue | None = None
        self.last_success: float | None = None
        self.last_error: str | None = None
        self.last_duration_s = 0.0
        self.failures_total = 0
        self._task = BackgroundTask("discovery")
        self._after_relist: list[Callable[[], Awaitable[None]]] = []
        self._wake = asyncio.Event()

    def after_relist(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await ``hook()`` after every relist, failed or not (e.g. to re-read Prometheus' scrape intervals)."""
        self._after_relist.append(hook)

    def request_relist(self) -> None:
        """Relist now rather than at the next interval (the rules changed); runs after a relist in progress."""
        self._wake.set()

    @property
    def longest_scrape_interval_s(self) -> float:
        """The longest scrape interval among Prometheus' active targets at the last relist (1m when unknown)."""
        return self.scrape_intervals[-1] if self.scrape_intervals else DEFAULT_SCRAPE_INTERVAL_S

    @property
    def default_max_sample_age_s(self) -> float:
        """``--max-sample-age`` when not given: 3 scrape intervals (the longest, as read at the last relist)."""
        return SAMPLE_AGE_SCRAPES * self.longest_scrape_interval_s

    @property
    def look_back_s(self) -> float:
        """The window of the next relist's series queries, ending at the time of the query."""
        if self.max_age_s is not None:
            return self.max_age_s
        return self.interval_s + self.longest_scrape_interval_s

    @property
    def ready(self) -> bool:
        """A catalogue exists: the last successful relist's."""
        return self.catalogue is not None

    @property
    def answered(self) -> bool:
        """The first relist has finished, successfully or not: discovery can answer (an empty list at worst)."""
        return self.catalogue is not None or self.failures_total > 0

    @property
    def prometheus_url(self) -> str:
        """The URL as configured, without any user and password in it."""
        return str(URL(self._client.config.url).with_user(None))

    def waiting_reason(self) -> str:
        """Why nothing is served yet (readiness, and every request's 503): the first relist's failure, if any."""
        if self.last_error is None:
            return "metrics discovery has not completed yet (the first series list is in progress)"
        return (f"metrics discovery has not completed yet: cannot list series from Prometheus at "
                f"{self.prometheus_url}: {self.last_error}")

    async def relist(self) -> bool:
        """One relist, then the ``after_relist`` hooks."""
        ok = await self._relist()
        for hook in self._after_relist:
            try:
                await hook()
            except Exception:
                log.exception("after-relist hook failed")
        return ok

    async def _relist(self) -> bool:
        """The distinct series queries one after another; any failure keeps the previous catalogue.

        One at a time because an answer is held whole while it is decoded (with its text copy: megabytes for a
        large fleet's series): two at once would hold two such answers at the adapter's peak, to make a relist
        that runs in the background a little shorter (bench/discovery.py reports relist time and peak RSS).
        """
        started = time.perf_counter()
        self.scrape_intervals = await self._read_scrape_intervals()
        config = self._config()
        end = time.time()
        start = end - self.look_back_s
        queries = config.series_queries()
        try:
            results = [await self._client.series_shapes([q], start, end) for q in queries]
        except PrometheusError as exc:
            self.failures_total += 1
            repeated, self.last_error = self.last_error == str(exc), str(exc)
            if self.ready:
                log.warning("relist failed, keeping the previous catalogue: %s", exc)
            elif not repeated:  # retried every 2 s until it answers: said again only when the reason changes
                log.error("cannot list series from Prometheus at %s: %s; no metric is served until it answers "
                          "(is --prometheus-url right? docs/install.md says how to find it)", self.prometheus_url, exc)
            return False
        catalogue = build_catalogue_from_shapes(config, dict(zip(queries, results, strict=True)))
        self.catalogue = catalogue
        self.last_success = time.time()
        self.last_error = None
        self.last_duration_s = time.perf_counter() - started
        log.info("discovered %d custom and %d external metrics in %.3fs (series of the last %gs)",
                 len(catalogue.custom_metrics()), len(catalogue.external_metrics()), self.last_duration_s, end - start)
        return True

    async def _read_scrape_intervals(self) -> list[float]:
        try:
            return await self._client.scrape_intervals()
        except PrometheusError as exc:
            log.debug("cannot read scrape intervals: %s", exc)
            return []

    def start(self) -> None:
        self._task.start(self._run)

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            ok = await self.relist()
            # Until the first catalogue exists, retry quickly: the API is not ready without one.
            delay = self.interval_s if ok or self.ready else min(self.interval_s, 2.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
