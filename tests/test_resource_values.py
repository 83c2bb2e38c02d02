"""One value policy for every API: metrics.k8s.io (resourceRules) answers through the same rule as
custom.metrics.k8s.io. The same Prometheus answers, given to both, make the same decision per object: several series
that agree give their value, several that differ give none (counted and logged per rule), NaN is none, and a query
that reaches back further than the sample-age limit gives no value to an object without a recent sample. The rules
are the chart's defaults (charts/gpu-autoscaler/values.yaml: cAdvisor's irate(...[5m]) and its memory gauge)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from adapter.api.paths import MetricPath
from adapter.api.status import ApiError
from adapter.prometheus.client import Sample
from adapter.provider.custom import CustomMetrics
from adapter.provider.engine import Engine
from adapter.provider.resource import ResourceMetrics
from adapter.rulesfile.loader import load_rules
from tests.conformance.upstream import catalogue_for, rules_config, series
from tests.support.k8s_validation import REPO
from tests.test_provider_values import ScriptedPrometheus

pytestmark = pytest.mark.unit

MAX_AGE = 45.0
CHART = yaml.safe_load((REPO / "charts" / "gpu-autoscaler" / "values.yaml").read_text())


@pytest.fixture(scope="module")
def resource_rules(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"resourceRules": CHART["adapter"]["rules"]["resource"]}))
    return load_rules(str(path)).resource_rules


# The same series, read by custom.metrics.k8s.io: a Pods metric whose query also reaches back 5 minutes.
CUSTOM_RULES = rules_config([{
    "seriesQuery": 'container_cpu_usage_seconds_total{namespace!="",pod!=""}', "name": {"as": "cpu_rate"},
    "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
    "metricsQuery": "sum by (<<.GroupBy>>) (irate(<<.Series>>{<<.LabelMatchers>>}[5m]))"}])
CATALOGUE = catalogue_for(CUSTOM_RULES, [series("container_cpu_usage_seconds_total", namespace="ml", pod="a")])


def cpu(value: float, pod: str = "a", container: str = "main", **extra: str) -> Sample:
    return Sample({"namespace": "ml", "pod": pod, "container": container, **extra}, 1.7e9, value)


@dataclass(frozen=True)
class Case:
    name: str
    samples: tuple[Sample, ...]  # what the value query answers for pod a (one container)
    recent: bool  # whether the freshness query finds a recent sample for it
    value: float | None  # the decision: the value, or None for no value


CASES = (
    Case("one series", (cpu(0.5),), True, 0.5),
    Case("several series that agree", (cpu(0.5, id="x"), cpu(0.5, id="y")), True, 0.5),
    Case("several series that differ", (cpu(0.5, id="x"), cpu(0.7, id="y")), True, None),
    Case("NaN", (cpu(float("nan")),), True, None),
    Case("no recent sample behind the 5m window", (cpu(0.5),), False, None),
)


def resource_answer(rules: Any, case: Case) -> tuple[float | None, ScriptedPrometheus, Engine]:
    memory = [cpu(1 << 30)]
    fresh = [cpu(3)] if case.recent else []
    prom = ScriptedPrometheus({"count_over_time(container_cpu": fresh, "container_cpu_usage": list(case.samples),
                               "container_memory": memory})
    engine = Engine(prom, lambda: None, max_sample_age=lambda: MAX_AGE)  # type: ignore[arg-type]
    metrics = ResourceMetrics(engine, lambda: rules)
    try:
        [pod] = asyncio.run(metrics.pods("ml", "a"))
    except ApiError as exc:
        assert exc.code == 404
        return None, prom, engine
    [(_, usage)] = pod.containers
    return usage.cpu_cores, prom, engine


def custom_answer(case: Case) -> float | None:
    prom = ScriptedPrometheus({"count_over_time": [cpu(3)] if case.recent else [], "irate": list(case.samples)})
    engine = Engine(prom, lambda: CATALOGUE, max_sample_age=lambda: MAX_AGE)  # type: ignore[arg-type]
    try:
        [item] = asyncio.run(CustomMetrics(engine).values(MetricPath("ml", "pods", "a", "cpu_rate")))
    except ApiError as exc:
        assert exc.code == 404
        return None
    return item.value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_metrics_k8s_io_decides_as_custom_metrics_do(resource_rules: Any, case: Case) -> None:
    value, _, _ = resource_answer(resource_rules, case)
    assert value == case.value
    assert custom_answer(case) == case.value


def test_the_freshness_query_asks_the_cpu_series_of_the_pod_within_the_limit(resource_rules: Any) -> None:
    _, prom, _ = resource_answer(resource_rules, CASES[0])
    assert prom.queries[2] == ('count by (pod,container) (count_over_time(container_cpu_usage_seconds_total'
                               '{namespace="ml",pod="a"}[45000ms]))')
    assert len(prom.queries) == 3  # the memory query is a plain selector (stale at once): nothing to ask


def test_no_limit_or_a_limit_beyond_the_window_asks_nothing_more(resource_rules: Any) -> None:
    for max_age in (None, 600.0):
        prom = ScriptedPrometheus({"container_cpu_usage": [cpu(0.5)], "container_memory": [cpu(1 << 30)]})
        engine = Engine(prom, lambda: None, max_sample_age=lambda age=max_age: age)  # type: ignore[arg-type]
        [pod] = asyncio.run(ResourceMetrics(engine, lambda: resource_rules).pods("ml", "a"))
        assert pod.containers[0][1].cpu_cores == 0.5 and len(prom.queries) == 2


def test_nodes_follow_the_same_policy(resource_rules: Any) -> None:
    def node(value: float, **extra: str) -> Sample:
        return Sample({"instance": "node-a", **extra}, 1.7e9, value)

    prom = ScriptedPrometheus({"count_over_time": [node(3)], "node_cpu": [node(1.5, x="1"), node(1.5, x="2")],
                               "node_memory": [node(4 << 30)]})
    engine = Engine(prom, lambda: None, max_sample_age=lambda: MAX_AGE)  # type: ignore[arg-type]
    [usage] = asyncio.run(ResourceMetrics(engine, lambda: resource_rules).nodes("node-a"))
    assert usage.usage.cpu_cores == 1.5
    assert prom.queries[2].startswith("count by (instance) (count_over_time(node_cpu_seconds_total{")
    stale = ScriptedPrometheus({"count_over_time": [], "node_cpu": [node(1.5)], "node_memory": [node(4 << 30)]})
    engine = Engine(stale, lambda: None, max_sample_age=lambda: MAX_AGE)  # type: ignore[arg-type]
    with pytest.raises(ApiError) as err:
        asyncio.run(ResourceMetrics(engine, lambda: resource_rules).nodes("node-a"))
    assert err.value.code == 404


def test_differing_series_are_counted_per_resource_rule_and_logged_once(resource_rules: Any,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    case = CASES[2]
    with caplog.at_level(logging.WARNING, logger="adapter.provider"):
        _, _, engine = resource_answer(resource_rules, case)
    assert engine.series_conflicts.totals == {("resourceRules.cpu.containerQuery", "conflict"): 1}
    [record] = [r for r in caplog.records if "different values" in r.getMessage()]
    assert "container ml/a/main" in record.getMessage() and "containerQuery" in record.getMessage()
