"""The value policy per object, with Prometheus' answers given: several series for one object, samples from
another namespace, stale samples (the freshness query), and .LabelValuesByName reaching the rendered query."""

from __future__ import annotations

import asyncio
import logging

import pytest

from adapter.api.paths import MetricPath
from adapter.api.status import ApiError
from adapter.prometheus.client import PrometheusConfig, Sample
from adapter.provider.custom import CustomMetrics
from adapter.provider.engine import Engine
from tests.conformance.upstream import catalogue_for, rules_config, series

pytestmark = pytest.mark.unit

RULES = [
    {"seriesQuery": 'util{namespace!="",pod!=""}', "name": {"as": "util_raw"},
     "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
     "metricsQuery": "<<.Series>>{<<.LabelMatchers>>}"},
    {"seriesQuery": 'util{namespace!="",pod!=""}', "name": {"as": "util_everywhere"},
     "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
     "metricsQuery": 'avg by (namespace, pod) (util{pod=~"<<index .LabelValuesByName "pod">>",'
                     'gpu=~"<<index .LabelValuesByName "gpu">>"})'},
    {"seriesQuery": 'util{namespace!="",pod!=""}', "name": {"as": "util_10m"},
     "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
     "metricsQuery": "max by (<<.GroupBy>>) (max_over_time(<<.Series>>{<<.LabelMatchers>>}[10m]))"},
]
CONFIG = rules_config(RULES)
CATALOGUE = catalogue_for(CONFIG, [series("util", namespace="ml", pod="a", gpu="0")])


class ScriptedPrometheus:
    """Answers each query with the samples of the first script entry whose key occurs in it; records queries."""

    def __init__(self, script: dict[str, list[Sample]]) -> None:
        self.script = script
        self.queries: list[str] = []
        self.config = PrometheusConfig(url="http://prometheus.invalid")

    async def query(self, promql: str, at: float | None = None) -> list[Sample]:
        self.queries.append(promql)
        return next((samples for key, samples in self.script.items() if key in promql), [])


def sample(value: float, **labels: str) -> Sample:
    return Sample(labels, 1.7e9, value)


def ask(prom: ScriptedPrometheus, metric: str, name: str = "a", selector: str = "", max_age: float | None = None,
        ) -> list:
    engine = Engine(prom, lambda: CATALOGUE, max_sample_age=lambda: max_age)  # type: ignore[arg-type]
    return asyncio.run(CustomMetrics(engine).values(MetricPath("ml", "pods", name, metric), "", selector))


def test_several_series_that_agree_give_their_value() -> None:
    prom = ScriptedPrometheus({"util{": [sample(50, namespace="ml", pod="a", gpu="0"),
                                         sample(50, namespace="ml", pod="a", gpu="1")]})
    [item] = ask(prom, "util_raw")
    assert item.value == 50


def test_several_series_that_differ_give_no_value_and_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    prom = ScriptedPrometheus({"util{": [sample(50, namespace="ml", pod="a", gpu="0"),
                                         sample(100, namespace="ml", pod="a", gpu="1")]})
    engine = Engine(prom, lambda: CATALOGUE)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="adapter.provider"):
        for _ in range(3):
            with pytest.raises(ApiError) as err:
                asyncio.run(CustomMetrics(engine).values(MetricPath("ml", "pods", "a", "util_raw")))
            assert err.value.code == 404
    [record] = [r for r in caplog.records if "different values" in r.getMessage()]
    assert "rules[0]" in record.getMessage() and "pods ml/a" in record.getMessage()
    assert engine.series_conflicts.totals == {("rules[0]", "conflict"): 3}


def test_samples_without_the_objects_label_name_no_object_and_nan_is_no_value() -> None:
    """Every object's sample, in an answer that also holds a series without the resource label, one with it empty
    and a NaN: only the finite, named one is an item (the merge's fast path must hand such answers to its loop)."""
    prom = ScriptedPrometheus({"util{": [sample(40, namespace="ml", pod="a"), sample(70, namespace="ml"),
                                         sample(80, namespace="ml", pod=""),
                                         sample(float("nan"), namespace="ml", pod="b")]})
    assert [(item.name, item.value) for item in ask(prom, "util_raw", name="*")] == [("a", 40.0)]


def test_a_sample_from_another_namespace_is_not_the_objects() -> None:
    # util_everywhere's query does not use .LabelMatchers: Prometheus answers for every namespace.
    prom = ScriptedPrometheus({"avg by": [sample(90, namespace="staging", pod="a"),
                                          sample(40, namespace="ml", pod="a")]})
    [item] = ask(prom, "util_everywhere")
    assert item.value == 40


def test_metric_label_selector_values_reach_label_values_by_name() -> None:
    prom = ScriptedPrometheus({"avg by": [sample(40, namespace="ml", pod="a")]})
    ask(prom, "util_everywhere", selector="gpu in (0,1)")
    assert prom.queries == ['avg by (namespace, pod) (util{pod=~"a",gpu=~"0|1"})']


def test_stale_values_are_no_values_where_the_query_reaches_back_further_than_the_limit() -> None:
    window = [sample(7, namespace="ml", pod="a")]
    # Within the limit: the freshness query finds samples for pod a.
    prom = ScriptedPrometheus({"count_over_time": [sample(3, namespace="ml", pod="a")], "max_over_time": window})
    [item] = ask(prom, "util_10m", max_age=45)
    assert item.value == 7
    assert prom.queries[1] == ('count by (pod,namespace) (count_over_time(util{namespace="ml",pod="a"}[45000ms]))')
    # No sample within the limit: no value, though the 10m window still answers.
    prom = ScriptedPrometheus({"count_over_time": [], "max_over_time": window})
    with pytest.raises(ApiError) as err:
        ask(prom, "util_10m", max_age=45)
    assert err.value.code == 404
    # A limit above the query's reach, or none: no freshness query at all.
    for max_age in (600.0, None):
        prom = ScriptedPrometheus({"max_over_time": window})
        assert [i.value for i in ask(prom, "util_10m", max_age=max_age)] == [7]
        assert len(prom.queries) == 1
