"""Reading the adapter's own /metrics in tests (wait on them with tests.support.waiting.wait_until)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

from tests.support.adapter_process import AdapterProcess

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(adapter: AdapterProcess) -> Samples:
    """Every sample of ``GET /metrics``, keyed by (sample name, label set)."""
    response = adapter.get("/metrics")
    assert response.status_code == 200, response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))



def metric_value(adapter: AdapterProcess, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    return value(scrape(adapter), name, **(labels or {}))
