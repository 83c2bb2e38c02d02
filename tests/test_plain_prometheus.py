"""What a cluster without the Prometheus Operator gets instead of the chart's PrometheusRule and ServiceMonitors:
docs/prometheus/gpu-autoscaler.rules.yaml (generated from the PrometheusRule: its rules equal what the chart renders,
the real promtool checks it and runs the chart's rule unit tests on it) and docs/prometheus/scrape-configs.yaml
(accepted by the real VictoriaMetrics). The scrape jobs scraping for real through Kubernetes discovery:
tests/test_install_check_e2e.py."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import yaml

from tests.support.k8s_validation import REPO, one, run, tool
from tests.test_chart import render
from tests.test_prometheus_rules import UNIT_TESTS

pytestmark = pytest.mark.tools

DOCS = REPO / "docs" / "prometheus"
RULES = DOCS / "gpu-autoscaler.rules.yaml"
SCRAPE = DOCS / "scrape-configs.yaml"
GENERATOR = REPO / "scripts" / "gen-prometheus-rules.py"


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GENERATOR), *args], capture_output=True, text=True, timeout=120)


def test_the_rules_file_is_current():
    proc = generate("--check")
    assert proc.returncode == 0, f"{proc.stderr}run: python scripts/gen-prometheus-rules.py"


def test_the_rules_file_holds_exactly_the_prometheus_rules_groups():
    plain = yaml.safe_load(RULES.read_text())
    assert list(plain) == ["groups"]
    assert plain["groups"] == one(render(), "PrometheusRule")["spec"]["groups"]


def test_promtool_accepts_the_rules_file():
    proc = run([tool("promtool"), "check", "rules", str(RULES)])
    assert "SUCCESS: 35 rules found" in proc.stdout  # as the chart's default PrometheusRule


def test_the_charts_rule_unit_tests_pass_on_the_plain_file(tmp_path):
    shutil.copy(RULES, tmp_path / "rules.yaml")
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    proc = run([tool("promtool"), "test", "rules", UNIT_TESTS.name], cwd=tmp_path, check=False)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_the_generator_writes_the_rules_for_your_values(tmp_path):
    out = tmp_path / "mine.rules.yaml"
    proc = generate("-o", str(out), "--", "--set", "exporter.service.name=gpu-metrics",
                    "--set", "prometheusRule.alerts=false", "--set", "adapter.rules.inferencePresets={vllm}")
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "values: --set exporter.service.name=gpu-metrics" in text
    groups = yaml.safe_load(text)["groups"]
    assert [g["name"] for g in groups] == ["gpu-autoscaler.recording", "gpu-autoscaler.inference",
                                           "gpu-autoscaler.capacity", "gpu-autoscaler.capacity-history"]
    assert 'job="gpu-metrics"' in text and "alert:" not in text
    assert "SUCCESS" in run([tool("promtool"), "check", "rules", str(out)]).stdout
    bad = generate("-o", str(out), "--", "--set", "prometheusRule.alerts=false",
                   "--set", "prometheusRule.recordingRules=false")
    assert bad.returncode != 0 and "renders no PrometheusRule" in bad.stderr


def test_the_check_notices_a_stale_file(tmp_path):
    stale = tmp_path / "rules.yaml"
    stale.write_text(RULES.read_text().replace("for: 5m", "for: 10m", 1))
    proc = generate("--check", "-o", str(stale))
    assert proc.returncode == 1 and "stale" in proc.stderr


def test_the_scrape_configs_are_accepted_by_victoriametrics():
    """Debian's promtool is built without Kubernetes discovery, so VictoriaMetrics (which reads the same format)
    checks the file; tests/test_install_check_e2e.py scrapes with it."""
    proc = run([tool("victoria-metrics"), f"-promscrape.config={SCRAPE}", "-promscrape.config.strictParse",
                "-promscrape.config.dryRun"])
    assert "is ok" in proc.stdout + proc.stderr
    jobs = {j["job_name"]: j for j in yaml.safe_load(SCRAPE.read_text())["scrape_configs"]}
    assert jobs["dcgm-exporter"]["honor_labels"] is True
    # The alerts in the rules file select the exporter's job by this name.
    assert 'up{job="dcgm-exporter"}' in RULES.read_text()
