"""prometheus-adapter's pkg/custom-provider tables (series_registry_test.go, provider_test.go): discovery and
query rendering with its built-in configuration (cmd/config-gen/utils/default.go), against our rules engine."""

from __future__ import annotations

import pytest

from adapter.rules.queryargs import render_query
from tests.conformance.upstream import (
    UpstreamCase,
    catalogue_for,
    custom_query_args,
    default_config,
    listed,
    one_binding,
    our_resource,
    params,
    rules_config,
    series,
)

pytestmark = pytest.mark.unit

REGISTRY_TEST = "pkg/custom-provider/series_registry_test.go"
PROVIDER_TEST = "pkg/custom-provider/provider_test.go"

# seriesRegistryTestSeries (each rule is handed its own slice upstream; handing every rule all of them yields the
# same metrics, since each series matches the filters and names of the rules it was meant for only).
REGISTRY_SERIES = [
    series("container_some_time_seconds_total", pod="somepod", namespace="somens", container="somecont"),
    series("container_some_count_total", pod="somepod", namespace="somens", container="somecont"),
    series("container_some_usage", pod="somepod", namespace="somens", container="somecont"),
    series("node_gigawatts", kube_node="somenode"),
    series("service_proxy_packets", kube_service="somesvc", kube_namespace="somens"),
    series("ingress_hits_total", kube_ingress="someingress", kube_service="somesvc", kube_pod="backend1",
           kube_namespace="somens"),
    series("ingress_hits_total", kube_ingress="someingress", kube_service="somesvc", kube_pod="backend2",
           kube_namespace="somens"),
    series("volume_claims_total", kube_persistentvolume="somepv"),
    series("work_queue_wait_seconds_total", kube_deployment="somedep", kube_namespace="somens"),
    series("node_fan_seconds_total", kube_node="somenode"),
]


def _q(name: str, group: str, resource: str, namespace: str | None, names: list[str], want: str,
       selector: str = "") -> UpstreamCase:
    return UpstreamCase(REGISTRY_TEST, f"should build a query for {name}",
                        {"group": group, "resource": resource, "namespace": namespace, "names": names,
                         "selector": selector, "want": want})


QUERIES = [
    _q("container metrics gauge / multiple resource names", "", "pods", "somens", ["somepod1", "somepod2"],
       'sum(container_some_usage{namespace="somens",pod=~"somepod1|somepod2",container!="POD"}) by (pod)'),
    _q("container metrics counter", "", "pods", "somens", ["somepod1", "somepod2"],
       'sum(rate(container_some_count_total{namespace="somens",pod=~"somepod1|somepod2",container!="POD"}[1m]))'
       " by (pod)"),
    _q("container metrics seconds counter", "", "pods", "somens", ["somepod1", "somepod2"],
       'sum(rate(container_some_time_seconds_total{namespace="somens",pod=~"somepod1|somepod2",container!="POD"}'
       "[1m])) by (pod)"),
    _q("namespaced metrics counter / multidimensional (service)", "", "service", "somens", ["somesvc"],
       'sum(rate(ingress_hits_total{kube_namespace="somens",kube_service="somesvc"}[1m])) by (kube_service)'),
    _q("namespaced metrics counter /  multidimensional (service) / selection using labels", "", "service", "somens",
       ["somesvc"],
       'sum(rate(ingress_hits_total{param1="value1",kube_namespace="somens",kube_service="somesvc"}[1m]))'
       " by (kube_service)", selector="param1=value1"),
    _q("namespaced metrics counter / multidimensional (ingress)", "extensions", "ingress", "somens", ["someingress"],
       'sum(rate(ingress_hits_total{kube_namespace="somens",kube_ingress="someingress"}[1m])) by (kube_ingress)'),
    _q("namespaced metrics counter / multidimensional (pod)", "", "pod", "somens", ["somepod"],
       'sum(rate(ingress_hits_total{kube_namespace="somens",kube_pod="somepod"}[1m])) by (kube_pod)'),
    _q("namespaced metrics gauge", "", "service", "somens", ["somesvc"],
       'sum(service_proxy_packets{kube_namespace="somens",kube_service="somesvc"}) by (kube_service)'),
    _q("namespaced metrics seconds counter", "extensions", "deployment", "somens", ["somedep"],
       'sum(rate(work_queue_wait_seconds_total{kube_namespace="somens",kube_deployment="somedep"}[1m]))'
       " by (kube_deployment)"),
    _q("root scoped metrics gauge", "", "node", None, ["somenode"],
       'sum(node_gigawatts{kube_node="somenode"}) by (kube_node)'),
    _q("root scoped metrics counter", "", "persistentvolume", None, ["somepv"],
       'sum(rate(volume_claims_total{kube_persistentvolume="somepv"}[1m])) by (kube_persistentvolume)'),
    _q("root scoped metrics seconds counter", "", "node", None, ["somenode"],
       'sum(rate(node_fan_seconds_total{kube_node="somenode"}[1m])) by (kube_node)'),
]

# The metric each query case asks for (the registry test's CustomMetricInfo.Metric).
METRIC_OF = {
    "container_some_usage": "some_usage", "container_some_count_total": "some_count",
    "container_some_time_seconds_total": "some_time", "ingress_hits_total": "ingress_hits",
    "service_proxy_packets": "service_proxy_packets", "work_queue_wait_seconds_total": "work_queue_wait",
    "node_gigawatts": "node_gigawatts", "volume_claims_total": "volume_claims", "node_fan_seconds_total": "node_fan",
}


@pytest.fixture(scope="module")
def registry():
    config = rules_config(default_config("1m", "kube_"))
    return catalogue_for(config, REGISTRY_SERIES)


@pytest.mark.parametrize("case", params(QUERIES))
def test_registry_builds_the_query(registry, case: UpstreamCase) -> None:
    d = case.data
    metric = METRIC_OF[d["want"].split("{")[0].split("(")[-1]]
    binding = one_binding(registry, metric, our_resource(d["group"], d["resource"]))
    args = custom_query_args(binding, namespace=d["namespace"], names=d["names"], metric_selector=d["selector"])
    assert render_query(binding.rule.metrics_query, args) == d["want"]


def _info(group: str, resource: str, metric: str, namespaced: bool) -> tuple[str, str, bool]:
    return (our_resource(group, resource), metric, namespaced)


REGISTRY_LIST = UpstreamCase(REGISTRY_TEST, "should list all metrics", {"want": {
    _info("", "pods", "some_count", True), _info("", "namespaces", "some_count", False),
    _info("", "pods", "some_time", True), _info("", "namespaces", "some_time", False),
    _info("", "pods", "some_usage", True), _info("", "namespaces", "some_usage", False),
    _info("", "services", "ingress_hits", True), _info("extensions", "ingresses", "ingress_hits", True),
    _info("", "pods", "ingress_hits", True), _info("", "namespaces", "ingress_hits", False),
    _info("", "services", "service_proxy_packets", True), _info("", "namespaces", "service_proxy_packets", False),
    _info("extensions", "deployments", "work_queue_wait", True), _info("", "namespaces", "work_queue_wait", False),
    _info("", "nodes", "node_gigawatts", False), _info("", "persistentvolumes", "volume_claims", False),
    _info("", "nodes", "node_fan", False),
}})


@pytest.mark.parametrize("case", params([REGISTRY_LIST]))
def test_registry_lists_all_metrics(registry, case: UpstreamCase) -> None:
    assert listed(registry) == case.data["want"]


# provider_test.go: DefaultConfig(1m, "") with the fake Prometheus answering each series query.
CONTAINER_SELECTOR = '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
NAMESPACED_SELECTOR = '{namespace!="",__name__!~"^container_.*"}'
PROVIDER_LIST = UpstreamCase(PROVIDER_TEST, "should be able to list all metrics", {
    "series": {
        CONTAINER_SELECTOR: [series("container_some_usage", pod="somepod", namespace="somens", container="somecont")],
        NAMESPACED_SELECTOR: [
            series("ingress_hits_total", ingress="someingress", service="somesvc", pod="backend1", namespace="somens"),
            series("ingress_hits_total", ingress="someingress", service="somesvc", pod="backend2", namespace="somens"),
            series("service_proxy_packets", service="somesvc", namespace="somens"),
            series("work_queue_wait_seconds_total", deployment="somedep", namespace="somens"),
        ],
    },
    "want": {
        _info("", "services", "ingress_hits", True), _info("extensions", "ingresses", "ingress_hits", True),
        _info("", "pods", "ingress_hits", True), _info("", "namespaces", "ingress_hits", False),
        _info("", "services", "service_proxy_packets", True), _info("", "namespaces", "service_proxy_packets", False),
        _info("extensions", "deployments", "work_queue_wait", True), _info("", "namespaces", "work_queue_wait", False),
        _info("", "namespaces", "some_usage", False), _info("", "pods", "some_usage", True),
    },
})


@pytest.mark.parametrize("case", params([PROVIDER_LIST]))
def test_provider_lists_all_metrics(case: UpstreamCase) -> None:
    config = rules_config(default_config("1m", ""))
    assert set(config.series_queries()) == {CONTAINER_SELECTOR, NAMESPACED_SELECTOR}
    assert listed(catalogue_for(config, case.data["series"])) == case.data["want"]
