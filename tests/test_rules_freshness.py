"""How far back a rule's query reaches (which rules need a freshness query), the freshness query itself, and
``.LabelValuesByName`` for a custom request's metricLabelSelector."""

from __future__ import annotations

import math

import promql_parser
import pytest

from adapter.rules.freshness import freshness_query, lookback_s
from adapter.rules.selectors import parse_selector, to_label_values
from tests.conformance.upstream import catalogue_for, custom_query_args, one_binding, render_template, rules_config
from tests.conformance.upstream import series as series_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("query", "seconds"), [
    ('avg by (pod) (DCGM_FI_DEV_GPU_UTIL{pod="a"})', 0.0),
    ("avg by (exported_namespace, exported_container) (round(avg_over_time(DCGM_FI_DEV_GPU_UTIL[1m])))", 60.0),
    ('sum(rate(http_requests_total{pod=~"a|b"}[2m])) by (pod)', 120.0),
    ("rate(x[5m] offset 1m)", 360.0),
    ("x offset 90s", 90.0),
    ("max_over_time(rate(y[5m])[10m:1m])", 900.0),
    ("sum(x) / sum(avg_over_time(y[30s]))", 30.0),
    ("x @ 1700000000", math.inf),
    ("-(x)", 0.0),
])
def test_lookback(query: str, seconds: float) -> None:
    assert lookback_s(query) == seconds


def test_a_rule_records_its_lookback_at_load() -> None:
    window = "max by (<<.GroupBy>>) (max_over_time(<<.Series>>{<<.LabelMatchers>>}[10m]))"
    plain = "max by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})"
    config = rules_config([{"seriesQuery": 'x{pod!=""}', "resources": {"template": "<<.Resource>>"},
                            "metricsQuery": query} for query in (window, plain)])
    assert [r.lookback_s for r in config.rules] == [600.0, 0.0]


def test_freshness_query_counts_recent_samples_per_object() -> None:
    query = freshness_query("gpu_util", ['namespace="ml"', 'pod=~"a|b"'], ("pod", "namespace"), 45)
    assert query == 'count by (pod,namespace) (count_over_time(gpu_util{namespace="ml",pod=~"a|b"}[45000ms]))'
    promql_parser.parse(query)
    assert freshness_query("q", [], (), 0.5) == "count_over_time(q{}[500ms])"


@pytest.mark.parametrize(("selector", "values"), [
    ("", ()),
    ("foo=bar", (("foo", "bar"),)),
    ("foo in (baz,bar)", (("foo", "bar|baz"),)),
    ("foo,!qux", (("foo", ""), ("qux", ""))),
    ("foo notin (a.b)", (("foo", "a\\\\.b"),)),  # regex-escaped, then escaped for a "..." string
])
def test_label_values_of_a_selector(selector: str, values: tuple) -> None:
    assert to_label_values(parse_selector(selector)) == values


def test_a_custom_requests_metric_label_selector_reaches_label_values_by_name() -> None:
    config = rules_config([{"seriesQuery": 'x{pod!=""}', "resources": {"overrides": {
        "namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "metricsQuery": "<<.Series>>{<<.LabelMatchers>>}"}])
    binding = one_binding(catalogue_for(config, [series_of("x", pod="a", namespace="ml", code="200")]), "x", "pods")
    args = custom_query_args(binding, namespace="ml", names=["a", "b"], metric_selector="code in (500,503)")
    assert render_template("<<.LabelValuesByName>>", args) == "map[code:500|503 namespace:ml pod:a|b]"
