"""What the chart does for upgrades, drained nodes and restricted clusters, rendered with the real helm: the grace
period derived from the adapter's shutdown (and refused when it leaves no time to drain), the rolling update and
PDB, soft spreading over nodes and zones, the probes, checksums that roll the adapter on a changed rules file, the
exporter's update strategy, and the ResourceQuota that admits the reserved priority classes outside kube-system
(or no critical class at all)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.k8s_validation import find, one, run, tool, validate_all
from tests.test_chart import CHART, NAMESPACE, RELEASE, VALUES_SETS, render, template

pytestmark = pytest.mark.tools

ADAPTER_SELECTOR = {"app.kubernetes.io/name": "gpu-autoscaler", "app.kubernetes.io/instance": RELEASE,
                    "app.kubernetes.io/component": "adapter"}


def adapter_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]


def args(docs: list[dict[str, Any]]) -> list[str]:
    return adapter_pod(docs)["spec"]["containers"][0]["args"]


def refusal(*sets: str) -> str:
    proc = template(None, *sets, check=False)
    assert proc.returncode != 0, proc.stdout[:300]
    return proc.stderr.strip()


def test_default_shutdown_fits_the_grace_period_and_the_rollout_keeps_two_ready() -> None:
    docs = render()
    deployment = one(docs, "Deployment")
    pod = adapter_pod(docs)["spec"]
    assert pod["terminationGracePeriodSeconds"] == 30  # 15 s delay + 10 s drain + 5 s to exit
    assert "--shutdown-delay-duration=15s" in args(docs) and "--shutdown-drain-timeout=10s" in args(docs)
    assert "--shutdown-send-retry-after" not in args(docs)
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


@pytest.mark.parametrize(("sets", "grace", "flags"), [
    (["adapter.shutdown.delaySeconds=40", "adapter.shutdown.drainTimeoutSeconds=20"], 65,
     ["--shutdown-delay-duration=40s", "--shutdown-drain-timeout=20s"]),
    (["adapter.shutdown.sendRetryAfter=true"], 32, ["--shutdown-send-retry-after"]),
    (["adapter.shutdown.delaySeconds=0", "adapter.shutdown.drainTimeoutSeconds=0"], 5,
     ["--shutdown-delay-duration=0s", "--shutdown-drain-timeout=0s"]),
    (["adapter.terminationGracePeriodSeconds=120"], 120, ["--shutdown-delay-duration=15s"]),
])
def test_grace_period_is_derived_from_the_shutdown_or_given(sets: list[str], grace: int, flags: list[str]) -> None:
    docs = render(None, *sets)
    assert adapter_pod(docs)["spec"]["terminationGracePeriodSeconds"] == grace
    assert set(flags) <= set(args(docs))


@pytest.mark.parametrize(("sets", "message"), [
    (["adapter.terminationGracePeriodSeconds=20"],
     "adapter.terminationGracePeriodSeconds=20 leaves no time to drain: adapter.shutdown.delaySeconds (15) + "
     "drainTimeoutSeconds (10) = 25 s must be less than it"),
    (["adapter.terminationGracePeriodSeconds=26", "adapter.shutdown.sendRetryAfter=true"],
     "delaySeconds (15) + drainTimeoutSeconds (10) + 2 (sendRetryAfter) = 27 s must be less than it"),
    (["adapter.shutdown.sendRetryAfter=true", "adapter.shutdown.delaySeconds=0"],
     "adapter.shutdown.sendRetryAfter needs adapter.shutdown.delaySeconds above 0"),
])
def test_a_shutdown_the_grace_period_cannot_hold_fails_helm_template_in_one_line(sets: list[str],
                                                                                 message: str) -> None:
    first = refusal(*sets).splitlines()[0]  # helm adds its own "Use --debug" hint below the one line
    assert first.startswith("Error: execution error at (gpu-autoscaler/templates/adapter/deployment.yaml") and \
        message in first, first


@pytest.mark.parametrize("value", ["adapter.shutdown.delaySeconds=-5", "adapter.shutdown.drainTimeoutSeconds=-1",
                                   "adapter.terminationGracePeriodSeconds=0"])
def test_negative_durations_are_refused_by_the_schema(value: str) -> None:
    error = refusal(value)
    key = value.split("=")[0]
    assert "values don't meet the specifications of the schema" in error and key in error, error


def test_replicas_spread_softly_over_nodes_and_zones_by_default() -> None:
    constraints = adapter_pod(render())["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    for c in constraints:
        assert c["whenUnsatisfiable"] == "ScheduleAnyway" and c["maxSkew"] == 1
        assert c["labelSelector"] == {"matchLabels": ADAPTER_SELECTOR}
        assert c["matchLabelKeys"] == ["pod-template-hash"]  # a rolling update's new pods are spread too
    assert "affinity" not in adapter_pod(render())["spec"]
    own = adapter_pod(render(VALUES_SETS["all-on"]))["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in own] == ["topology.kubernetes.io/zone"]  # the user's replace the default


def test_probes_ready_when_discovery_answers_and_a_startup_probe_for_the_first_relist() -> None:
    container = adapter_pod(render())["spec"]["containers"][0]
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] == 300
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert "initialDelaySeconds" not in container["livenessProbe"]  # the startup probe holds it back


def test_resources_are_set_with_room_above_the_measured_peak() -> None:
    docs = render()
    adapter = adapter_pod(docs)["spec"]["containers"][0]["resources"]
    exporter = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["resources"]
    # docs/performance.md: adapter peak RSS 142 MiB with 5,000 HPAs; exporter 61 MiB with NVML.
    assert adapter == {"requests": {"cpu": "200m", "memory": "192Mi"}, "limits": {"memory": "512Mi"}}
    assert exporter == {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}}


def test_a_changed_rules_value_rolls_the_adapter_and_an_unrelated_one_does_not() -> None:
    def annotations(*sets: str) -> dict[str, str]:
        return adapter_pod(render(None, *sets))["metadata"]["annotations"]

    default = annotations()
    assert "checksum/rules" in default
    assert annotations("adapter.rules.deploymentMetrics=false")["checksum/rules"] != default["checksum/rules"]
    assert annotations("exporter.collectInterval=500")["checksum/rules"] == default["checksum/rules"]
    # A ConfigMap the chart does not render cannot be summed: the adapter re-reads that file when it changes.
    assert "checksum/rules" not in annotations("adapter.rules.existingConfigMap=my-rules")


def test_the_exporter_updates_one_node_at_a_time_without_a_second_exporter_on_it() -> None:
    daemonset = one(render(), "DaemonSet")
    assert daemonset["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                                   "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert container["startupProbe"]["periodSeconds"] == 1 and container["startupProbe"]["httpGet"]["path"] == \
        "/health"
    assert "initialDelaySeconds" not in container["livenessProbe"]


# ------------------------------------------------------------------- reserved priority classes outside kube-system

def test_the_default_install_admits_its_critical_pods_with_a_quota_that_limits_nothing() -> None:
    docs = render()
    assert adapter_pod(docs)["spec"]["priorityClassName"] == "system-cluster-critical"
    assert one(docs, "DaemonSet")["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"
    quota = one(docs, "ResourceQuota")
    assert quota["metadata"]["namespace"] == NAMESPACE
    assert quota["spec"] == {"scopeSelector": {"matchExpressions": [{
        "scopeName": "PriorityClass", "operator": "In",
        "values": ["system-cluster-critical", "system-node-critical"]}]}}  # no "hard": it never refuses a pod
    assert validate_all([quota], ["1.29", "1.33"]) == []


def test_no_quota_where_none_is_needed_or_wanted() -> None:
    kube_system = run([tool("helm"), "template", RELEASE, str(CHART), "--namespace", "kube-system"]).stdout
    assert "kind: ResourceQuota" not in kube_system and "kind: Deployment" in kube_system
    assert not find(render(None, "criticalPodsQuota.create=false"), "ResourceQuota")


def test_without_critical_classes_nothing_reserved_is_asked_for() -> None:
    docs = render(None, "adapter.priorityClassName=", "exporter.priorityClassName=")
    assert "priorityClassName" not in adapter_pod(docs)["spec"]
    assert "priorityClassName" not in one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert not find(docs, "ResourceQuota")
    only_exporter = one(render(None, "adapter.priorityClassName=my-high"), "ResourceQuota")
    assert only_exporter["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["system-node-critical"]
