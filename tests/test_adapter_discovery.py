"""Discovery keeps the last good catalogue when a relist fails, and picks up new series when it succeeds."""

from __future__ import annotations

import asyncio
from typing import Any

from adapter.discovery import Discovery
from adapter.prometheus import PrometheusUnavailable
from adapter.rules import gpu_presets
from adapter.rules.catalogue import distinct_shapes


class ScriptedPrometheus:
    """Answers /api/v1/series from a script: a list of label sets, or an exception to raise."""

    def __init__(self) -> None:
        self.answer: Any = []
        self.calls: list[tuple[list[str], float, float]] = []

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
