"""Rules engine: Go regexp expansion, resource names, discovery catalogue, query rendering and injection."""

from __future__ import annotations

import re
import subprocess
import time
import tracemalloc
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import promql_parser
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.api.status import ApiError
from adapter.rules import (
    Binding,
    GroupResource,
    MetricInfo,
    ResourceError,
    api_version,
    build_catalogue,
    is_namespaced,
    kind,
    normalise_resource,
    result_object_name,
)
from adapter.rules.naming import compile_regexp, expand
from adapter.rules.promql import matcher, quote, regex_literal
from adapter.rulesfile.loader import parse_rules
from tests.support.queries import custom_promql, external_promql
from tests.support.tools import require_tool
from tests.test_rules_config import DCGM_ADAPTER_RULES, HELM_DEFAULT_RULES

pytestmark = pytest.mark.unit

PODS = GroupResource("", "pods")
NAMESPACES = GroupResource("", "namespaces")
SERVICES = GroupResource("", "services")
NODES = GroupResource("", "nodes")
JOBS = GroupResource("batch", "jobs")
ENDPOINTS = GroupResource("", "endpoints")
DEPLOYMENTS = GroupResource("apps", "deployments")


def assert_promql(
    tmp_path: Path, series: Mapping[str, float], expr: str, expected: Sequence[tuple[dict[str, str], float]]
) -> None:
    """Evaluate ``expr`` with real Prometheus (``promtool test rules``) over one-sample ``series``."""
    samples = [
        {"labels": "{" + ",".join(matcher(k, "=", v) for k, v in labels.items()) + "}", "value": value}
        for labels, value in expected
    ]
    doc = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": str(v)} for s, v in series.items()],
                "promql_expr_test": [{"expr": expr, "eval_time": "0m", "exp_samples": samples}],
            }
        ],
    }
    path = tmp_path / "promtool-test.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    promtool = require_tool("promtool")
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def selectors(query: str) -> list[promql_parser.VectorSelector]:
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(promql_parser.parse(query), visit)
    return found


_OPS = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}


def matchers_of(selector: promql_parser.VectorSelector) -> list[tuple[str, str, str]]:
    return [(m.name, _OPS[str(m.op)], m.value) for m in selector.matchers.matchers]


# --- Go regexp ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expanded"),
    [
        ("$1", "cpu"),
        ("${1}", "cpu"),
        ("$1x", ""),  # the group named "1x", which does not exist
        ("${1}x", "cpux"),
        ("$1_per_second", ""),  # likewise "1_per_second"
        ("${1}_per_second", "cpu_per_second"),
        ("$$", "$"),
        ("$$1", "$1"),
        ("$0", "container_cpu_seconds_total"),
        ("$unit", "seconds"),
        ("${unit}s", "secondss"),
        ("$unit-$1", "seconds-cpu"),
        ("$2", "seconds"),  # named groups are numbered too
        ("$3", ""),  # out of range
        ("$01", ""),  # leading zero: a name, not a number
        ("$", "$"),
        ("a$-b", "a$-b"),  # malformed: the $ is kept
        ("${1", "${1"),  # missing brace
        ("${}", "${}"),
        ("x", "x"),
    ],
)
def test_go_regexp_expansion(template: str, expanded: str) -> None:
    match = compile_regexp(r"^container_(.*)_(?P<unit>seconds)_total$").search("container_cpu_seconds_total")
    assert match is not None
    assert expand(template, match) == expanded


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("[[:alpha:]]+_total$", "http_total", True),
        ("^[[:digit:]]+$", "12a", False),
        (r"(?<unit>seconds)\z", "cpu_seconds", True),  # Go 1.22 spelling of a named group; \z end of text
        ("(?i)^DCGM_", "dcgm_fi", True),
    ],
)
def test_go_regexp_spellings(pattern: str, name: str, matches: bool) -> None:
    assert bool(compile_regexp(pattern).search(name)) is matches


@pytest.mark.parametrize("pattern", ["(?=a)", "(?<!a)b", r"(a)\1", "a++", "[[:alpha:]", "[[:foo:]]", r"a\Z", "(?P=x)"])
def test_go_regexp_rejects_what_go_rejects(pattern: str) -> None:
    with pytest.raises(ValueError, match="invalid regex"):
        compile_regexp(pattern)


# --- resources ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pods", PODS),
        ("pod", PODS),
        ("Pod", PODS),
        ("po", PODS),
        ("svc", SERVICES),
        ("deployments.apps", DEPLOYMENTS),
        ("deployment.apps", DEPLOYMENTS),
        ("deployment", DEPLOYMENTS),
        ("Deployment", DEPLOYMENTS),
        ("job", JOBS),
        ("cronjobs.batch", GroupResource("batch", "cronjobs")),
        ("hpa", GroupResource("autoscaling", "horizontalpodautoscalers")),
        ("ingress", GroupResource("networking.k8s.io", "ingresses")),
        ("ingresses.networking.k8s.io", GroupResource("networking.k8s.io", "ingresses")),
        ("endpoints", ENDPOINTS),
        ("configmaps", GroupResource("", "configmaps")),
        ("pvc", GroupResource("", "persistentvolumeclaims")),
        (
            "inferencepools.inference.networking.x-k8s.io",
            GroupResource("inference.networking.x-k8s.io", "inferencepools"),
        ),
        ("Widgets.Example.COM", GroupResource("example.com", "widgets")),
    ],
)
def test_normalise_resource(text: str, expected: GroupResource) -> None:
    assert normalise_resource(text) == expected


@pytest.mark.parametrize("text", ["", "  ", "pods/x", "-pods", "pods.", "a b"])
def test_normalise_resource_rejects_invalid(text: str) -> None:
    with pytest.raises(ResourceError):
        normalise_resource(text)


def test_group_resource_kind_version_scope() -> None:
    assert str(PODS) == "pods" and str(DEPLOYMENTS) == "deployments.apps"
    assert [kind(gr) for gr in (PODS, SERVICES, DEPLOYMENTS, JOBS, ENDPOINTS)] == [
        "Pod", "Service", "Deployment", "Job", "Endpoints",
    ]  # fmt: skip
    assert kind(GroupResource("example.com", "widgets")) == "Widget"
    assert kind(GroupResource("example.com", "policies")) == "Policy"
    assert api_version(PODS) == "/v1"
    assert api_version(DEPLOYMENTS) == "apps/v1"
    assert api_version(JOBS) == "batch/v1"
    assert api_version(GroupResource("autoscaling", "horizontalpodautoscalers")) == "autoscaling/v2"
    assert api_version(GroupResource("networking.k8s.io", "ingresses")) == "networking.k8s.io/v1"
    assert [is_namespaced(gr) for gr in (NAMESPACES, NODES, GroupResource("", "persistentvolumes"))] == [False] * 3
    assert is_namespaced(GroupResource("storage.k8s.io", "storageclasses")) is False
    assert [is_namespaced(gr) for gr in (PODS, SERVICES, DEPLOYMENTS, GroupResource("example.com", "widgets"))] == [
        True
    ] * 4


# --- catalogue ----------------------------------------------------------------------------------------------

CADVISOR = '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
GENERIC = '{namespace!="",__name__!~"^container_.*"}'
TARGET = {"instance": "10.0.0.7:8080", "job": "kubernetes-pods", "service": "web", "endpoint": "http"}


def helm_series() -> dict[str, list[dict[str, str]]]:
    pod = {"namespace": "shop", "pod": "web-1", "container": "app"}
    return {
        CADVISOR: [
            {"__name__": "container_cpu_usage_seconds_total", **pod, **TARGET, "cpu": "total", "id": "/x"},
            {"__name__": "container_memory_working_set_bytes", **pod, **TARGET, "image": "app:1"},
            {"__name__": "container_network_receive_bytes_total", **pod, **TARGET, "interface": "eth0"},
        ],
        GENERIC: [
            {"__name__": "http_requests_total", **pod, **TARGET, "code": "200", "method": "GET"},
            {"__name__": "http_requests_total", **pod, **TARGET, "code": "500", "method": "POST"},
            {"__name__": "process_cpu_seconds_total", **pod, **TARGET},
            {"__name__": "queue_length", "namespace": "shop", "pod": "worker-1", "deployment": "worker"},
            {"__name__": "kube_pod_info", "namespace": "shop", "pod": "web-1", "node": "gpu-node-1", **TARGET},
        ],
    }


def test_helm_default_rules_catalogue() -> None:
    catalogue = build_catalogue(parse_rules(HELM_DEFAULT_RULES, "values.yaml"), helm_series())
    found = {(m.name, str(m.group_resource), m.namespaced) for m in catalogue.custom_metrics()}
    expected = {
        *((name, gr, gr != "namespaces") for name in ("cpu_usage", "network_receive_bytes", "memory_working_set_bytes")
          for gr in ("pods", "namespaces")),  # cAdvisor rules: overrides namespace/pod only
        *((name, gr, gr != "namespaces") for name in ("http_requests", "process_cpu")
          for gr in ("pods", "namespaces", "services", "jobs.batch", "endpoints")),  # `job` → jobs.batch
        *(("queue_length", gr, gr != "namespaces") for gr in ("pods", "namespaces", "deployments.apps")),
        *(("kube_pod_info", gr, gr not in ("namespaces", "nodes"))
          for gr in ("pods", "namespaces", "services", "jobs.batch", "endpoints", "nodes")),
    }  # fmt: skip
    assert found == expected
    assert catalogue.custom_metrics() == sorted(catalogue.custom_metrics())
    assert catalogue.external_metrics() == []

    [cpu] = catalogue.lookup("cpu_usage", "pod")
    assert (cpu.series, cpu.resource_label, cpu.namespace_label) == (
        "container_cpu_usage_seconds_total",
        "pod",
        "namespace",
    )
    assert custom_promql(cpu, namespace="shop", names=["web-1", "web-2"]) == (
        'sum(rate(container_cpu_usage_seconds_total{namespace="shop",pod=~"web-1|web-2",container!="POD"}[5m])) '
        "by (pod)"
    )
    [requests] = catalogue.lookup("http_requests", "Pod")
    assert custom_promql(requests, namespace="shop", names=["web-1"], metric_selector="code in (500,503)") == (
        'sum(rate(http_requests_total{code=~"500|503",namespace="shop",pod="web-1"}[5m])) by (pod)'
    )
    [by_job] = catalogue.lookup("http_requests", "jobs.batch")
    assert by_job.resource_label == "job" and by_job.namespace_label == "namespace"
    [node] = catalogue.lookup("kube_pod_info", "node")
    assert (node.resource_label, node.namespace_label, node.namespaced) == ("node", None, False)
    assert custom_promql(node, namespace=None, names=["gpu-node-1"]) == (
        'sum(kube_pod_info{node="gpu-node-1"}) by (node)'
    )
    [ns] = catalogue.lookup("memory_working_set_bytes", "namespaces")
    assert custom_promql(ns, namespace=None, names=["shop"]) == (
        'sum(container_memory_working_set_bytes{namespace="shop",container!="POD"}) by (namespace)'
    )
    [deployment] = catalogue.lookup("queue_length", GroupResource("apps", "deployment"))
    assert deployment.resource_label == "deployment"
    assert catalogue.lookup("queue_length", "nodes") == ()
    assert catalogue.lookup("no_such_metric", "pods") == ()
    assert catalogue.lookup("queue_length", "not a resource") == ()
    rule5 = parse_rules(HELM_DEFAULT_RULES, "values.yaml").rules[4]
    assert catalogue.rule_metrics(rule5) == []  # a different config object's rule


def test_dcgm_adapter_rules_catalogue_and_query() -> None:
    config = parse_rules(DCGM_ADAPTER_RULES, "rules.yaml")
    exporter_target = {
        "namespace": "gpu-operator",
        "pod": "dcgm-exporter-x7k2p",
        "container": "dcgm-exporter",
        **TARGET,
    }
    gpu = {"gpu": "0", "UUID": "GPU-1", "device": "nvidia0", "modelName": "NVIDIA A10G", "Hostname": "node-1"}
    workload = {"exported_namespace": "default", "exported_pod": "vision-api-1", "exported_container": "api"}
    series = {
        config.series_queries()[0]: [
            {"__name__": name, **exporter_target, **gpu, **workload}
            for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")
        ]
    }
    catalogue = build_catalogue(config, series)
    assert catalogue.custom_metrics() == [
        MetricInfo("DCGM_FI_DEV_FB_USED", NAMESPACES, False),
        MetricInfo("DCGM_FI_DEV_FB_USED", PODS, True),
        MetricInfo("DCGM_FI_DEV_GPU_UTIL", NAMESPACES, False),
        MetricInfo("DCGM_FI_DEV_GPU_UTIL", PODS, True),
    ]
    [util] = catalogue.lookup("DCGM_FI_DEV_GPU_UTIL", "pods")
    assert (util.resource_label, util.namespace_label) == ("exported_pod", "exported_namespace")
    query = custom_promql(util, namespace="default", names=["vision-api-1"])
    assert (
        query == 'avg(DCGM_FI_DEV_GPU_UTIL{exported_namespace="default",exported_pod="vision-api-1"}) by (exported_pod)'
    )
    assert result_object_name(util, {"exported_pod": "vision-api-1", "pod": "dcgm-exporter-x7k2p"}) == "vision-api-1"
    assert result_object_name(util, {"pod": "dcgm-exporter-x7k2p"}) is None


RULE = """\
- seriesQuery: '{q}'
  resources: {resources}
  {extra}
  metricsQuery: '{query}'
"""


def rules_doc(*rules: dict[str, str], key: str = "rules") -> str:
    defaults = {"extra": "", "query": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"}
    return f"{key}:\n" + "".join(RULE.format(**{**defaults, **r}) for r in rules)


def test_template_maps_labels_and_needs_a_namespace_label_for_namespaced_objects() -> None:
    config = parse_rules(rules_doc({"q": 'foo{pod!=""}', "resources": "{template: <<.Resource>>}"}), "r.yaml")
    series = {
        'foo{pod!=""}': [
            {"__name__": "foo", "pod": "a", "node": "n", "namespace": "x"},
            {"__name__": "bar", "pod": "a", "node": "n"},  # no namespace: no pods/bar, but nodes/bar
        ]
    }
    found = {(m.name, str(m.group_resource)) for m in build_catalogue(config, series).custom_metrics()}
    assert found == {("foo", "pods"), ("foo", "nodes"), ("foo", "namespaces"), ("bar", "nodes")}


def test_template_with_group_and_literal_text() -> None:
    config = parse_rules(
        rules_doc(
            {"q": 'a{x!=""}', "resources": "{template: '<<.Group>>_<<.Resource>>'}"},
            {"q": 'b{x!=""}', "resources": "{template: 'kube_<<.Resource>>'}"},
        ),
        "r.yaml",
    )
    series = {
        'a{x!=""}': [{"__name__": "a", "apps_deployment": "d", "batch_job": "j", "core_pod": "p", "namespace": "n"}],
        'b{x!=""}': [{"__name__": "b", "kube_pod": "p", "kube_namespace": "n", "kubexpod": "p", "pod": "p"}],
    }
    catalogue = build_catalogue(config, series)
    found = {(m.name, str(m.group_resource)) for m in catalogue.custom_metrics()}
    # `<<.Group>>_<<.Resource>>` cannot name core resources (their group is empty), as in prometheus-adapter.
    assert found == {("b", "pods"), ("b", "namespaces")}
    [pods] = catalogue.lookup("b", "pods")
    assert (pods.resource_label, pods.namespace_label) == ("kube_pod", "kube_namespace")
    config_with_ns = parse_rules(
        rules_doc(
            {
                "q": 'a{x!=""}',
                "resources": "{template: '<<.Group>>_<<.Resource>>', overrides: {namespace: {resource: namespace}}}",
            }
        ),
        "r.yaml",
    )
    found = {(m.name, str(m.group_resource)) for m in build_catalogue(config_with_ns, series).custom_metrics()}
    assert found == {("a", "deployments.apps"), ("a", "jobs.batch"), ("a", "namespaces")}


def test_overrides_win_over_template_and_custom_resources_with_group() -> None:
    config = parse_rules(
        rules_doc(
            {
                "q": 'm{x!=""}',
                "resources": "{template: <<.Resource>>, overrides: {exported_pod: {resource: pod}, "
                "pool: {group: inference.networking.x-k8s.io, resource: inferencepools}}}",
            }
        ),
        "r.yaml",
    )
    series = {'m{x!=""}': [{"__name__": "m", "pod": "exporter", "exported_pod": "app", "namespace": "n", "pool": "p"}]}
    catalogue = build_catalogue(config, series)
    [pods] = catalogue.lookup("m", "pods")
    assert pods.resource_label == "exported_pod"
    [pool] = catalogue.lookup("m", "inferencepools.inference.networking.x-k8s.io")
    assert (pool.resource_label, pool.namespaced) == ("pool", True)


def test_series_filters_and_name_mapping() -> None:
    config = parse_rules(
        rules_doc(
            {
                "q": '{__name__=~"^app_.*",namespace!=""}',
                "resources": "{template: <<.Resource>>}",
                "extra": "seriesFilters: [{is: ^app_}, {isNot: _bucket$}]\n"
                "  name: {matches: '^app_(.*)_total$', as: '${1}_per_second'}",
            }
        ),
        "r.yaml",
    )
    names = ["app_requests_total", "app_latency_bucket", "app_up", "other_requests_total", "app_errors_total"]
    series = {config.series_queries()[0]: [{"__name__": n, "namespace": "a", "pod": "b"} for n in names]}
    found = sorted({m.name for m in build_catalogue(config, series).custom_metrics()})
    assert found == ["errors_per_second", "requests_per_second"]


def test_several_rules_serving_one_metric_are_all_kept_in_rule_order() -> None:
    honor = {"q": 'gpu{pod!=""}', "resources": "{overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}"}
    exported = {
        "q": 'gpu{exported_pod!=""}',
        "resources": "{overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}",
    }
    for first, second in ((honor, exported), (exported, honor)):
        config = parse_rules(rules_doc(first, second), "r.yaml")
        labels = {"__name__": "gpu", "namespace": "a", "pod": "b", "exported_namespace": "c", "exported_pod": "d"}
        catalogue = build_catalogue(config, {first["q"]: [labels], second["q"]: [labels]})
        bindings = catalogue.lookup("gpu", "pods")
        assert [b.rule for b in bindings] == list(config.rules)
        assert [b.resource_label for b in bindings] == [
            "pod" if r is honor else "exported_pod" for r in (first, second)
        ]
        assert catalogue.custom_metrics() == [MetricInfo("gpu", NAMESPACES, False), MetricInfo("gpu", PODS, True)]


def test_namespaced_resource_without_namespace_mapping_matches_by_name() -> None:
    config = parse_rules(
        rules_doc({"q": 'up{service!=""}', "resources": "{overrides: {service: {resource: service}}}"}), "r.yaml"
    )
    catalogue = build_catalogue(config, {'up{service!=""}': [{"__name__": "up", "service": "s", "namespace": "other"}]})
    assert catalogue.custom_metrics() == [MetricInfo("up", SERVICES, True)]
    [binding] = catalogue.lookup("up", "svc")
    assert binding.namespace_label is None
    assert (
        custom_promql(binding, namespace="default", names=["s"])
        == 'sum(up{service="s"}) by (service)'
    )


def test_external_rules() -> None:
    config = parse_rules(
        rules_doc(
            {"q": 'queue_messages{queue!=""}', "resources": "{overrides: {namespace: {resource: namespace}}}"},
            {"q": 'cluster_gpus{pool!=""}', "resources": "{namespaced: false, template: <<.Resource>>}"},
            {"q": 'fleet_load{x!=""}', "resources": "{template: <<.Resource>>}"},
            {"q": 'global_rate{x!=""}', "resources": "{}"},
            key="externalRules",
        ),
        "r.yaml",
    )
    series = {
        'queue_messages{queue!=""}': [{"__name__": "queue_messages", "queue": "orders", "namespace": "shop"}],
        'cluster_gpus{pool!=""}': [{"__name__": "cluster_gpus", "pool": "a10g", "namespace": "x"}],
        'fleet_load{x!=""}': [{"__name__": "fleet_load", "x": "1"}],  # no namespace label: the rule's own is used
        'global_rate{x!=""}': [{"__name__": "global_rate", "x": "1"}],
    }
    catalogue = build_catalogue(config, series)
    assert catalogue.custom_metrics() == []
    assert catalogue.external_metrics() == ["cluster_gpus", "fleet_load", "global_rate", "queue_messages"]
    [queue] = catalogue.external_lookup("queue_messages")
    assert external_promql(queue, namespace="shop", metric_selector="queue=orders") == (
        'sum(queue_messages{queue="orders",namespace="shop"}) by ()'
    )
    [gpus] = catalogue.external_lookup("cluster_gpus")
    assert gpus.namespace_label is None and gpus.namespaced is False
    assert (
        external_promql(gpus, namespace="shop", metric_selector="pool=a10g")
        == 'sum(cluster_gpus{pool="a10g"}) by ()'
    )
    [fleet] = catalogue.external_lookup("fleet_load")
    assert external_promql(fleet, namespace="shop") == 'sum(fleet_load{namespace="shop"}) by ()'
    [global_rate] = catalogue.external_lookup("global_rate")
    assert external_promql(global_rate, namespace="shop") == "sum(global_rate{}) by ()"
    assert result_object_name(queue, {"queue": "orders"}) is None
    assert catalogue.external_lookup("nope") == ()


def test_label_values_by_name_and_group_by_slice() -> None:
    query = (
        'sum(<<.Series>>{pod=~"<<.LabelValuesByName.pod>>",namespace="<<index .LabelValuesByName "namespace">>"})'
        " by (<<.GroupBy>>) # <<.GroupBySlice>>"
    )
    config = parse_rules(
        "rules:\n- seriesQuery: 'm{pod!=\"\"}'\n  resources: {template: <<.Resource>>}\n"
        f"  metricsQuery: {yaml.safe_dump(query, width=1000).strip()}\n",
        "r.yaml",
    )
    catalogue = build_catalogue(config, {'m{pod!=""}': [{"__name__": "m", "pod": "a", "namespace": "b"}]})
    [binding] = catalogue.lookup("m", "pods")
    assert custom_promql(binding, namespace="ns", names=["b.1", "a"]) == (
        'sum(m{pod=~"a|b\\\\.1",namespace="ns"}) by (pod) # [pod]'
    )
    assert custom_promql(binding, namespace="ns", names=None) == (
        'sum(m{pod=~".+",namespace="ns"}) by (pod) # [pod]'
    )


def test_query_errors() -> None:
    config = parse_rules(rules_doc({"q": 'm{pod!=""}', "resources": "{template: <<.Resource>>}"}), "r.yaml")
    [binding] = build_catalogue(config, {'m{pod!=""}': [{"__name__": "m", "pod": "a", "namespace": "b"}]}).lookup(
        "m", "pods"
    )
    assert custom_promql(binding, namespace="b", names=None) == (
        'sum(m{namespace="b",pod!=""}) by (pod)'
    )
    # A selector that selects nothing, and a namespaced resource asked at the root: no query, a 404 Status.
    with pytest.raises(ApiError, match="could not find the metric m for pods") as nothing:
        custom_promql(binding, namespace="b", names=[])
    with pytest.raises(ApiError, match="could not find the metric m for pods") as rootless:
        custom_promql(binding, namespace=None, names=["a"])
    assert nothing.value.code == rootless.value.code == 404


def lazy_series(count: int) -> Iterator[dict[str, str]]:
    for i in range(count):
        labels = {
            "__name__": f"DCGM_FI_DEV_METRIC_{i % 8}",
            "namespace": f"ns-{i % 50}",
            "pod": f"pod-{i}",
            "container": "main",
            "instance": f"10.0.{i % 256}.{i % 7}:9400",
        }
        if i % 3 == 0:
            labels["gpu"] = str(i % 8)
        yield labels


def test_catalogue_memory_grows_with_distinct_shapes_not_series() -> None:
    config = parse_rules(
        rules_doc(
            {
                "q": '{__name__=~"DCGM_.*"}',
                "resources": "{overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}",
            },
            {"q": '{__name__=~"DCGM_.*"}', "resources": "{template: <<.Resource>>}",
             "extra": "name: {matches: '^DCGM_(.*)$', as: 'DCGM_${1}'}"},
        ),
        "r.yaml",
    )
    query = config.series_queries()[0]
    assert config.series_queries() == (query,)
    start = time.perf_counter()
    catalogue = build_catalogue(config, {query: lazy_series(100_000)})
    elapsed = time.perf_counter() - start
    print(f"\nbuild_catalogue over 100,000 series: {elapsed * 1000:.0f} ms")
    assert len(catalogue.series_shapes[query]) == 16  # 8 names x (with, without gpu)
    assert all("__name__" not in labels for _, labels in catalogue.series_shapes[query])
    assert len(catalogue.custom_metrics()) == 16  # 8 names x (pods, namespaces)
    assert [b.resource_label for b in catalogue.lookup("DCGM_FI_DEV_METRIC_3", "pods")] == ["pod", "pod"]
    assert elapsed < 10  # generous: the figure above is what matters

    tracemalloc.start()
    build_catalogue(config, {query: lazy_series(100_000)})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"peak traced memory while building: {peak / 1024:.0f} KiB")
    assert peak < 2 * 1024 * 1024


# --- injection ----------------------------------------------------------------------------------------------

LABEL_VALUES_QUERY = 'sum(<<.Series>>{<<.LabelMatchers>>,pod=~"<<.LabelValuesByName.pod>>"}) by (<<.GroupBy>>)'


def _injection_bindings() -> tuple[Binding, Binding]:
    config = parse_rules(
        "rules:\n"
        "- seriesQuery: 'm{pod!=\"\"}'\n  resources: {template: <<.Resource>>}\n"
        "  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'\n"
        "- seriesQuery: 'm{pod!=\"\"}'\n  resources: {template: <<.Resource>>}\n"
        f"  metricsQuery: {yaml.safe_dump(LABEL_VALUES_QUERY, width=1000).strip()}\n",
        "r.yaml",
    )
    catalogue = build_catalogue(config, {'m{pod!=""}': [{"__name__": "m", "pod": "a", "namespace": "b"}]})
    plain, with_values = catalogue.lookup("m", "pods")
    return plain, with_values


PLAIN, WITH_VALUES = _injection_bindings()
texts = st.text(min_size=1, max_size=30)
# What a metricLabelSelector can carry (Kubernetes label values): anything else is a 400 before any PromQL.
label_values = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?", fullmatch=True)
metric_selector = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["code", "le", "method"]), st.sampled_from(["=", "!="]),
                  label_values.map(lambda v: [v])),
        st.tuples(
            st.sampled_from(["code", "route"]),
            st.sampled_from(["in", "notin"]),
            st.lists(label_values, min_size=1, max_size=3),
        ),
    ),
    max_size=3,
)


def _metric_matchers(selector: list[tuple[str, str, list[str]]]) -> tuple[str, list[tuple[str, str, str]]]:
    """The metricLabelSelector, and the matchers it must become (the selector parser orders them by label)."""
    written, expected = [], []
    for label, op, values in sorted(selector, key=lambda requirement: requirement[0]):
        if op in ("=", "!="):
            written.append(f"{label}{op}{values[0]}")
            expected.append((label, op, values[0]))
        else:
            written.append(f"{label} {op} ({','.join(values)})")
            expected.append(_one_of_expected(label, values, negate=op == "notin"))
    return ",".join(written), expected


def _one_of_expected(label: str, values: list[str], negate: bool = False) -> tuple[str, str, str]:
    unique = sorted(set(values))
    if len(unique) == 1:
        return (label, "!=" if negate else "=", unique[0])
    return (label, "!~" if negate else "=~", "|".join(regex_literal(v) for v in unique))


@settings(max_examples=150, deadline=None)
@given(names=st.lists(texts, min_size=1, max_size=4), namespace=texts, selector=metric_selector)
def test_custom_query_injection(names: list[str], namespace: str, selector: list[tuple[str, str, list[str]]]) -> None:
    metric_selector, expected = _metric_matchers(selector)
    expected += [("namespace", "=", namespace), _one_of_expected("pod", names)]
    query = custom_promql(PLAIN, namespace=namespace, names=names, metric_selector=metric_selector)
    [selected] = selectors(query)
    assert selected.name == "m"
    assert matchers_of(selected) == expected

    query = custom_promql(WITH_VALUES, namespace=namespace, names=names, metric_selector=metric_selector)
    [selected] = selectors(query)
    found = matchers_of(selected)
    assert found[:-1] == expected
    label, op, value = found[-1]
    assert (label, op) == ("pod", "=~")
    assert value == "|".join(regex_literal(n) for n in sorted(set(names)))
    assert all(re.fullmatch(value, n) for n in names)


@settings(max_examples=100, deadline=None)
@given(namespace=texts, selector=metric_selector)
def test_external_query_injection(namespace: str, selector: list[tuple[str, str, list[str]]]) -> None:
    config = parse_rules(
        rules_doc({"q": 'q{x!=""}', "resources": "{template: <<.Resource>>}"}, key="externalRules"), "r.yaml"
    )
    [binding] = build_catalogue(config, {'q{x!=""}': [{"__name__": "q", "namespace": "a"}]}).external_lookup("q")
    metric_selector, expected = _metric_matchers(selector)
    [selected] = selectors(external_promql(binding, namespace=namespace, metric_selector=metric_selector))
    assert matchers_of(selected) == [*expected, ("namespace", "=", namespace)]


@pytest.mark.e2e
@pytest.mark.tools
def test_escaped_names_select_exactly_those_objects_in_real_prometheus(tmp_path: Path) -> None:
    names = ['a"b', "c\\d", "e.f", "g|h", "ü-ñ", "(x)*"]
    decoys = ["eXf", "g", "h", "x", "(x)", "ab"]
    series = {f'm{{namespace="ns",pod={quote(n)}}}': float(i) for i, n in enumerate(names + decoys)}
    config = parse_rules(rules_doc({"q": 'm{pod!=""}', "resources": "{template: <<.Resource>>}"}), "r.yaml")
    [binding] = build_catalogue(config, {'m{pod!=""}': [{"__name__": "m", "pod": "a", "namespace": "b"}]}).lookup(
        "m", "pods"
    )
    query = custom_promql(binding, namespace="ns", names=names)
    assert_promql(tmp_path, series, query, [({"pod": n}, float(i)) for i, n in enumerate(names)])
    single = custom_promql(binding, namespace="ns", names=["e.f"])
    assert_promql(tmp_path, series, single, [({"pod": "e.f"}, 2.0)])
