"""prometheus-adapter's documented example configurations (docs/config.md, docs/sample-config.yaml,
docs/externalmetrics.md, docs/walkthrough.md, docs/config-walkthrough.md, deploy/manifests/config-map.yaml), loaded
by our parser and asked what its documentation says they serve."""

from __future__ import annotations

import pytest

from adapter.rulesfile.loader import parse_rules
from tests.conformance.upstream import (
    UpstreamCase,
    catalogue_for,
    listed,
    one_binding,
    params,
    series,
)
from tests.support.queries import custom_promql, external_promql

pytestmark = pytest.mark.unit

CONFIG_MD = "docs/config.md"
SAMPLE_CONFIG = "docs/sample-config.yaml"
EXTERNAL_MD = "docs/externalmetrics.md"
WALKTHROUGH = "docs/walkthrough.md"
CONFIG_WALKTHROUGH = "docs/config-walkthrough.md"
DEPLOY_CONFIG = "deploy/manifests/config-map.yaml"

CADVISOR_SECONDS_RULE = """
rules:
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  name:
    matches: "^container_(.*)_seconds_total$"
  metricsQuery: "sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\\"POD\\"}[2m])) by (<<.GroupBy>>)"
"""

SAMPLE_CONFIG_YAML = CADVISOR_SECONDS_RULE + """\
- seriesQuery: '{__name__=~"^container_.*_total",container!="POD",namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  seriesFilters:
  - isNot: "^container_.*_seconds_total$"
  name: {matches: "^container_(.*)_total$"}
  metricsQuery: "sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\\"POD\\"}[2m])) by (<<.GroupBy>>)"
- seriesQuery: '{namespace!="",__name__!="^container_.*"}'
  name: {matches: "^(.*)_total$"}
  resources:
    template: "<<.Resource>>"
  metricsQuery: "sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\\"POD\\"}[2m])) by (<<.GroupBy>>)"
- seriesQuery: 'cheddar{sharp="true"}'
  name: {as: "cheesy_goodness"}
  resources:
    overrides:
      brand: {group: "cheese.io", resource: "brand"}
  metricsQuery: 'count(cheddar{sharp="true"})'
externalRules:
- seriesQuery: '{__name__="queue_consumer_lag",name!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)
- seriesQuery: '{__name__="queue_depth",topic!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)
  resources:
    namespaced: false
"""

WALKTHROUGH_CONFIG = """
"rules":
- "seriesQuery": |
     {namespace!="",__name__!~"^container_.*"}
  "resources":
    "template": "<<.Resource>>"
  "name":
    "matches": "^(.*)_total"
    "as": ""
  "metricsQuery": |
    sum by (<<.GroupBy>>) (
      irate (
        <<.Series>>{<<.LabelMatchers>>}[1m]
      )
    )
"""

CONFIG_WALKTHROUGH_RULE = """
rules:
- seriesQuery: 'http_requests_total{kubernetes_namespace!="",kubernetes_pod_name!=""}'
  resources:
    overrides:
      kubernetes_namespace: {resource: "namespace"}
      kubernetes_pod_name: {resource: "pod"}
  name:
    matches: "^(.*)_total"
    as: "${1}_per_second"
  metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)'
"""

EXTERNAL_NAMESPACED = """
externalRules:
- seriesQuery: '{__name__="queue_consumer_lag",name!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)
  resources:
    overrides: { namespace: {resource: "namespace"} }
- seriesQuery: '{__name__="queue_depth",name!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)
  resources:
    namespaced: false
"""

DEPLOY_RESOURCE_RULES = """
"resourceRules":
  "cpu":
    "containerLabel": "container"
    "containerQuery": |
      sum by (<<.GroupBy>>) (
        irate (
            container_cpu_usage_seconds_total{<<.LabelMatchers>>,container!="",pod!=""}[4m]
        )
      )
    "nodeQuery": |
      sum by (<<.GroupBy>>) (
        irate(
            node_cpu_usage_seconds_total{<<.LabelMatchers>>}[4m]
        )
      )
    "resources":
      "overrides":
        "namespace":
          "resource": "namespace"
        "node":
          "resource": "node"
        "pod":
          "resource": "pod"
  "memory":
    "containerLabel": "container"
    "containerQuery": |
      sum by (<<.GroupBy>>) (
        container_memory_working_set_bytes{<<.LabelMatchers>>,container!="",pod!=""}
      )
    "nodeQuery": |
      sum by (<<.GroupBy>>) (
        node_memory_working_set_bytes{<<.LabelMatchers>>}
      )
    "resources":
      "overrides":
        "node":
          "resource": "node"
        "namespace":
          "resource": "namespace"
        "pod":
          "resource": "pod"
  "window": "5m"
"""

CUSTOM = [
    UpstreamCase(CONFIG_MD, "a basic config with one rule", {
        "config": CADVISOR_SECONDS_RULE,
        "series": [series("container_cpu_usage_seconds_total", namespace="somens", pod="p1", container="c")],
        "lists": {("pods", "cpu_usage", True), ("namespaces", "cpu_usage", False)},
        "metric": "cpu_usage", "resource": "pods", "namespace": "somens", "names": ["p1", "p2"],
        "query": 'sum(rate(container_cpu_usage_seconds_total{namespace="somens",pod=~"p1|p2",container!="POD"}[2m]))'
                 " by (pod)",
    }),
    UpstreamCase(CONFIG_MD, "Querying (http_requests_per_second for pod1, pod2 in somens)", {
        # The document lists `pod=~"pod1|pod2",namespace="somens"`; metrics_query.go Build appends the namespace
        # part before the object's, and so do we.
        "config": CONFIG_WALKTHROUGH_RULE.replace("kubernetes_namespace", "namespace").replace(
            "kubernetes_pod_name", "pod"),
        "series": [series("http_requests_total", service="s", pod="pod1", ingress="i", namespace="somens",
                          verb="GET")],
        "lists": {("pods", "http_requests_per_second", True), ("namespaces", "http_requests_per_second", False)},
        "metric": "http_requests_per_second", "resource": "pods", "namespace": "somens", "names": ["pod1", "pod2"],
        "query": 'sum(rate(http_requests_total{namespace="somens",pod=~"pod1|pod2"}[2m])) by (pod)',
    }),
    UpstreamCase(SAMPLE_CONFIG, "rules[2]: template <<.Resource>>, cumulative non-cAdvisor metrics", {
        "config": SAMPLE_CONFIG_YAML,
        "series": [series("http_requests_total", namespace="shop", pod="web-1", service="web")],
        "lists": {("pods", "http_requests", True), ("services", "http_requests", True),
                  ("namespaces", "http_requests", False)},
        "metric": "http_requests", "resource": "services", "namespace": "shop", "names": ["web"],
        "query": 'sum(rate(http_requests_total{namespace="shop",service="web",container!="POD"}[2m])) by (service)',
    }),
    UpstreamCase(SAMPLE_CONFIG, "rules[3]: name.as without matches (cheesy_goodness)", {
        "config": SAMPLE_CONFIG_YAML,
        "series": [series("cheddar", sharp="true", brand="tillamook")],
        "metric": "cheesy_goodness", "resource": "brand.cheese.io", "namespace": "dairy", "names": ["tillamook"],
        "query": 'count(cheddar{sharp="true"})',
    }),
    UpstreamCase(SAMPLE_CONFIG, "rules[3]: brand.cheese.io is served as brands.cheese.io", {
        "config": SAMPLE_CONFIG_YAML,
        "series": [series("cheddar", sharp="true", brand="tillamook")],
        "lists": {("brands.cheese.io", "cheesy_goodness", True)},
    }, differs="brands.cheese.io"),
    UpstreamCase(WALKTHROUGH, "The Adapter Configuration (ConfigMap)", {
        "config": WALKTHROUGH_CONFIG,
        "series": [series("http_requests_total", namespace="default", pod="sample-app-1", job="sample-app")],
        "lists": {("pods", "http_requests", True), ("namespaces", "http_requests", False)},
        "metric": "http_requests", "resource": "pods", "namespace": "default", "names": ["sample-app-1"],
        "query": 'sum by (pod) (\n  irate (\n    http_requests_total{namespace="default",pod="sample-app-1"}[1m]\n'
                 "  )\n)\n",
    }),
    UpstreamCase(CONFIG_WALKTHROUGH, "Per-pod HTTP Requests", {
        # The document's discovery listing shows http_requests_total; its own `as` (and metric_namer.go) make it
        # http_requests_per_second, which its request path then uses.
        "config": CONFIG_WALKTHROUGH_RULE,
        "series": [series("http_requests_total", method="GET", kubernetes_namespace="production",
                          kubernetes_pod_name="frontend-server-abcd-0123")],
        "lists": {("pods", "http_requests_per_second", True), ("namespaces", "http_requests_per_second", False)},
        "metric": "http_requests_per_second", "resource": "pods", "namespace": "production",
        "names": ["frontend-server-abcd-0123", "frontend-server-abcd-4567"],
        "query": 'sum(rate(http_requests_total{kubernetes_namespace="production",'
                 'kubernetes_pod_name=~"frontend-server-abcd-0123|frontend-server-abcd-4567"}[2m]))'
                 " by (kubernetes_pod_name)",
    }),
]


@pytest.mark.parametrize("case", params(CUSTOM))
def test_documented_custom_rules(case: UpstreamCase) -> None:
    d = case.data
    config = parse_rules(d["config"], case.source)
    catalogue = catalogue_for(config, d["series"])
    if "lists" in d:
        assert d["lists"] <= listed(catalogue)
    if "query" in d:
        binding = one_binding(catalogue, d["metric"], d["resource"])
        assert custom_promql(binding, namespace=d["namespace"], names=d["names"]) == d["query"]


EXTERNAL = [
    UpstreamCase(EXTERNAL_MD, "External Metrics (namespace override)", {
        "config": EXTERNAL_NAMESPACED, "metric": "queue_consumer_lag", "namespace": "default",
        "selector": "name=my-queue",
        "query": 'sum(queue_consumer_lag{name="my-queue",namespace="default"}) by (name)'}),
    UpstreamCase(EXTERNAL_MD, "Cross-Namespace or No Namespace Queries (namespaced: false)", {
        "config": EXTERNAL_NAMESPACED, "metric": "queue_depth", "namespace": "default",
        "selector": "namespace=queue,name=my-sample-queue",
        "query": 'sum(queue_depth{name="my-sample-queue",namespace="queue"}) by (name)'}),
    UpstreamCase(SAMPLE_CONFIG, "externalRules[1]: namespaced: false", {
        "config": SAMPLE_CONFIG_YAML, "metric": "queue_depth", "namespace": "default", "selector": "",
        "query": "sum(queue_depth{}) by (name)"}),
    UpstreamCase(SAMPLE_CONFIG, "externalRules[0]: no label mapped to namespaces", {
        # Upstream's BuildExternal needs a label for namespaces for a namespaced rule and fails the request.
        "config": SAMPLE_CONFIG_YAML, "metric": "queue_consumer_lag", "namespace": "default", "selector": "",
        "query": None}, differs="an external rule maps no label to namespaces"),
]


@pytest.mark.parametrize("case", params(EXTERNAL))
def test_documented_external_rules(case: UpstreamCase) -> None:
    d = case.data
    config = parse_rules(d["config"], case.source)
    # As Prometheus would answer: only the series queries that name the metric find its series.
    found = [series(d["metric"], name="q", topic="t")]
    catalogue = catalogue_for(config, {q: found if d["metric"] in q else [] for q in config.series_queries()})
    [binding] = catalogue.external_lookup(d["metric"])
    assert external_promql(binding, namespace=d["namespace"], metric_selector=d["selector"]) == d["query"]


@pytest.mark.parametrize("case", params([UpstreamCase(DEPLOY_CONFIG, "adapter-config (resourceRules only)")]))
def test_the_deploy_config_map_loads(case: UpstreamCase) -> None:
    config = parse_rules(DEPLOY_RESOURCE_RULES, case.source)
    assert config.rules == () and config.external_rules == ()
    assert config.resource_rules is not None  # parsed and checked (tests/test_resource_metrics_e2e.py serves them)
