"""The capacity path's Prometheus rules as the chart renders them (issue 48, item 2): recording rules over
kube-state-metrics (time to scheduled and to ready of GPU pods per Deployment, split by whether the pod waited for a
new node, and their history), Karpenter's GPU figures, the provisioning time ``headroom.auto`` uses, and the alerts
of the autoscaling path. ``promtool test rules`` runs tests/promtool/capacity-*.test.yaml against them: every input
series there is shaped as kube-state-metrics, Karpenter or the kube-apiserver's aggregator write it, each file named
in the test file's header."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.presets.capacity_history import (
    HEADROOM_INFO,
    HEADROOM_PROVISIONING,
    PROVISIONING,
    capacity_groups,
)
from tests.support.k8s_validation import REPO, one, run, tool
from tests.test_chart import render

pytestmark = pytest.mark.tools

PROMTOOL_TESTS = [REPO / "tests" / "promtool" / name
                  for name in ("capacity-rules.test.yaml", "capacity-history-hold.test.yaml",
                               "capacity-history-groups-apart.test.yaml")]
HEADROOM = ("prometheusRule.enabled=true", "headroom.namespace=ml", "headroom.workload.name=vllm",
            "headroom.auto.enabled=true", "headroom.auto.requestsPerReplica=10")


def groups(*sets: str) -> list[dict[str, Any]]:
    return one(render(None, "prometheusRule.enabled=true", *sets), "PrometheusRule")["spec"]["groups"]


def rules_file(tmp_path: Path, *sets: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups(*sets)}, sort_keys=False))
    for test in PROMTOOL_TESTS:
        shutil.copy(test, tmp_path / test.name)
    return path


def promtool_test(tmp_path: Path, name: str) -> Any:
    return run([tool("promtool"), "test", "rules", name], cwd=tmp_path, check=False)


@pytest.mark.parametrize("test", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(tmp_path, test):
    rules = rules_file(tmp_path, *HEADROOM)
    check = run([tool("promtool"), "check", "rules", str(rules)])
    assert "SUCCESS" in check.stdout
    proc = promtool_test(tmp_path, test.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_unit_tests_fail_when_the_provisioning_time_is_fixed(tmp_path):
    """provisioningTimeSource fixed: the recorded time is provisioningTime whatever the history says, so the tests
    that expect the measured p90 fail, naming the series."""
    rules_file(tmp_path, *HEADROOM, "headroom.auto.provisioningTimeSource=fixed")
    proc = promtool_test(tmp_path, "capacity-rules.test.yaml")
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert 'source="fixed"' in output and HEADROOM_PROVISIONING in output


def test_the_chart_carries_the_generated_groups_whenever_recording_rules_are_on():
    rendered = {g["name"]: g for g in groups()}
    for group in capacity_groups():
        assert rendered[group["name"]] == group
    assert rendered["gpu-autoscaler.capacity-history"]["interval"] == "5m"
    # No headroom, no headroom group; the alerts stay when recording rules are off.
    assert "gpu-autoscaler.headroom" not in rendered
    names = [g["name"] for g in groups("prometheusRule.recordingRules=false")]
    assert names == ["gpu-autoscaler.alerts", "gpu-autoscaler.autoscaling"]


def _headroom_rules(*sets: str) -> dict[str, dict[str, Any]]:
    [group] = [g for g in groups(*HEADROOM, *sets) if g["name"] == "gpu-autoscaler.headroom"]
    return {r["record"]: r for r in group["rules"]}


def test_the_provisioning_time_reads_history_or_falls_back_or_is_fixed():
    history = _headroom_rules()[HEADROOM_PROVISIONING]
    assert f'{PROVISIONING}{{namespace="ml",deployment="vllm"}}' in history["expr"]
    assert 'vector(540), "source", "fallback"' in history["expr"]
    assert history["labels"] == {"namespace": "ml", "deployment": "vllm"}
    fixed = _headroom_rules("headroom.auto.provisioningTimeSource=fixed", "headroom.auto.provisioningTime=4m30s")
    assert fixed[HEADROOM_PROVISIONING]["expr"] == 'label_replace(vector(270), "source", "fixed", "", "")'
    # A StatefulSet's replicas are not measured (the history is per Deployment): provisioningTime, labelled with the
    # InferencePool the gateway source selects by.
    sts = _headroom_rules("headroom.workload.kind=StatefulSet", "headroom.auto.source=gateway",
                          "headroom.auto.inferencePool=vllm-pool", "adapter.apiService.externalMetrics.enabled=true")
    assert sts[HEADROOM_PROVISIONING]["expr"] == 'label_replace(vector(540), "source", "fallback", "", "")'
    assert sts[HEADROOM_PROVISIONING]["labels"] == {"namespace": "ml", "inference_pool": "vllm-pool"}


def test_the_headroom_info_names_each_form():
    info = _headroom_rules("headroom.capacityBuffer.enabled=true")[HEADROOM_INFO]
    assert info["labels"] == {"namespace": "ml", "workload": "vllm", "workload_kind": "Deployment",
                              "placeholders": "vllm-headroom", "capacitybuffer": "vllm-headroom"}
    [group] = [g for g in groups("headroom.workload.name=vllm", "headroom.capacityBuffer.enabled=true")
               if g["name"] == "gpu-autoscaler.headroom"]
    assert [r["record"] for r in group["rules"]] == [HEADROOM_INFO]  # no auto: no provisioning time


# Our alert, the kubernetes-mixin alert it mirrors (kubernetes-monitoring/kubernetes-mixin alerts/apps_alerts.libsonnet
# and alerts/kube_apiserver.libsonnet), and the mixin's `for` (ours by default).
MIRRORED = [
    ("GPUPodPending", "KubePodNotReady", "15m"),
    ("GPUHpaScalingInactive", None, "5m"),  # the mixin watches no ScalingActive condition
    ("GPUHpaMaxedOut", "KubeHpaMaxedOut", "15m"),
    ("GPUMetricsAPIDown", "KubeAggregatedAPIDown", "5m"),
    ("GPUMetricsAPIErrors", "KubeAggregatedAPIErrors", "10m"),
]


def test_the_autoscaling_alerts_and_the_mixin_alerts_they_mirror():
    [group] = [g for g in groups() if g["name"] == "gpu-autoscaler.autoscaling"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert list(alerts) == [name for name, _, _ in MIRRORED]
    for name, _mixin, for_ in MIRRORED:
        assert alerts[name]["for"] == for_ and alerts[name]["labels"] == {"severity": "warning"}
    # The aggregated-API alerts select the APIServices the chart registers, and only those.
    assert 'name=~"v1beta2.custom.metrics.k8s.io|v1beta1.custom.metrics.k8s.io"' in alerts["GPUMetricsAPIDown"]["expr"]
    with_external = {r["alert"]: r for g in groups("adapter.apiService.externalMetrics.enabled=true")
                     if g["name"] == "gpu-autoscaler.autoscaling" for r in g["rules"]}
    assert "v1beta1.external.metrics.k8s.io" in with_external["GPUMetricsAPIErrors"]["expr"]
    without_adapter = {r["alert"] for g in groups("adapter.enabled=false") if g["name"] == "gpu-autoscaler.autoscaling"
                       for r in g["rules"]}
    assert without_adapter == {"GPUPodPending", "GPUHpaScalingInactive", "GPUHpaMaxedOut"}


def test_the_alert_timings_are_values():
    [group] = [g for g in groups("prometheusRule.gpuPodPendingFor=20m", "prometheusRule.hpaMaxedOutFor=30m",
                                 "prometheusRule.hpaScalingInactiveFor=2m")
               if g["name"] == "gpu-autoscaler.autoscaling"]
    fors = {r["alert"]: r["for"] for r in group["rules"]}
    assert (fors["GPUPodPending"], fors["GPUHpaMaxedOut"], fors["GPUHpaScalingInactive"]) == ("20m", "30m", "2m")
