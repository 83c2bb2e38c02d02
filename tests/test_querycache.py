"""Query coalescing and short reuse: unit tests with a scripted client and a fake clock, then the real adapter
process in front of a real Prometheus (through a proxy that counts and holds the queries it forwards)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapter.prometheus.client import (
    PrometheusClient,
    PrometheusConfig,
    PrometheusError,
    PrometheusUnavailable,
    QueryFailed,
    Sample,
)
from adapter.prometheus.querycache import QueryCache
from tests.support.adapter_metrics import scrape, value
from tests.support.adapter_process import AdapterProcess
from tests.support.counting_proxy import CountingProxy
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.waiting import wait_until, wait_until_async

pytestmark = pytest.mark.unit


class ScriptedClient:
    """Stands in for PrometheusClient: every query waits for ``gate``, then answers ``answer`` or raises it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.answer: list[Sample] | PrometheusError = [Sample({"pod": "p"}, 1700000000.0, 1.0)]
        self.intervals: list[float] | PrometheusError = [15.0]

    async def query(self, promql: str) -> list[Sample]:
        self.calls.append(promql)
        await self.gate.wait()
        if isinstance(self.answer, PrometheusError):
            raise self.answer
        return self.answer

    async def scrape_intervals(self) -> list[float]:
        if isinstance(self.intervals, PrometheusError):
            raise self.intervals
        return self.intervals


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(ttl_s: float = 5.0, **kw: Any) -> tuple[QueryCache, ScriptedClient, Clock]:
    client, clock = ScriptedClient(), Clock()
    return QueryCache(client, ttl_s=ttl_s, clock=clock, **kw), client, clock  # type: ignore[arg-type]


def test_identical_concurrent_queries_share_one_prometheus_call() -> None:
    async def scenario() -> None:
        cache, client, _ = make(ttl_s=0)
        client.gate.clear()
        tasks = [asyncio.create_task(cache.query("up")) for _ in range(100)]
        await wait_until_async(lambda: cache.stats.coalesced == 99, what="99 coalesced waiters", interval=0)
        client.gate.set()
        results = await asyncio.gather(*tasks)
        assert client.calls == ["up"]
        assert all(r == client.answer for r in results)
        assert (cache.stats.misses, cache.stats.coalesced, cache.stats.hits) == (1, 99, 0)
        # ttl 0: coalescing only, so the next query goes to Prometheus again
        await cache.query("up")
        assert client.calls == ["up", "up"]

    asyncio.run(scenario())


def test_different_queries_are_not_shared() -> None:
    async def scenario() -> None:
        cache, client, _ = make(ttl_s=0)
        await asyncio.gather(cache.query("a"), cache.query("b"), cache.query("a"))
        assert sorted(client.calls) == ["a", "b"]

    asyncio.run(scenario())


def test_an_error_is_shared_by_the_waiters_but_never_kept() -> None:
    async def scenario() -> None:
        cache, client, _ = make(ttl_s=5)
        await cache.refresh_freshness()
        client.gate.clear()
        client.answer = PrometheusUnavailable("down")
        tasks = [asyncio.create_task(cache.query("up")) for _ in range(10)]
        await wait_until_async(lambda: cache.stats.coalesced == 9, what="9 coalesced waiters", interval=0)
        client.gate.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(o, PrometheusUnavailable) for o in outcomes)
        assert len(client.calls) == 1
        client.answer = [Sample({}, 1.0, 2.0)]
        assert await cache.query("up") == [Sample({}, 1.0, 2.0)]  # asked again: the error was not kept
        assert len(client.calls) == 2

    asyncio.run(scenario())


def test_reuse_is_capped_by_the_scrape_interval() -> None:
    async def scenario() -> None:
        cache, client, clock = make(ttl_s=5)
        client.intervals = [1.0, 30.0]  # the smallest interval wins
        await cache.refresh_freshness()
        assert cache.effective_ttl_s == 1.0
        await cache.query("up")
        clock.now += 0.5
        await cache.query("up")
        assert len(client.calls) == 1 and cache.stats.hits == 1
        clock.now += 0.5  # one scrape interval after the query was sent: the data may have changed
        await cache.query("up")
        assert len(client.calls) == 2

    asyncio.run(scenario())


def test_reuse_is_capped_by_the_flag_when_scrapes_are_slower() -> None:
    async def scenario() -> None:
        cache, client, clock = make(ttl_s=5)
        client.intervals = [30.0]
        await cache.refresh_freshness()
        assert cache.effective_ttl_s == 5.0
        await cache.query("up")
        clock.now += 4.9
        await cache.query("up")
        clock.now += 0.1
        await cache.query("up")
        assert len(client.calls) == 2

    asyncio.run(scenario())


def test_unknown_scrape_interval_means_no_reuse_and_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        cache, client, _ = make(ttl_s=5)
        client.intervals = PrometheusUnavailable("404 from a Thanos Querier")
        for _ in range(3):
            await cache.refresh_freshness()
        assert cache.effective_ttl_s == 0
        await cache.query("up")
        await cache.query("up")
        assert len(client.calls) == 2
        client.intervals = []  # answered, but no active targets: still unknown
        await cache.refresh_freshness()
        assert cache.effective_ttl_s == 0

    with caplog.at_level(logging.INFO, logger="adapter.querycache"):
        asyncio.run(scenario())
    unknown = [r for r in caplog.records if "scrape interval is unknown" in r.getMessage()]
    assert len(unknown) == 1


def test_before_the_first_refresh_nothing_is_reused() -> None:
    async def scenario() -> None:
        cache, client, _ = make(ttl_s=5)
        await cache.query("up")
        await cache.query("up")
        assert len(client.calls) == 2

    asyncio.run(scenario())


def test_a_shorter_scrape_interval_drops_results_kept_under_the_longer_one() -> None:
    async def scenario() -> None:
        cache, client, clock = make(ttl_s=5)
        await cache.refresh_freshness()  # 15 s: capped at 5 s
        await cache.query("up")
        client.intervals = [1.0]
        await cache.refresh_freshness()
        clock.now += 2
        await cache.query("up")
        assert len(client.calls) == 2

    asyncio.run(scenario())


def test_memory_is_bounded() -> None:
    async def scenario() -> None:
        cache, client, clock = make(ttl_s=5, max_entries=3)
        await cache.refresh_freshness()
        for i in range(10):
            await cache.query(f"q{i}")
        assert len(cache) == 3
        await cache.query("q9")  # the newest entries are the ones kept
        assert cache.stats.hits == 1 and client.calls.count("q9") == 1
        await cache.query("q0")  # the oldest went
        assert client.calls.count("q0") == 2
        clock.now += 10
        await cache.query("fresh")  # expired entries go as new ones arrive
        assert len(cache) == 1

    asyncio.run(scenario())


def test_a_caller_that_goes_away_does_not_cancel_the_query_for_the_others() -> None:
    async def scenario() -> None:
        cache, client, _ = make(ttl_s=0)
        client.gate.clear()
        first = asyncio.create_task(cache.query("up"))
        second = asyncio.create_task(cache.query("up"))
        await wait_until_async(lambda: cache.stats.coalesced == 1, what="1 coalesced waiter", interval=0)
        first.cancel()
        client.gate.set()
        assert await second == client.answer
        assert first.cancelled() and len(client.calls) == 1

    asyncio.run(scenario())


def test_the_observer_sees_each_prometheus_call_with_its_rule_label() -> None:
    seen: list[tuple[str, type | None]] = []

    async def scenario() -> None:
        cache, client, _ = make(ttl_s=0, observe=lambda label, s, err: seen.append((label, type(err) if err else None)))
        await asyncio.gather(cache.query("up", "rules[0]"), cache.query("up", "rules[0]"))
        client.answer = QueryFailed("bad")
        with pytest.raises(QueryFailed):
            await cache.query("bad", "rules[1]")

    asyncio.run(scenario())
    assert seen == [("rules[0]", None), ("rules[1]", QueryFailed)]


# -- the real adapter process ---------------------------------------------------------------------------------

RULES = """\
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {matches: '^DCGM_FI_DEV_GPU_UTIL$', as: 'gpu_util_broken'}
  # both sides hold one series per GPU: Prometheus refuses this at execution time (many-to-many matching)
  metricsQuery: '<<.Series>>{<<.LabelMatchers>>} + on() <<.Series>>{<<.LabelMatchers>>}'
"""
EXPOSITION = """\
DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="ml",pod="infer-0"} 50
DCGM_FI_DEV_GPU_UTIL{gpu="1",namespace="ml",pod="infer-0"} 100
"""
POD = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL"
BROKEN = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/infer-0/gpu_util_broken"
PROMQL = 'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="infer-0"})'


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, Path]]:
    endpoint = MetricsEndpoint(EXPOSITION)
    prom = PrometheusServer([endpoint.address], honor_labels=True, scrape_interval="2s").start()
    tmp = tmp_path_factory.mktemp("querycache")
    (tmp / "rules.yaml").write_text(RULES)
    try:
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="infer-0"}', lambda r: len(r) == 2, timeout=30)
        yield prom, tmp
    finally:
        prom.stop()
        endpoint.stop()


@pytest.mark.e2e
def test_scrape_intervals_from_a_real_prometheus_over_get_even_when_queries_use_post(prometheus: tuple) -> None:
    prom, _ = prometheus  # the module's Prometheus, scraping every 2 s; only read here

    async def read() -> list[float]:
        client = PrometheusClient(PrometheusConfig(url=prom.url, method="POST"))
        try:
            return await client.scrape_intervals()
        finally:
            await client.aclose()

    assert asyncio.run(read()) == [2.0]


def start_adapter(prom_url: str, tmp: Path, *args: str) -> AdapterProcess:
    return AdapterProcess(prom_url, str(tmp / "certs"), ["--config", str(tmp / "rules.yaml"), *args])


@pytest.mark.e2e
def test_100_identical_concurrent_requests_cost_one_prometheus_query(prometheus: tuple) -> None:
    prom, tmp = prometheus
    proxy = CountingProxy(prom.url, hold_queries=True)
    # Coalescing alone does it, among the requests in flight: all 100 at once here (with the default 20 seats and the
    # cache off, they would run in five rounds, a query each).
    adapter = start_adapter(proxy.url, tmp, "--query-cache-ttl", "0", "--max-requests-inflight", "100")
    try:
        with httpx.Client(base_url=adapter.url, verify=False, timeout=60.0,
                          limits=httpx.Limits(max_connections=100)) as client, ThreadPoolExecutor(100) as pool:
            pending = [pool.submit(client.get, POD) for _ in range(100)]
            # all 100 are inside the adapter when 99 of them joined the one query Prometheus is holding
            wait_until(lambda: value(scrape(adapter), "gpu_adapter_query_cache_requests_total",
                                     result="coalesced") == 99, what="99 coalesced requests")
            proxy.release()
            responses = [p.result() for p in pending]
        assert [r.status_code for r in responses] == [200] * 100
        assert {r.json()["items"][0]["value"] for r in responses} == {"75"}
        assert proxy.queries == {PROMQL: 1}
        samples = scrape(adapter)
        assert value(samples, "gpu_adapter_query_cache_requests_total", result="miss") == 1
        assert value(samples, "gpu_adapter_prometheus_query_duration_seconds_count", rule="rules[0]") == 1
    finally:
        adapter.stop()
        proxy.stop()


@pytest.mark.e2e
def test_reuse_follows_the_scrape_interval_and_errors_are_never_reused(prometheus: tuple) -> None:
    prom, tmp = prometheus
    proxy = CountingProxy(prom.url)
    adapter = start_adapter(proxy.url, tmp, "--query-cache-ttl", "5s")
    try:
        # Prometheus scrapes every 2 s, so a result is reused for 2 s at most, not the 5 s asked for
        wait_until(lambda: value(scrape(adapter), "gpu_adapter_query_cache_ttl_seconds") == 2.0,
                   what="reuse capped at the 2 s scrape interval")
        for _ in range(2):
            response = adapter.get(BROKEN)
            assert response.status_code == 500 and response.json()["reason"] == "InternalError"
        assert proxy.queries[
            'DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="infer-0"} + on() DCGM_FI_DEV_GPU_UTIL{namespace="ml",'
            'pod="infer-0"}'] == 2
        samples = scrape(adapter)
        assert value(samples, "gpu_adapter_prometheus_query_errors_total", rule="rules[1]", reason="rejected") == 2
    finally:
        adapter.stop()
        proxy.stop()


@pytest.mark.e2e
def test_without_a_targets_api_nothing_is_reused_and_that_is_logged_once(prometheus: tuple) -> None:
    prom, tmp = prometheus
    proxy = CountingProxy(prom.url, targets_status=404)
    # no --metrics-max-age: with the scrape interval unknown, the look-back is 1 s + Prometheus' default 1 m
    adapter = start_adapter(proxy.url, tmp, "--query-cache-ttl", "5s", "--metrics-relist-interval", "1s")
    try:
        wait_until(lambda: proxy.paths["/api/v1/targets"] >= 3, what="three relists asking for targets")
        # read once per relist (one series call each: both rules share their seriesQuery), for discovery and cache
        relists = proxy.paths["/api/v1/series"]
        assert relists <= proxy.paths["/api/v1/targets"] <= relists + 1
        assert value(scrape(adapter), "gpu_adapter_query_cache_ttl_seconds") == 0
        assert adapter.get(POD).status_code == 200
        assert adapter.get(POD).status_code == 200
        assert proxy.queries[PROMQL] == 2
    finally:
        log = adapter.stop()
        proxy.stop()
    assert log.count("scrape interval is unknown") == 1, log
