"""The chart's PrometheusRule with the real promtool (check rules, and unit tests of the recording rules' values and
the alerts' timing), and the Grafana dashboard's queries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import promql_parser
import pytest
import yaml

from tests.support.k8s_validation import REPO, find, one, run, tool
from tests.test_chart import CHART, render

pytestmark = pytest.mark.tools

UNIT_TESTS = REPO / "tests" / "promtool" / "gpu-autoscaler-rules.test.yaml"


def _rules_file(tmp_path: Path, *sets: str) -> Path:
    rule = one(render(None, *sets), "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def test_promtool_check_rules(tmp_path):
    rules = _rules_file(tmp_path)
    proc = run([tool("promtool"), "check", "rules", str(rules)])
    # 6 recording rules of the GPU series, 7 + 11 of the capacity path (tests/test_capacity_rules.py), 6 exporter
    # alerts and 5 of the autoscaling path.
    assert "SUCCESS: 35 rules found" in proc.stdout


def test_promtool_unit_tests(tmp_path):
    _rules_file(tmp_path)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    proc = run([tool("promtool"), "test", "rules", UNIT_TESTS.name], cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_unit_tests_fail_when_the_rules_change(tmp_path):
    """The unit tests pin the rules' behaviour: a critical XID list without 79 breaks them."""
    _rules_file(tmp_path, "prometheusRule.criticalXids={48,95}")
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    proc = run([tool("promtool"), "test", "rules", UNIT_TESTS.name], cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "GPUCriticalXid" in proc.stdout + proc.stderr


def test_alerts_follow_the_exporter_service_name():
    rule = one(render(None, "exporter.service.name=gpu-metrics"), "PrometheusRule")
    alerts = [r for g in rule["spec"]["groups"] if g["name"] == "gpu-autoscaler.alerts" for r in g["rules"]]
    assert alerts and all('job="gpu-metrics"' in a["expr"] for a in alerts)


def test_rule_groups_can_be_chosen():
    only_alerts = one(render(None, "prometheusRule.recordingRules=false"), "PrometheusRule")
    assert [g["name"] for g in only_alerts["spec"]["groups"]] == ["gpu-autoscaler.alerts", "gpu-autoscaler.autoscaling"]
    assert not find(render(None, "prometheusRule.recordingRules=false", "prometheusRule.alerts=false"),
                    "PrometheusRule")


def test_dashboard_is_the_shipped_json_and_every_query_parses():
    config_map = next(c for c in find(render(), "ConfigMap") if c["metadata"]["name"].endswith("-dashboard"))
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["gpu-autoscaler.json"])
    assert dashboard == json.loads((CHART / "files" / "dashboard.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 30
    for query in queries:
        promql_parser.parse(query.replace("$job", "dcgm-exporter").replace("$node", ".*")
                            .replace("$namespace", ".*"))
    # The panels read the series the chart's recording rules produce, the headroom's included.
    headroom = ("headroom.workload.name=vllm", "headroom.auto.enabled=true", "headroom.auto.requestsPerReplica=10")
    recorded = {r["record"] for g in one(render(None, *headroom), "PrometheusRule")["spec"]["groups"]
                for r in g["rules"] if "record" in r}
    used = {name for name in recorded if any(name in q for q in queries)}
    # The pod -> Deployment mapping is a join the inference rules record for the adapter, not a figure to plot.
    assert used == recorded - {"namespace_deployment_pod:kube_pod_owner:relabel"}


def test_the_dashboard_shows_the_capacity_path():
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    queries = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    for series in ('kube_pod_status_phase{phase="Pending"', "kube_horizontalpodautoscaler_status_desired_replicas",
                   "kube_horizontalpodautoscaler_status_current_replicas", "namespace_workload:headroom:info",
                   "gpu_adapter_request_duration_seconds_count", "gpu_adapter_request_duration_seconds_bucket",
                   "gpu_adapter_prometheus_query_errors_total"):
        assert series in queries, series
    # Every panel has a place of its own on the grid.
    cells = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in dashboard["panels"]]
    assert len(cells) == len(set(cells)) and len({p["id"] for p in dashboard["panels"]}) == len(cells)
