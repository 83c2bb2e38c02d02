"""The chart's first install on any cluster, with the real helm: objects whose kind a cluster may not serve
(ServiceMonitor, PrometheusRule, NodePool, EC2NodeClass) follow what the cluster serves (Helm's capabilities,
``--api-versions``) unless forced on or off; every object rendered for a bare cluster, one with kube-prometheus-stack
and one with Karpenter too is valid; the prometheus.io scrape annotations; the `helm test` hook; and `helm install`
itself against the fake Kubernetes API with and without the Prometheus Operator's CRDs (the install the issue saw
fail), with what NOTES.txt says."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_kube import FakeKube
from tests.support.k8s_validation import find, load_documents, one, tool, validate_all
from tests.test_chart import CHART, KUBE_PROMETHEUS_STACK, NAMESPACE, RELEASE, VALUES_SETS, render, template

pytestmark = pytest.mark.tools

BARE: tuple[str, ...] = ()
KARPENTER = ("karpenter.sh/v1", "karpenter.sh/v1/NodePool", "karpenter.sh/v1/NodeClaim", "karpenter.k8s.aws/v1",
             "karpenter.k8s.aws/v1/EC2NodeClass")
CERT_MANAGER = ("cert-manager.io/v1", "cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer",
                "cert-manager.io/v1/ClusterIssuer")
CLUSTERS = {"bare": BARE, "kube-prometheus-stack": KUBE_PROMETHEUS_STACK,
            "everything": KUBE_PROMETHEUS_STACK + KARPENTER + CERT_MANAGER}
OPTIONAL = {"ServiceMonitor", "PrometheusRule", "NodePool", "EC2NodeClass"}
NODE_CLASS = ("karpenter.ec2NodeClass.role=KarpenterNodeRole-c", "karpenter.ec2NodeClass.selectorTags.env=c")


def kinds(docs: list[dict[str, Any]]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for doc in docs:
        counted[doc["kind"]] = counted.get(doc["kind"], 0) + 1
    return counted


def installed(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `helm install` creates: everything but the `helm test` hooks."""
    return [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"]


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("name", VALUES_SETS)
def test_every_object_rendered_for_each_cluster_is_valid(name, cluster):
    docs = render(VALUES_SETS[name], api_versions=CLUSTERS[cluster])
    assert validate_all(docs, ["1.33"]) == []


def test_default_install_on_a_bare_cluster_leaves_out_the_operator_kinds():
    docs = installed(render(api_versions=BARE))
    assert kinds(docs) == {"ServiceAccount": 2, "Secret": 1, "ConfigMap": 2, "ClusterRole": 2,
                           "ClusterRoleBinding": 3, "RoleBinding": 1, "Service": 2, "DaemonSet": 1,
                           "Deployment": 1, "PodDisruptionBudget": 1, "APIService": 2, "ResourceQuota": 1}


def test_default_install_with_kube_prometheus_stack_adds_its_objects():
    docs = installed(render(api_versions=KUBE_PROMETHEUS_STACK))
    bare = installed(render(api_versions=BARE))
    assert kinds(docs) == {**kinds(bare), "ServiceMonitor": 2, "PrometheusRule": 1}
    assert {d["metadata"]["name"] for d in find(docs, "ServiceMonitor")} == {
        f"{RELEASE}-gpu-autoscaler-exporter", f"{RELEASE}-gpu-autoscaler-adapter"}
    # Karpenter's objects are opt-in even where Karpenter runs: they launch paid instances.
    everything = kinds(installed(render(api_versions=CLUSTERS["everything"])))
    assert "NodePool" not in everything and "EC2NodeClass" not in everything


@pytest.mark.parametrize("switch, kind, name, served", [
    ("exporter.serviceMonitor.enabled", "ServiceMonitor", f"{RELEASE}-gpu-autoscaler-exporter", KUBE_PROMETHEUS_STACK),
    ("adapter.serviceMonitor.enabled", "ServiceMonitor", f"{RELEASE}-gpu-autoscaler-adapter", KUBE_PROMETHEUS_STACK),
    ("prometheusRule.enabled", "PrometheusRule", f"{RELEASE}-gpu-autoscaler", KUBE_PROMETHEUS_STACK),
    ("karpenter.nodePool.enabled", "NodePool", "gpu", KARPENTER),
    ("karpenter.ec2NodeClass.enabled", "EC2NodeClass", "gpu", KARPENTER),
])
def test_each_optional_object_is_auto_or_forced_either_way(switch, kind, name, served):
    def count(value: str, api_versions: tuple[str, ...]) -> int:
        return len(find(render(None, f"{switch}={value}", *NODE_CLASS, api_versions=api_versions), kind, name))

    assert count("auto", served) == 1 and count("auto", BARE) == 0
    assert count("true", BARE) == 1  # forced on: rendered even where the cluster lacks the CRD
    assert count("false", served) == 0  # forced off: left out even where the CRD is installed


def test_capabilities_as_helm_template_and_a_live_cluster_list_them():
    """`helm template --api-versions monitoring.coreos.com/v1` (a group/version alone) offers its kinds; once kinds
    are listed (as a live cluster lists them), only those count: a cluster with only the ServiceMonitor CRD gets no
    PrometheusRule."""
    group_only = render(api_versions=("monitoring.coreos.com/v1",))
    assert kinds(group_only).get("ServiceMonitor") == 2 and kinds(group_only).get("PrometheusRule") == 1
    partial = render(api_versions=("monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"))
    assert kinds(partial).get("ServiceMonitor") == 2 and "PrometheusRule" not in kinds(partial)
    other_group = render(api_versions=("monitoring.coreos.com/v1alpha1", "monitoring.coreos.com/v1alpha1/ScrapeConfig"))
    assert not OPTIONAL & set(kinds(other_group))


def test_existing_values_that_say_true_still_force_the_objects_on():
    docs = render(None, "exporter.serviceMonitor.enabled=true", "adapter.serviceMonitor.enabled=true",
                  "prometheusRule.enabled=true", api_versions=BARE)
    assert kinds(docs)["ServiceMonitor"] == 2 and kinds(docs)["PrometheusRule"] == 1


@pytest.mark.parametrize("value", ["yes", "on", "Auto"])
def test_the_switch_accepts_only_auto_true_false(value):
    proc = template(None, f"prometheusRule.enabled={value}", check=False)
    assert proc.returncode != 0 and "prometheusRule.enabled" in proc.stderr


# ---------------------------------------------------------------------------------------------- annotations

def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def _scrape(obj: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in _annotations(obj).items() if k.startswith("prometheus.io/")}


def test_exporter_service_carries_the_scrape_annotations_by_default():
    docs = render(api_versions=BARE)
    service = one(docs, "Service", "dcgm-exporter")
    container = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
    assert _scrape(service) == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                                "prometheus.io/path": "/metrics"}
    # One place only: an annotation-driven Prometheus would scrape the pods a second time under another job.
    assert _scrape(one(docs, "DaemonSet")["spec"]["template"]) == {}
    # The adapter's /metrics is HTTPS with the chart's own CA: not annotated unless asked.
    assert _scrape(one(docs, "Service", f"{RELEASE}-gpu-autoscaler-adapter")) == {}
    assert _scrape(one(docs, "Deployment")["spec"]["template"]) == {}


def test_scrape_annotations_can_be_switched_per_place():
    docs = render(None, "exporter.scrapeAnnotations.service=false", "exporter.scrapeAnnotations.pod=true",
                  "adapter.scrapeAnnotations.service=true", "adapter.scrapeAnnotations.pod=true",
                  "exporter.podAnnotations.team=ml", api_versions=BARE)
    assert _scrape(one(docs, "Service", "dcgm-exporter")) == {}
    exporter_pod = one(docs, "DaemonSet")["spec"]["template"]
    assert _scrape(exporter_pod) == {"prometheus.io/scrape": "true", "prometheus.io/port": "9400",
                                     "prometheus.io/path": "/metrics"}
    assert _annotations(exporter_pod)["team"] == "ml"
    adapter_container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    https = {"prometheus.io/scrape": "true", "prometheus.io/port": str(adapter_container["ports"][0]["containerPort"]),
             "prometheus.io/path": "/metrics", "prometheus.io/scheme": "https"}
    assert _scrape(one(docs, "Service", f"{RELEASE}-gpu-autoscaler-adapter")) == https
    assert _scrape(one(docs, "Deployment")["spec"]["template"]) == https
    # Your own pod annotation wins over the chart's.
    docs = render(None, "exporter.scrapeAnnotations.pod=true", "exporter.podAnnotations.prometheus\\.io/path=/x",
                  api_versions=BARE)
    assert _annotations(one(docs, "DaemonSet")["spec"]["template"])["prometheus.io/path"] == "/x"


# ------------------------------------------------------------------------------------------------ helm test

def _hooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if _annotations(d).get("helm.sh/hook") == "test"]


def test_helm_test_pod_checks_every_apiservice_and_the_eks_guides_metric():
    docs = render(api_versions=BARE)
    hooks = _hooks(docs)
    assert sorted(d["kind"] for d in hooks) == ["ClusterRole", "ClusterRoleBinding", "Pod", "ServiceAccount"]
    pod = one(hooks, "Pod")
    container = pod["spec"]["containers"][0]
    deployment = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert container["image"] == deployment["containers"][0]["image"]  # the chart's own image
    assert container["command"] == ["gpu-adapter"] and container["args"][0] == "check-install"
    apiservices = sorted(a["metadata"]["name"] for a in find(docs, "APIService"))
    args = container["args"]
    assert sorted(a.split("=", 1)[1] for a in args if a.startswith("--apiservice=")) == apiservices
    assert f"--metric-path=/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NAMESPACE}/services/dcgm-exporter/" \
           "DCGM_FI_DEV_GPU_UTIL_AVG" in args
    url = next(a for a in deployment["containers"][0]["args"] if a.startswith("--prometheus-url="))
    assert url in args
    assert pod["spec"]["restartPolicy"] == "Never"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # Its RBAC: get on exactly this release's APIServices, and on the metrics they serve.
    role = one(hooks, "ClusterRole")
    assert {**role["rules"][0], "resourceNames": sorted(role["rules"][0]["resourceNames"])} == {
        "apiGroups": ["apiregistration.k8s.io"], "resources": ["apiservices"], "resourceNames": apiservices,
        "verbs": ["get"]}
    assert {"apiGroups": ["custom.metrics.k8s.io"], "resources": ["*"], "verbs": ["get"]} in role["rules"]
    binding = one(hooks, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["spec"]["serviceAccountName"],
                                    "namespace": NAMESPACE}]
    assert one(hooks, "ServiceAccount")["metadata"]["name"] == pod["spec"]["serviceAccountName"]
    # The RBAC exists before the pod and is removed once the test passed; the pod stays for `helm test --logs`.
    for hook in hooks:
        policy = _annotations(hook)["helm.sh/hook-delete-policy"].split(",")
        assert "before-hook-creation" in policy
        assert ("hook-succeeded" in policy) == (hook["kind"] != "Pod")
        assert int(_annotations(hook).get("helm.sh/hook-weight", "0")) == (0 if hook["kind"] == "Pod" else -1)


def test_helm_test_follows_the_apis_served_and_can_be_turned_off():
    docs = render(VALUES_SETS["external-metrics"], "test.metricPath=/apis/external.metrics.k8s.io/v1beta1/"
                  "namespaces/ml/queue_depth", api_versions=BARE)
    hooks = _hooks(docs)
    args = one(hooks, "Pod")["spec"]["containers"][0]["args"]
    assert "--apiservice=v1beta1.external.metrics.k8s.io" in args
    assert "--metric-path=/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/queue_depth" in args
    assert {"apiGroups": ["external.metrics.k8s.io"], "resources": ["*"], "verbs": ["get"]} in \
        one(hooks, "ClusterRole")["rules"]
    # Without the chart's RBAC, the pod runs as the ServiceAccount you name (and grant).
    docs = render(None, "adapter.rbac.create=false", "test.serviceAccountName=checker", api_versions=BARE)
    assert [d["kind"] for d in _hooks(docs)] == ["Pod"]
    assert one(_hooks(docs), "Pod")["spec"]["serviceAccountName"] == "checker"
    assert _hooks(render(None, "test.enabled=false", api_versions=BARE)) == []
    assert _hooks(render(None, "adapter.enabled=false", api_versions=BARE)) == []


# ------------------------------------------------------------------ helm install against the fake Kubernetes API

# The kinds the chart creates, as a cluster's API discovery lists them (the fake serves only what it registers).
CLUSTER_TYPES = [
    ("", "v1", "secrets", "Secret", True), ("", "v1", "serviceaccounts", "ServiceAccount", True),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ("apps", "v1", "daemonsets", "DaemonSet", True), ("policy", "v1", "poddisruptionbudgets",
                                                      "PodDisruptionBudget", True),
    ("apiregistration.k8s.io", "v1", "apiservices", "APIService", False),
    ("", "v1", "resourcequotas", "ResourceQuota", True),
]
OPERATOR_TYPES = [("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", True),
                  ("monitoring.coreos.com", "v1", "podmonitors", "PodMonitor", True),
                  ("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule", True)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeKube, str]]:
    fake = FakeKube()
    for group, version, resource, kind, namespaced in CLUSTER_TYPES:
        fake.register(group, version, resource, kind, namespaced)
    fake.start()
    try:
        yield fake, fake.write_kubeconfig(tmp_path / "kubeconfig")
    finally:
        fake.stop()


def helm_install(kubeconfig: str, *sets: str) -> subprocess.CompletedProcess[str]:
    """The README's install as a server-side dry run: helm asks the cluster what it serves (capabilities), looks
    up the serving Secret, maps every object to the cluster's API and checks none exists, then stops short of
    creating them. (OpenAPI validation is off: the fake serves no OpenAPI; the schemas are checked above.)"""
    args = [tool("helm"), "install", RELEASE, str(CHART), "-n", NAMESPACE, "--kubeconfig", kubeconfig,
            "--dry-run=server", "--disable-openapi-validation"]
    for item in sets:
        args += ["--set", item]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def _manifest_and_notes(stdout: str) -> tuple[list[dict[str, Any]], str]:
    manifest, _, notes = stdout.partition("\nNOTES:\n")
    return load_documents(manifest.partition("\nMANIFEST:\n")[2]), notes


def test_helm_install_on_a_cluster_without_the_operator_succeeds_and_says_what_it_left_out(cluster):
    _, kubeconfig = cluster
    proc = helm_install(kubeconfig)
    assert proc.returncode == 0, proc.stderr
    docs, notes = _manifest_and_notes(proc.stdout)
    assert docs and not OPTIONAL & {d["kind"] for d in docs}
    assert "Left out, because this cluster does not serve their kind" in notes
    for line in ("ServiceMonitor for the exporter: no monitoring.coreos.com/v1 ServiceMonitor "
                 "(exporter.serviceMonitor.enabled is auto)",
                 "ServiceMonitor for the adapter: no monitoring.coreos.com/v1 ServiceMonitor",
                 "PrometheusRule (recording rules and alerts): no monitoring.coreos.com/v1 PrometheusRule"):
        assert line in notes
    # What to do instead: the annotations on the exporter's Service, the scrape jobs and the rules file.
    assert 'the exporter\'s Service carries prometheus.io/scrape: "true" (port 9400, /metrics)' in notes
    assert 'docs/install.md ("Plain Prometheus")' in notes
    assert "docs/prometheus/gpu-autoscaler.rules.yaml" in notes
    assert f"helm test {RELEASE} -n {NAMESPACE} --logs" in notes
    assert "Karpenter" not in notes  # off by default: nothing was left out for lack of it


def test_helm_install_with_the_operators_crds_creates_its_objects(cluster):
    fake, kubeconfig = cluster
    for group, version, resource, kind, namespaced in OPERATOR_TYPES:
        fake.register(group, version, resource, kind, namespaced)
    proc = helm_install(kubeconfig)
    assert proc.returncode == 0, proc.stderr
    docs, notes = _manifest_and_notes(proc.stdout)
    assert kinds(docs)["ServiceMonitor"] == 2 and kinds(docs)["PrometheusRule"] == 1
    assert "Left out" not in notes and "Without the Prometheus Operator" not in notes
    # helm looked each of them up in the cluster (as it does before creating anything)
    assert fake.count("GET", f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/prometheusrules/"
                             f"{RELEASE}-gpu-autoscaler") == 1


def test_forcing_an_object_on_fails_where_its_crd_is_missing_as_before(cluster):
    """What `auto` spares a first install: the failure the issue reported, now only when asked for."""
    _, kubeconfig = cluster
    proc = helm_install(kubeconfig, "prometheusRule.enabled=true")
    assert proc.returncode != 0
    assert 'no matches for kind "PrometheusRule" in version "monitoring.coreos.com/v1"' in proc.stderr
