"""prometheus-adapter's pkg/naming tables (metrics_query_test.go, regex_matcher_test.go) and metric_namer.go's
naming rules, against our rules engine."""

from __future__ import annotations

import pytest

from adapter.rules import RulesError
from tests.conformance.upstream import (
    UpstreamCase,
    catalogue_for,
    custom_query_args,
    external_query_args,
    one_binding,
    params,
    render_template,
    rules_config,
    series,
)

pytestmark = pytest.mark.unit

METRICS_QUERY_TEST = "pkg/naming/metrics_query_test.go"
REGEX_MATCHER_TEST = "pkg/naming/regex_matcher_test.go"
METRIC_NAMER = "pkg/naming/metric_namer.go"

# TestBuildSelector. Upstream's mock resource converter names the label after the resource ("resource") and the
# namespace label "namespaces"; the same mapping is written here as overrides. ``names=None`` stands for upstream's
# empty list in the GroupBy cases (only the group-by is rendered; its registry never builds a query without names).
BUILD = [
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/series",
                 {"template": "series <<.Series>>", "series": "foo", "names": ["bar"], "want": "series foo"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/multiple LabelMatchers values",
                 {"template": "<<.LabelMatchers>>", "names": ["bar", "baz"], "want": 'resource=~"bar|baz"'}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/single LabelMatchers value",
                 {"template": "<<.LabelMatchers>>", "names": ["bar"], "want": 'resource="bar"'}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/LabelMatchers with additional metrics filter",
                 {"template": "<<.LabelMatchers>>", "names": ["bar"], "selector": "metric1=value1",
                  "want": 'metric1="value1",resource="bar"'}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/single LabelValuesByName value",
                 {"template": '<<index .LabelValuesByName "resource">>', "names": ["bar"], "want": "bar"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/multiple LabelValuesByName values",
                 {"template": '<<index .LabelValuesByName "resource">>', "names": ["bar", "baz"], "want": "bar|baz"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/multiple LabelValuesByName values with namespace",
                 {"template": '<<index .LabelValuesByName "namespaces">> <<index .LabelValuesByName "resource">>',
                  "namespace": "default", "names": ["bar", "baz"], "want": "default bar|baz"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/single GroupBy value",
                 {"template": "<<.GroupBy>>", "names": None, "want": "resource"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/multiple GroupBy values",
                 {"template": "<<.GroupBy>>", "names": None, "extra": ["extra", "groups"],
                  "want": "resource,extra,groups"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/single GroupBySlice value",
                 {"template": "<<.GroupBySlice>>", "names": None, "want": "[resource]"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildSelector/multiple GroupBySlice values",
                 {"template": "<<.GroupBySlice>>", "names": None, "extra": ["extra", "groups"],
                  "want": "[resource extra groups]"}),
]


def _custom_binding(series_name: str, namespaced: bool):
    overrides = {"resource": {"group": "group", "resource": "resource"}}
    labels = {"resource": "x"}
    if namespaced:
        overrides["namespaces"] = {"resource": "namespace"}
        labels["namespaces"] = "y"
    config = rules_config([{"seriesQuery": f'{series_name}{{resource!=""}}', "resources": {"overrides": overrides},
                            "metricsQuery": "<<.Series>>{<<.LabelMatchers>>}"}])
    return one_binding(catalogue_for(config, [series(series_name, **labels)]), series_name, "resource.group")


@pytest.mark.parametrize("case", params(BUILD))
def test_build_selector(case: UpstreamCase) -> None:
    d = case.data
    binding = _custom_binding(d.get("series", "foo"), namespaced="namespace" in d)
    args = custom_query_args(binding, namespace=d.get("namespace"), names=d["names"],
                             metric_selector=d.get("selector", ""), extra_group_by=d.get("extra", ()))
    assert render_template(d["template"], args) == d["want"]


# TestBuildExternalSelector: the mock converter's namespace label is "namespaces"; "namespaced" is the rule's
# resources.namespaced.
BUILD_EXTERNAL = [
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/series",
                 {"template": "series <<.Series>>", "series": "foo", "want": "series foo"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/single GroupBy value",
                 {"template": "<<.GroupBy>>", "group_by": ["foo"], "want": "foo"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/multiple GroupBySlice values",
                 {"template": "<<.GroupBySlice>>", "group_by": ["foo", "bar"], "want": "[foo bar]"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/multiple GroupBySlice values with namespace",
                 {"template": '<<index .LabelValuesByName "namespaces">> <<.GroupBySlice>>', "namespace": "default",
                  "group_by": ["foo", "bar"], "want": "default [foo bar]"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/multiple GroupBySlice values with namespace disabled",
                 {"template": '<<index .LabelValuesByName "namespaces">> <<.GroupBySlice>>', "namespace": "default",
                  "namespaced": False, "group_by": ["foo", "bar"], "want": " [foo bar]"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/single LabelMatchers value",
                 {"template": "<<.LabelMatchers>>", "selector": "foo=bar", "want": 'foo="bar"'}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/single LabelMatchers value with namespace",
                 {"template": "<<.LabelMatchers>>", "selector": "foo=bar", "namespace": "default",
                  "want": 'foo="bar",namespaces="default"'}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/multiple LabelMatchers value",
                 {"template": "<<.LabelMatchers>>", "selector": "foo=bar,qux in (bar,baz)",
                  "want": 'foo="bar",qux=~"bar|baz"'}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/single LabelValuesByName value",
                 {"template": "<<.LabelValuesByName>>", "selector": "foo=bar", "want": "map[foo:bar]"}),
    UpstreamCase(METRICS_QUERY_TEST, "TestBuildExternalSelector/single LabelValuesByName with multiple selectors",
                 {"template": "<<.LabelValuesByName>>", "selector": "foo in (bar,baz)", "want": "map[foo:bar|baz]"}),
]


@pytest.mark.parametrize("case", params(BUILD_EXTERNAL))
def test_build_external_selector(case: UpstreamCase) -> None:
    d = case.data
    name = d.get("series", "foo")
    config = rules_config(external=[{
        "seriesQuery": name, "metricsQuery": "<<.Series>>{<<.LabelMatchers>>}",
        "resources": {"overrides": {"namespaces": {"resource": "namespace"}}, "namespaced": d.get("namespaced", True)},
    }])
    [binding] = catalogue_for(config, [series(name)]).external_lookup(name)
    args = external_query_args(binding, namespace=d.get("namespace"), metric_selector=d.get("selector", ""),
                               group_by=d.get("group_by", ()))
    assert render_template(d["template"], args) == d["want"]


def test_a_template_that_is_not_promql_is_refused_at_load() -> None:
    # Upstream renders `series <<.Series>>` (the first case of both tables) and sends it to Prometheus, which
    # rejects it at request time; we refuse such a rule when the file is loaded, naming the rule and field.
    with pytest.raises(RulesError, match=r"rules\[0\]\.metricsQuery: renders invalid PromQL"):
        rules_config([{"seriesQuery": 'foo{pod!=""}', "resources": {"template": "<<.Resource>>"},
                       "metricsQuery": "series <<.Series>>"}])


# regex_matcher_test.go: seriesFilters' is/isNot (unanchored, like Go's MatchString).
FILTERS = [
    UpstreamCase(REGEX_MATCHER_TEST, "TestReMatcherIs",
                 {"filter": {"is": "my_.*"}, "keeps": {"my_label": True, "your_label": False}}),
    UpstreamCase(REGEX_MATCHER_TEST, "TestReMatcherIsNot",
                 {"filter": {"isNot": "my_.*"}, "keeps": {"my_label": False, "your_label": True}}),
]


@pytest.mark.parametrize("case", params(FILTERS))
def test_series_filters(case: UpstreamCase) -> None:
    config = rules_config([{"seriesQuery": '{pod!=""}', "seriesFilters": [case.data["filter"]],
                            "resources": {"template": "<<.Resource>>"},
                            "metricsQuery": "<<.Series>>{<<.LabelMatchers>>}"}])
    for name, kept in case.data["keeps"].items():
        assert (config.rules[0].metric_name(name) is not None) is kept, name


def test_a_filter_with_both_is_and_is_not_is_refused() -> None:
    # regex_matcher_test.go TestEnforcesIsOrIsNotButNotBoth
    with pytest.raises(RulesError, match=r"seriesFilters\[0\]: each filter needs exactly one of 'is' or 'isNot'"):
        rules_config([{"seriesQuery": '{pod!=""}', "seriesFilters": [{"is": "my_.*", "isNot": "your_.*"}],
                       "resources": {"template": "<<.Resource>>"},
                       "metricsQuery": "<<.Series>>{<<.LabelMatchers>>}"}])


# metric_namer.go NamersFromConfig / MetricNameForSeries: a missing 'matches' is '.*'; 'as' defaults to $0 without
# capture groups and $1 with one, and is required with more; 'matches' also filters series (as a seriesFilter).
NAMING = [
    UpstreamCase(METRIC_NAMER, "no name: the series name", {"name": None, "names": {"foo_total": "foo_total"}}),
    UpstreamCase(METRIC_NAMER, "as without matches: matches is .*",
                 {"name": {"as": "DCGM_FI_DEV_GPU_UTIL_AVG"},
                  "names": {"DCGM_FI_DEV_GPU_UTIL": "DCGM_FI_DEV_GPU_UTIL_AVG"}}),
    UpstreamCase(METRIC_NAMER, "as without matches expands $0 against .*",
                 {"name": {"as": "${0}_per_second"}, "names": {"http_requests": "http_requests_per_second"}}),
    UpstreamCase(METRIC_NAMER, "matches without capture groups: as is $0",
                 {"name": {"matches": "^foo_.*$"}, "names": {"foo_bar": "foo_bar", "bar_foo": None}}),
    UpstreamCase(METRIC_NAMER, "matches with one capture group: as is $1",
                 {"name": {"matches": "^container_(.*)_seconds_total$"},
                  "names": {"container_cpu_usage_seconds_total": "cpu_usage", "container_memory": None}}),
    UpstreamCase(METRIC_NAMER, "empty as: the default",
                 {"name": {"matches": "^(.*)_total", "as": ""}, "names": {"http_requests_total": "http_requests"}}),
    UpstreamCase(METRIC_NAMER, "matches is unanchored (FindStringSubmatchIndex)",
                 {"name": {"matches": "_total", "as": "x"}, "names": {"a_total_b": "x", "a": None}}),
]


@pytest.mark.parametrize("case", params(NAMING))
def test_metric_names(case: UpstreamCase) -> None:
    rule = {"seriesQuery": '{pod!=""}', "resources": {"template": "<<.Resource>>"},
            "metricsQuery": "<<.Series>>{<<.LabelMatchers>>}"}
    if case.data["name"] is not None:
        rule["name"] = case.data["name"]
    config = rules_config([rule])
    for series_name, metric in case.data["names"].items():
        assert config.rules[0].metric_name(series_name) == metric, series_name


def test_two_capture_groups_need_an_as() -> None:
    # metric_namer.go: "must specify an 'as' value for name matcher ..."
    with pytest.raises(RulesError, match=r"rules\[0\]\.name\.as: .*2 capture groups"):
        rules_config([{"seriesQuery": '{pod!=""}', "name": {"matches": "^(a)_(b)$"},
                       "resources": {"template": "<<.Resource>>"}, "metricsQuery": "<<.Series>>{<<.LabelMatchers>>}"}])
