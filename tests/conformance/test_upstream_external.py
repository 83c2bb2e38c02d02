"""prometheus-adapter's pkg/external-provider table (periodic_metric_lister_test.go): the external metrics listed
come from the last relist, which is the only thing that asks Prometheus."""

from __future__ import annotations

import asyncio

import pytest

from adapter.prometheus.discovery import Discovery
from adapter.rules.catalogue import distinct_shapes
from tests.conformance.upstream import UpstreamCase, params, rules_config, series

pytestmark = pytest.mark.unit

LISTER_TEST = "pkg/external-provider/periodic_metric_lister_test.go"
CONFIG = rules_config(external=[{"seriesQuery": "a_series", "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>})"}])


class CountingPrometheus:
    """Answers every series query with ``a_series``; counts the calls."""

    def __init__(self) -> None:
        self.series_calls = 0

    async def series_shapes(self, matchers, start: float, end: float):
        self.series_calls += 1
        return distinct_shapes([series("a_series")])

    async def scrape_intervals(self) -> list[float]:
        return []


CASES = [
    UpstreamCase(LISTER_TEST, "TestWhenNewMetricsAvailableCallbackIsInvoked"),
    UpstreamCase(LISTER_TEST, "TestWhenListingMetricsReturnsCachedValues"),
]


@pytest.mark.parametrize("case", params(CASES))
def test_external_metrics_are_listed_from_the_last_relist(case: UpstreamCase) -> None:
    prom = CountingPrometheus()
    discovery = Discovery(prom, lambda: CONFIG)  # type: ignore[arg-type]
    notified: list[bool] = []
    discovery.after_relist(lambda: asyncio.sleep(0, notified.append(True)))
    # Nothing listed before the first relist, and nothing asked of Prometheus.
    assert discovery.catalogue is None and prom.series_calls == 0
    assert asyncio.run(discovery.relist())
    assert notified == [True]  # the update is announced (upstream: the notification callback)
    assert prom.series_calls == 1
    # Listing reads the kept catalogue: no further call.
    for _ in range(3):
        assert discovery.catalogue is not None and discovery.catalogue.external_metrics() == ["a_series"]
    assert prom.series_calls == 1
