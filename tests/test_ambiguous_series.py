"""Several series for one object under a rule that does not aggregate: the value does not depend on the order
Prometheus returns them in (the highest is used), the adapter warns once per rule and object naming both, and
counts every occurrence in gpu_adapter_ambiguous_series_total."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from adapter.prometheus import Sample
from adapter.provider import Provider, QueryPlan
from adapter.rules import parse_rules
from adapter.rules.catalogue import build_catalogue
from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer

RULES = """\
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {matches: "^DCGM_FI_DEV_GPU_UTIL$", as: "gpu_util_per_series"}
  metricsQuery: '<<.Series>>{<<.LabelMatchers>>}'
"""
# infer-0 holds two GPUs; infer-1 one.
EXPOSITION = """\
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",namespace="ml",pod="infer-0"} 30
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",namespace="ml",pod="infer-0"} 90
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-2",namespace="ml",pod="infer-1"} 40
"""


def test_the_value_does_not_depend_on_the_order_of_the_series() -> None:
    config = parse_rules(RULES, "rules.yaml")
    query = config.series_queries()[0]
    series = [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "namespace": "ml", "pod": "infer-0"}]
    [binding] = build_catalogue(config, {query: series}).lookup("gpu_util_per_series", "pods")
    plan = QueryPlan((binding,), ("q",), ("infer-0",))
    samples = [Sample({"pod": "infer-0"}, 1.0, v) for v in (30.0, 90.0, float("nan"), 60.0)]
    for order in itertools.permutations(samples):
        values, _, ambiguous = Provider._merge(plan, [list(order)])
        assert values["infer-0"].value == 90.0
        assert ambiguous == [(binding, "infer-0", 3)]  # three finite series; NaN is no value


def test_ambiguous_series_are_answered_warned_once_and_counted(tmp_path: Path) -> None:
    endpoint = MetricsEndpoint(EXPOSITION)
    prom = PrometheusServer([endpoint.address], honor_labels=True)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    adapter = None
    try:
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="infer-1"}', timeout=30)
        adapter = AdapterProcess(prom.url, str(tmp_path / "certs"), ["--config", str(rules)])
        base = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods"
        for _ in range(2):
            body = adapter.get(f"{base}/*/gpu_util_per_series").json()
            assert {i["describedObject"]["name"]: i["value"] for i in body["items"]} == {"infer-0": "90",
                                                                                         "infer-1": "40"}
        metrics = adapter.get("/metrics").text
        assert re.search(r'^gpu_adapter_ambiguous_series_total\{rule="rules\[0\]"\} 2\.0$', metrics, re.M)
    finally:
        log = adapter.stop() if adapter is not None else ""
        prom.stop()
        endpoint.stop()
    warnings = [line for line in log.splitlines() if "returned 2 series" in line]
    assert len(warnings) == 1, log
    assert "rules[0]" in warnings[0] and "ml/infer-0" in warnings[0] and "pods" in warnings[0]
