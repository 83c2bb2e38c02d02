"""prometheus-adapter's pkg/naming/metrics_query_test.go tables, as data, against our query arguments.

Upstream's cases render a template with a mock resource converter whose label for a resource is the resource's
name and whose namespace label is ``namespaces``; the same bindings are built here. Inputs and expected outputs
are upstream's (facts); the harness is ours. Cases left out, with the reason:
- TestBuildSelector "multiple GroupBy values", "multiple GroupBySlice values" and TestBuildExternalSelector's
  GroupBy/GroupBySlice cases pass ``extraGroupBy``/``groupBy`` arguments that upstream's providers never pass
  (custom: nil; external: "" and an empty slice), so no request can reach them.
Our ``.LabelValuesByName`` values are regex-escaped (README, "Where we differ from prometheus-adapter"); every
value in these tables is a plain name, so upstream's expected text is ours too.
"""

from __future__ import annotations

import dataclasses

import pytest

from adapter.rules import parse_rules
from adapter.rules.catalogue import Binding
from adapter.rules.query import custom_args, external_args
from adapter.rules.queryargs import QUERY_TEMPLATE_FIELDS, QueryArgs
from adapter.rules.resources import GroupResource
from adapter.rules.template import Template
from adapter.selectors import parse_selector, to_label_values, to_promql_matchers

UPSTREAM = "kubernetes-sigs/prometheus-adapter pkg/naming/metrics_query_test.go"
_RULE = parse_rules("rules:\n- seriesQuery: 'foo{resource!=\"\"}'\n"
                    "  resources: {overrides: {resource: {group: group, resource: resource}}}\n"
                    "  metricsQuery: '<<.Series>>{<<.LabelMatchers>>}'\n", "upstream.yaml").rules[0]


def _binding(template: str, *, external: bool, namespaced: bool = True) -> Binding:
    rule = dataclasses.replace(_RULE, external=external,
                               metrics_query=Template.parse(template, QUERY_TEMPLATE_FIELDS))
    return Binding(rule, "foo", "foo", None if external else GroupResource("group", "resource"),
                   None if external else "resource", "namespaces" if namespaced else None, namespaced)


def _render(binding: Binding, args: QueryArgs) -> str:
    return binding.rule.metrics_query.render(args.template_data())


# (upstream test case name, template, series, namespace, object names, metric label selector, expected)
CUSTOM = [
    ("series", "series <<.Series>>", "foo", "", ["x"], "", "series foo"),
    ("multiple LabelMatchers values", "<<.LabelMatchers>>", "foo", "", ["bar", "baz"], "", 'resource=~"bar|baz"'),
    ("single LabelMatchers value", "<<.LabelMatchers>>", "foo", "", ["bar"], "", 'resource="bar"'),
    ("LabelMatchers with additional metrics filter", "<<.LabelMatchers>>", "foo", "", ["bar"], "metric1=value1",
     'metric1="value1",resource="bar"'),
    ("single LabelValuesByName value", '<<index .LabelValuesByName "resource">>', "foo", "", ["bar"], "", "bar"),
    ("multiple LabelValuesByName values", '<<index .LabelValuesByName "resource">>', "foo", "", ["bar", "baz"], "",
     "bar|baz"),
    ("multiple LabelValuesByName values with namespace",
     '<<index .LabelValuesByName "namespaces">> <<index .LabelValuesByName "resource">>', "foo", "default",
     ["bar", "baz"], "", "default bar|baz"),
    ("single GroupBy value", "<<.GroupBy>>", "foo", "", ["x"], "", "resource"),
    ("single GroupBySlice value", "<<.GroupBySlice>>", "foo", "", ["x"], "", "[resource]"),
]


@pytest.mark.parametrize(("case", "template", "series", "namespace", "names", "selector", "expected"), CUSTOM,
                         ids=[c[0] for c in CUSTOM])
def test_build_selector(case: str, template: str, series: str, namespace: str, names: list[str], selector: str,
                        expected: str) -> None:
    """TestBuildSelector (custom metrics)."""
    binding = _binding(template, external=False, namespaced=bool(namespace))
    reqs = parse_selector(selector)
    args = custom_args(binding, namespace=namespace or None, names=names, metric_matchers=to_promql_matchers(reqs),
                       metric_values=to_label_values(reqs))
    assert _render(binding, args) == expected, f"{UPSTREAM}: TestBuildSelector/{case}"


# (upstream test case name, template, namespaced rule, namespace, metric label selector, expected)
EXTERNAL = [
    ("series", "series <<.Series>>", True, "", "", "series foo"),
    ("single LabelMatchers value", "<<.LabelMatchers>>", True, "", "foo=bar", 'foo="bar"'),
    ("single LabelMatchers value with namespace", "<<.LabelMatchers>>", True, "default", "foo=bar",
     'foo="bar",namespaces="default"'),
    ("multiple LabelMatchers value", "<<.LabelMatchers>>", True, "", "foo=bar,qux in (bar,baz)",
     'foo="bar",qux=~"bar|baz"'),
    ("single LabelValuesByName value", "<<.LabelValuesByName>>", True, "", "foo=bar", "map[foo:bar]"),
    ("single LabelValuesByName with multiple selectors", "<<.LabelValuesByName>>", True, "", "foo in (bar,baz)",
     "map[foo:bar|baz]"),
    # "multiple GroupBySlice values with namespace (disabled)": the namespace part of those two cases.
    ("multiple GroupBySlice values with namespace", '<<index .LabelValuesByName "namespaces">>', True, "default",
     "", "default"),
    ("multiple GroupBySlice values with namespace disabled", '<<index .LabelValuesByName "namespaces">>', False,
     "default", "", ""),
]


@pytest.mark.parametrize(("case", "template", "namespaced", "namespace", "selector", "expected"), EXTERNAL,
                         ids=[c[0] for c in EXTERNAL])
def test_build_external_selector(case: str, template: str, namespaced: bool, namespace: str, selector: str,
                                 expected: str) -> None:
    """TestBuildExternalSelector; a rule with ``namespaced: false`` has no namespace label to match."""
    binding = _binding(template, external=True, namespaced=namespaced)
    reqs = parse_selector(selector)
    args = external_args(binding, namespace=namespace or None, metric_matchers=to_promql_matchers(reqs),
                         metric_values=to_label_values(reqs))
    assert _render(binding, args) == expected, f"{UPSTREAM}: TestBuildExternalSelector/{case}"


def test_label_values_are_escaped_so_a_value_cannot_widen_the_match() -> None:
    """Where we differ on purpose: upstream inserts values raw, so ``app=a.b`` would also match ``aXb``."""
    reqs = parse_selector("app in (a.b,c)")
    assert dict(to_label_values(reqs)) == {"app": "a\\\\.b|c"}
