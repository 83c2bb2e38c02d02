"""Discovery keeps the last good catalogue when a relist fails, picks up new series when it succeeds, and looks back
far enough that a series never drops out between two scrapes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapter.presets.gpu import gpu_presets
from adapter.prometheus.client import PrometheusClient, PrometheusConfig, PrometheusError, PrometheusUnavailable
from adapter.prometheus.discovery import Discovery
from adapter.rules.catalogue import distinct_shapes
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.unit


class ScriptedPrometheus:
    """Answers /api/v1/series from a script: a list of label sets, or an exception to raise."""

    def __init__(self) -> None:
        self.config = PrometheusConfig(url="http://prometheus.test:9090")
        self.answer: Any = []
        self.intervals: list[float] | PrometheusError = [15.0]
        self.calls: list[tuple[list[str], float, float]] = []

    async def scrape_intervals(self) -> list[float]:
        if isinstance(self.intervals, PrometheusError):
            raise self.intervals
        return self.intervals

    async def series(self, matchers: list[str], start: float, end: float) -> list[dict[str, str]]:
        self.calls.append((matchers, start, end))
        if isinstance(self.answer, Exception):
            raise self.answer
        return [s for s in self.answer if s["__name__"] in matchers[0]]

    async def series_shapes(self, matchers: list[str], start: float, end: float) -> frozenset:
        """What the real client's ``series_shapes`` returns for the same answer."""
        return distinct_shapes(await self.series(matchers, start, end))


def gpu_series(pod: str) -> dict[str, str]:
    return {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "namespace": "ml", "pod": pod, "service": "dcgm"}


def test_failed_relist_keeps_the_last_good_catalogue() -> None:
    prom = ScriptedPrometheus()
    discovery = Discovery(prom, gpu_presets, interval_s=60, max_age_s=300)  # type: ignore[arg-type]
    assert not discovery.ready
    prom.answer = PrometheusUnavailable("down")
    assert asyncio.run(discovery.relist()) is False
    assert discovery.catalogue is None and discovery.failures_total == 1
    prom.answer = [gpu_series("infer-0")]
    assert asyncio.run(discovery.relist()) is True
    good = discovery.catalogue
    assert good is not None and good.lookup("DCGM_FI_DEV_GPU_UTIL", "pods")
    prom.answer = PrometheusUnavailable("down again")
    assert asyncio.run(discovery.relist()) is False
    assert discovery.catalogue is good  # never dropped
    assert discovery.last_error == "down again"
    # the look-back window is --metrics-max-age
    _, start, end = prom.calls[-1]
    assert end - start == 300


def test_each_distinct_series_query_is_listed_once() -> None:
    prom = ScriptedPrometheus()
    discovery = Discovery(prom, gpu_presets)  # type: ignore[arg-type]
    asyncio.run(discovery.relist())
    queries = [call[0][0] for call in prom.calls]
    assert len(queries) == len(set(queries)) == len(gpu_presets().series_queries())


def test_default_look_back_is_the_relist_interval_plus_the_longest_scrape_interval() -> None:
    prom = ScriptedPrometheus()
    discovery = Discovery(prom, gpu_presets, interval_s=10)  # type: ignore[arg-type]

    def window() -> float:
        asyncio.run(discovery.relist())
        _, start, end = prom.calls[-1]
        return round(end - start, 6)

    prom.intervals = [5.0, 30.0]
    assert window() == 40 and discovery.scrape_intervals == [5.0, 30.0]
    prom.intervals = [15.0]  # re-read at every relist
    assert window() == 25
    prom.intervals = PrometheusUnavailable("no targets API")  # unknown: Prometheus' default scrape interval
    assert window() == 70 and discovery.scrape_intervals == []
    prom.intervals = []
    assert window() == 70
    fixed = Discovery(prom, gpu_presets, interval_s=10, max_age_s=12)  # type: ignore[arg-type]
    prom.intervals = [30.0]
    asyncio.run(fixed.relist())
    _, start, end = prom.calls[-1]
    assert round(end - start, 6) == 12  # --metrics-max-age is taken as given


@pytest.mark.e2e
def test_a_series_scraped_less_often_than_the_relist_never_drops_out(prometheus_factory: Any) -> None:
    """Real Prometheus scraping every 3 s, relisting every 1 s: in the gap between two scrapes, once the last sample
    is older than the relist interval, the window prometheus-adapter uses by default (the relist interval) finds
    nothing, so the metric comes and goes; ours (relist interval + scrape interval) still finds it."""
    endpoint = MetricsEndpoint('DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="ml",pod="infer-0"} 50\n')
    try:
        prom = prometheus_factory([endpoint.address], scrape_interval="3s", honor_labels=True)
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", lambda r: len(r) == 1)

        def sample_age() -> float:
            [sample] = prom.query("time() - timestamp(DCGM_FI_DEV_GPU_UTIL)")
            return float(sample["value"][1])

        async def found_in_a_gap_between_scrapes() -> tuple[bool, bool]:
            client = PrometheusClient(PrometheusConfig(url=prom.url))
            ours = Discovery(client, gpu_presets, interval_s=1)
            upstream_default = Discovery(client, gpu_presets, interval_s=1, max_age_s=1.0)

            async def relisted_in_the_gap() -> tuple[bool, bool] | None:
                age = sample_age()
                if age < 1.5:  # the last scrape is not yet out of the relist interval's window
                    return None
                assert await ours.relist() and await upstream_default.relist()
                if sample_age() < age:  # a scrape landed meanwhile: try the next gap
                    return None
                return tuple(bool(d.catalogue and d.catalogue.lookup("DCGM_FI_DEV_GPU_UTIL", "pods"))
                             for d in (ours, upstream_default))  # type: ignore[return-value]

            try:
                return await wait_until_async(relisted_in_the_gap, 30, "both relists in a gap between scrapes",
                                              interval=0.05)
            finally:
                await client.aclose()

        assert asyncio.run(found_in_a_gap_between_scrapes()) == (True, False)
    finally:
        endpoint.stop()
