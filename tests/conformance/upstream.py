"""Shared helpers for the prometheus-adapter conformance suite (kubernetes-sigs/prometheus-adapter).

Each case re-expresses one entry of an upstream unit-test table or one example of its documentation as data, and
names where it comes from (``UpstreamCase.source``: the file in that repository, ``UpstreamCase.name``: the
test's case name or the document's section). The inputs and expected outputs are upstream's; the code is ours
and drives our rules engine the way a request would. A case that we fail on purpose is an ``xfail`` whose reason
is the documentation's own row for that difference (``documented_difference``: docs/differences.md), so the two
cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from adapter.rules import Binding, Catalogue, RulesConfig, build_catalogue
from adapter.rules.query import custom_args, external_args
from adapter.rules.queryargs import QUERY_TEMPLATE_FIELDS, QueryArgs
from adapter.rules.selectors import parse_selector, to_label_values, to_promql_matchers
from adapter.rules.template import Template
from adapter.rulesfile.loader import parse_rules
from tests.support.docs import DOCS

REPOSITORY = "kubernetes-sigs/prometheus-adapter"
DIFFERENCES = DOCS / "differences.md"
DIFFERENCES_HEADING = "## prometheus-adapter: rules and values"


@dataclass(frozen=True)
class UpstreamCase:
    """One upstream case: ``source`` is a path in ``REPOSITORY``, ``name`` the case's name there."""

    source: str
    name: str
    data: Mapping[str, Any] = field(default_factory=dict)
    differs: str | None = None  # a phrase of docs/differences.md's table: the case is an xfail quoting that row

    @property
    def id(self) -> str:
        return f"{self.source}::{self.name}"


def params(cases: Iterable[UpstreamCase]) -> list[Any]:
    """``pytest.param`` per case, id'd by its upstream file and name; differences become strict xfails."""
    result = []
    for case in cases:
        marks = []
        if case.differs is not None:
            marks.append(pytest.mark.xfail(reason=documented_difference(case.differs), strict=True))
        result.append(pytest.param(case, id=case.id, marks=marks))
    return result


def stated(phrase: str) -> str:
    """An xfail reason quoting a docs/ page that says ``phrase`` (whitespace-insensitive); it must be said."""
    wanted = " ".join(phrase.split())
    for page in sorted(DOCS.glob("*.md")):
        if wanted in " ".join(page.read_text(encoding="utf-8").split()):
            return f"docs/{page.name}: {phrase}"
    raise LookupError(f"no page in docs/ states: {phrase!r}")


def documented_difference(phrase: str) -> str:
    """The row of docs/differences.md's prometheus-adapter table that contains ``phrase`` (exactly one must)."""
    text = DIFFERENCES.read_text(encoding="utf-8")
    start = text.index(DIFFERENCES_HEADING)
    end = text.find("\n#", start + len(DIFFERENCES_HEADING))
    rows = [line for line in text[start:end if end > 0 else None].splitlines() if line.startswith("|")]
    found = [row for row in rows if phrase in row]
    if len(found) != 1:
        raise LookupError(f"docs/differences.md's prometheus-adapter table has {len(found)} rows containing {phrase!r}")
    return "docs/differences.md: " + re.sub(r"\s+", " ", found[0].strip("| "))


# --- building rules and catalogues ---------------------------------------------------------------------------


def rules_config(rules: Sequence[Mapping[str, Any]] = (), external: Sequence[Mapping[str, Any]] = (),
                 source: str = "upstream.yaml") -> RulesConfig:
    """A rules file with these ``rules`` / ``externalRules`` (given as the YAML's mappings), through our parser."""
    document: dict[str, Any] = {}
    if rules:
        document["rules"] = list(rules)
    if external:
        document["externalRules"] = list(external)
    return parse_rules(yaml.safe_dump(document, sort_keys=False), source)


def catalogue_for(config: RulesConfig, series: Sequence[Mapping[str, str]] | Mapping[str, Sequence[Mapping[str, str]]]
                  ) -> Catalogue:
    """Discovery over ``series`` (label sets with ``__name__``): a list is what every ``seriesQuery`` returned (as
    upstream's registry tests hand each rule its series directly); a mapping is keyed by ``seriesQuery``."""
    by_query = series if isinstance(series, Mapping) else dict.fromkeys(config.series_queries(), series)
    return build_catalogue(config, by_query)


def series(metric: str, /, **labels: str) -> dict[str, str]:
    return {"__name__": metric, **labels}


def listed(catalogue: Catalogue) -> set[tuple[str, str, bool]]:
    """The custom metrics as upstream's tests list them: (group-resource, metric, namespaced)."""
    return {(str(info.group_resource), info.name, info.namespaced) for info in catalogue.custom_metrics()}


def one_binding(catalogue: Catalogue, metric: str, resource: str) -> Binding:
    found = catalogue.lookup(metric, resource)
    assert len(found) == 1, f"expected one rule to serve {resource}/{metric}, found {len(found)}"
    return found[0]


# --- what a request renders ------------------------------------------------------------------------------------


def selector_parts(metric_selector: str) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    """A ``metricLabelSelector`` as ``.LabelMatchers`` parts and ``.LabelValuesByName`` entries, as the API does."""
    requirements = parse_selector(metric_selector)
    return to_promql_matchers(requirements), to_label_values(requirements)


def custom_query_args(binding: Binding, *, namespace: str | None, names: Sequence[str] | None,
                      metric_selector: str = "", extra_group_by: Sequence[str] = ()) -> QueryArgs:
    matchers, values = selector_parts(metric_selector)
    return custom_args(binding, namespace=namespace, names=names, metric_matchers=matchers, metric_values=values,
                       extra_group_by=extra_group_by)


def external_query_args(binding: Binding, *, namespace: str | None, metric_selector: str = "",
                        group_by: Sequence[str] = ()) -> QueryArgs:
    matchers, values = selector_parts(metric_selector)
    return external_args(binding, namespace=namespace if binding.namespaced else None, metric_matchers=matchers,
                         metric_values=values, group_by=group_by)


def render_template(text: str, args: QueryArgs) -> str:
    """``text`` rendered with ``args`` as Go's text/template would (no PromQL check: upstream's tables render
    templates such as ``series <<.Series>>`` that are not queries)."""
    return Template.parse(text, QUERY_TEMPLATE_FIELDS).render(args.template_data())


# --- prometheus-adapter's built-in configuration (cmd/config-gen/utils/default.go) ------------------------------


def default_config(rate_interval: str = "1m", label_prefix: str = "") -> list[dict[str, Any]]:
    """``DefaultConfig(rateInterval, labelPrefix).Rules`` written as a rules file's ``rules``."""
    container = '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
    plain = f'{{{label_prefix}namespace!="",__name__!~"^container_.*"}}'
    pod_overrides = {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    template = {"template": f"{label_prefix}<<.Resource>>"}
    container_rate = f'sum(rate(<<.Series>>{{<<.LabelMatchers>>,container!="POD"}}[{rate_interval}])) by (<<.GroupBy>>)'
    plain_rate = f"sum(rate(<<.Series>>{{<<.LabelMatchers>>}}[{rate_interval}])) by (<<.GroupBy>>)"
    return [
        {"seriesQuery": container, "resources": {"overrides": pod_overrides},
         "name": {"matches": "^container_(.*)_seconds_total$"}, "metricsQuery": container_rate},
        {"seriesQuery": container, "seriesFilters": [{"isNot": "^container_.*_seconds_total$"}],
         "resources": {"overrides": pod_overrides}, "name": {"matches": "^container_(.*)_total$"},
         "metricsQuery": container_rate},
        {"seriesQuery": container, "seriesFilters": [{"isNot": "^container_.*_total$"}],
         "resources": {"overrides": pod_overrides}, "name": {"matches": "^container_(.*)$"},
         "metricsQuery": 'sum(<<.Series>>{<<.LabelMatchers>>,container!="POD"}) by (<<.GroupBy>>)'},
        {"seriesQuery": plain, "seriesFilters": [{"isNot": ".*_total$"}], "resources": template,
         "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"},
        {"seriesQuery": plain, "seriesFilters": [{"isNot": ".*_seconds_total"}], "name": {"matches": "^(.*)_total$"},
         "resources": template, "metricsQuery": plain_rate},
        {"seriesQuery": plain, "name": {"matches": "^(.*)_seconds_total$"}, "resources": template,
         "metricsQuery": plain_rate},
    ]


# Upstream's registry tests build their REST mapper with Ingress and Deployment in extensions/v1beta1 (as in
# 2017); without a Kubernetes API our resource table has them in their current groups. The tests' expectations
# are translated through this map (the resource, not the semantics, differs).
UPSTREAM_TEST_MAPPER_GROUPS = {
    ("extensions", "ingress"): "ingresses.networking.k8s.io",
    ("extensions", "ingresses"): "ingresses.networking.k8s.io",
    ("extensions", "deployment"): "deployments.apps",
    ("extensions", "deployments"): "deployments.apps",
}


def our_resource(group: str, resource: str) -> str:
    """An upstream test's group-resource as a resource string our catalogue is looked up with."""
    mapped = UPSTREAM_TEST_MAPPER_GROUPS.get((group, resource))
    if mapped is not None:
        return mapped
    return f"{resource}.{group}" if group else resource
