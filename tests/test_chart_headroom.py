"""GPU headroom from the chart (values headroom.*, issue 39), with the real helm: the CapacityBuffer checked against
the upstream CRDs' schema facts (Cluster Autoscaler's and Karpenter's, each fact naming its file) and rendered only
where the cluster serves the API; the placeholder pods' PriorityClass below every workload; the HPA that sizes the
placeholders from the capacity-headroom preset; the render-time errors; NOTES.txt through `helm install` against
the fake Kubernetes API; and hpa-examples/headroom-*.yaml against what the chart renders for the same values."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest
import yaml

from adapter.presets.capacity import capacity_yaml
from adapter.rulesfile.loader import load_rules
from clikit.quantity import parse_quantity
from tests import test_chart_first_install as first_install
from tests.support.fake_kube import FakeKube
from tests.support.k8s_validation import KUBE_VERSIONS, REPO, crd_schema, find, load_files, one, validate_all
from tests.test_chart import CHART, KUBE_PROMETHEUS_STACK, RELEASE, VALUES_SETS, render, template

pytestmark = pytest.mark.tools

EXAMPLES = REPO / "hpa-examples"
V1BETA1 = ("autoscaling.x-k8s.io/v1beta1", "autoscaling.x-k8s.io/v1beta1/CapacityBuffer")
V1ALPHA1 = ("autoscaling.x-k8s.io/v1alpha1", "autoscaling.x-k8s.io/v1alpha1/CapacityBuffer")
# The vendored CRDs (tests/support/schemas/SOURCES.md) and the upstream files they are.
CA_CRD = "autoscaling.x-k8s.io_capacitybuffers.yaml"
KARPENTER_CRD = "autoscaling.x-k8s.io_capacitybuffers.karpenter.yaml"
CA_CRD_SOURCE = "kubernetes/autoscaler cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_capacitybuffers.yaml"
KARPENTER_CRD_SOURCE = "kubernetes-sigs/karpenter pkg/apis/crds/autoscaling.x-k8s.io_capacitybuffers.yaml"
VLLM = ("headroom.namespace=default", "headroom.workload.name=vllm")
METRIC = "inference_request_rate_ahead"  # signal requests, the default
QUEUE_METRIC = "inference_queue_ahead"
AUTO = ("headroom.auto.enabled=true", "headroom.auto.requestsPerReplica=10")
# Built-in PriorityClasses the chart's own pods name (kubernetes pkg/apis/scheduling/types.go:
# SystemCriticalPriority = 2 * HighestUserDefinablePriority = 2000000000; system-node-critical is 1000 above it).
BUILTIN_PRIORITY = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}


def rendered(*sets: str, api_versions: tuple[str, ...] = KUBE_PROMETHEUS_STACK,
             kube_version: str = "1.33.0") -> list[dict[str, Any]]:
    return render(None, *VLLM, *sets, api_versions=api_versions, kube_version=kube_version)


def error_of(*sets: str, api_versions: tuple[str, ...] = KUBE_PROMETHEUS_STACK) -> str:
    """The one-line error `helm template` prints for these values (fails the test if it renders)."""
    proc = template(None, *sets, api_versions=api_versions, check=False)
    assert proc.returncode != 0, f"rendered: {sets}"
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    return line


# -------------------------------------------------------------------------------------------- CapacityBuffer

@pytest.fixture(scope="module")
def buffer() -> dict[str, Any]:
    docs = rendered("headroom.capacityBuffer.enabled=auto", "headroom.capacityBuffer.ref=scalableRef",
                    "headroom.capacityBuffer.percentage=25", "headroom.capacityBuffer.gpus=4",
                    api_versions=KUBE_PROMETHEUS_STACK + V1BETA1)
    return one(docs, "CapacityBuffer")


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    for part in path.split("."):
        schema = schema["properties"][part]
    return schema


# Schema facts of the CapacityBuffer the chart writes, each as published: (CRD, path, key, value). The Go types
# behind them are cluster-autoscaler/apis/capacitybuffer/autoscaling.x-k8s.io/{v1alpha1,v1beta1}/types.go
# (kubebuilder markers) and Karpenter's pkg/apis/autoscaling/v1beta1/capacitybuffer.go.
SCHEMA_FACTS = [
    (crd, version, path, key, value)
    for crd, versions in ((CA_CRD, ("v1alpha1", "v1beta1")), (KARPENTER_CRD, ("v1beta1",)))
    for version in versions
    for path, key, value in (
        ("", "required", ["spec"]),
        ("spec", "properties", {"provisioningStrategy", "podTemplateRef", "scalableRef", "replicas", "percentage",
                                "limits"}),
        ("spec.scalableRef", "required", ["kind", "name"]),
        ("spec.scalableRef", "properties", {"apiGroup", "kind", "name"}),
        ("spec.scalableRef.kind", "minLength", 1),
        ("spec.scalableRef.name", "minLength", 1),
        ("spec.replicas", "minimum", 0),
        ("spec.replicas", "format", "int32"),
        ("spec.percentage", "minimum", 0),
        ("spec.percentage", "format", "int32"),
        ("spec.provisioningStrategy", "default", "buffer.x-k8s.io/active-capacity"),
    )
]


@pytest.mark.parametrize(("crd", "version", "path", "key", "value"), SCHEMA_FACTS,
                         ids=[f"{c.split('.')[-2]}-{v}-{p or 'root'}-{k}" for c, v, p, k, _ in SCHEMA_FACTS])
def test_the_published_crds_state_the_facts_we_rely_on(crd, version, path, key, value):
    schema = crd_schema(crd, f"autoscaling.x-k8s.io/{version}")
    node = _at(schema, path) if path else schema
    found = set(node[key]) if key == "properties" else node[key]
    assert found == value, f"{CA_CRD_SOURCE if crd == CA_CRD else KARPENTER_CRD_SOURCE} {version} {path} {key}"


def test_capacity_buffer_meets_those_facts(buffer):
    spec = buffer["spec"]
    assert set(spec) <= {"provisioningStrategy", "podTemplateRef", "scalableRef", "replicas", "percentage", "limits"}
    assert spec["scalableRef"] == {"apiGroup": "apps", "kind": "Deployment", "name": "vllm"}
    # ScaledRef kinds both autoscalers resolve: Karpenter's pkg/utils/apps/resolve.go takes apps Deployment,
    # StatefulSet and ReplicaSet; Cluster Autoscaler's capacitybuffer/translators/scalable_objects/
    # scalable_object_resolvers.go those plus ReplicationController and Job. The values schema allows the three.
    schema = json.loads((CHART / "values.schema.json").read_text())
    kinds = schema["properties"]["headroom"]["properties"]["workload"]["properties"]["kind"]["enum"]
    assert sorted(kinds) == ["Deployment", "ReplicaSet", "StatefulSet"]
    for number in ("replicas", "percentage"):
        assert isinstance(spec[number], int) and 0 <= spec[number] < 2**31
    # Cluster Autoscaler's capacitybuffer/common/common.go ActiveProvisioningStrategy; Karpenter: the only one.
    assert spec["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"
    assert spec["limits"] == {"nvidia.com/gpu": "4"}
    assert buffer["metadata"] == {**buffer["metadata"], "name": "vllm-headroom", "namespace": "default"}
    # Strictly valid (unknown fields rejected) against both projects' CRDs.
    assert validate_all([buffer]) == []


def test_capacity_buffer_meets_the_crds_cel_rules(buffer):
    """The CRDs' x-kubernetes-validations (not evaluated by the schema check) are these two has() rules: a
    podTemplateRef needs replicas or limits, and podTemplateRef excludes scalableRef. Each buffer the chart writes
    names one of the two, and a podTemplateRef one always has replicas or limits (the values checks see to it)."""
    for crd, version in ((CA_CRD, "v1alpha1"), (CA_CRD, "v1beta1"), (KARPENTER_CRD, "v1beta1")):
        rules = [r["rule"] for r in crd_schema(crd, f"autoscaling.x-k8s.io/{version}")["properties"]["spec"]
                 ["x-kubernetes-validations"]]
        assert rules == ["!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
                         "!(has(self.podTemplateRef) && has(self.scalableRef))"], (crd, version)
    spec = buffer["spec"]
    assert "podTemplateRef" not in spec and "scalableRef" in spec
    for sets in (("headroom.capacityBuffer.replicas=2",), ("headroom.capacityBuffer.replicas=null",
                                                           "headroom.capacityBuffer.gpus=3")):
        spec = one(rendered("headroom.capacityBuffer.enabled=true", *sets), "CapacityBuffer")["spec"]
        assert "scalableRef" not in spec and spec["podTemplateRef"] == {"name": "vllm-headroom"}
        assert "replicas" in spec or "limits" in spec


def test_no_field_of_the_spec_is_an_enum():
    """So the facts above are all the CRDs constrain: a future enum upstream fails here first."""
    for crd, version in ((CA_CRD, "v1alpha1"), (CA_CRD, "v1beta1"), (KARPENTER_CRD, "v1beta1")):
        text = json.dumps(crd_schema(crd, f"autoscaling.x-k8s.io/{version}")["properties"]["spec"])
        assert '"enum"' not in text, (crd, version)


@pytest.mark.parametrize(("served", "expected"), [
    (V1BETA1, "autoscaling.x-k8s.io/v1beta1"),  # Karpenter 1.14: only v1beta1
    (V1ALPHA1, "autoscaling.x-k8s.io/v1alpha1"),  # Cluster Autoscaler 1.34: only v1alpha1
    (V1ALPHA1 + V1BETA1, "autoscaling.x-k8s.io/v1beta1"),  # Cluster Autoscaler 1.35+: v1alpha1 deprecated
    ((), None),
])
def test_capacity_buffer_follows_what_the_cluster_serves(served, expected):
    docs = rendered("headroom.capacityBuffer.enabled=auto", api_versions=served)
    assert [d["apiVersion"] for d in find(docs, "CapacityBuffer")] == ([expected] if expected else [])
    if expected:
        assert validate_all(find(docs, "CapacityBuffer")) == []
    # false: never, even where served.
    assert not find(rendered("headroom.capacityBuffer.enabled=false", api_versions=served), "CapacityBuffer")


@pytest.mark.parametrize(("served", "expected"), [
    ((), "autoscaling.x-k8s.io/v1beta1"),  # nothing served: the helper's fallback
    (V1ALPHA1, "autoscaling.x-k8s.io/v1alpha1"),
    (V1BETA1, "autoscaling.x-k8s.io/v1beta1"),
    (V1ALPHA1 + V1BETA1, "autoscaling.x-k8s.io/v1beta1"),
])
def test_capacity_buffer_true_renders_it_wherever_as_every_true_switch(served, expected):
    """true means "always render", as for every optional object (_capabilities.tpl): where the cluster serves no
    CapacityBuffer it is written as v1beta1, and creating it is what fails, as forcing any absent kind does."""
    docs = rendered("headroom.capacityBuffer.enabled=true", api_versions=served)
    [buffer] = find(docs, "CapacityBuffer")
    assert buffer["apiVersion"] == expected
    assert buffer["spec"]["podTemplateRef"] == {"name": "vllm-headroom"}
    assert validate_all([buffer]) == []


# ------------------------------------------------------------------------------ what the buffer's pods hold

def test_the_buffer_names_a_pod_template_holding_one_replicas_gpus_under_requests():
    """Issue 48: a buffer on a Deployment that asks for its GPU under limits only held no GPU, since Karpenter builds
    the virtual pods from the template as stored (pkg/state/virtualpods/utilities.go BuildVirtualPods, from
    pkg/utils/apps/resolve.go) and only a Pod gets its limits copied into requests. The chart's default buffer names
    a PodTemplate that holds what a replica needs, whatever the workload's manifest writes."""
    docs = rendered("headroom.capacityBuffer.enabled=true", "headroom.workload.gpusPerReplica=2",
                    "headroom.workload.requests.cpu=8", "headroom.workload.requests.memory=48Gi",
                    "headroom.placeholders.nodeSelector.workload=gpu")
    buffer, pod_template = one(docs, "CapacityBuffer"), one(docs, "PodTemplate")
    assert buffer["spec"]["podTemplateRef"] == {"name": pod_template["metadata"]["name"]} and \
        "scalableRef" not in buffer["spec"]
    assert pod_template["metadata"]["namespace"] == buffer["metadata"]["namespace"] == "default"  # same namespace
    spec = pod_template["template"]["spec"]
    [container] = spec["containers"]
    assert container["resources"] == {"requests": {"cpu": "8", "memory": "48Gi", "nvidia.com/gpu": "2"},
                                      "limits": {"nvidia.com/gpu": "2"}}
    assert spec["nodeSelector"] == {"workload": "gpu"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    # Its pods are nobody's: no label of the placeholders' selector.
    placeholders = rendered("headroom.placeholders.enabled=true")
    selector = one(placeholders, "Deployment", "vllm-headroom")["spec"]["selector"]["matchLabels"]
    assert not set(selector.items()) <= set(pod_template["template"]["metadata"]["labels"].items())
    assert validate_all(docs) == []


def _workload(gpu_requests: bool) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": "1", "cpu": "8"}, "requests": {"cpu": "4"}}
    if gpu_requests:
        resources["requests"]["nvidia.com/gpu"] = "1"
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "vllm"}},
                     "template": {"metadata": {"labels": {"app": "vllm"}}, "spec": {"containers": [
                         {"name": "server", "image": "vllm/vllm-openai:v0.11.0", "resources": resources}]}}}}


SCALABLE = (*VLLM, "headroom.capacityBuffer.enabled=true", "headroom.capacityBuffer.ref=scalableRef",
            "headroom.capacityBuffer.replicas=null", "headroom.capacityBuffer.percentage=50")


def test_a_scalable_ref_buffer_on_a_workload_with_gpus_under_limits_only_fails_the_install(cluster):
    fake, kubeconfig = cluster
    for group, version, resource, kind, namespaced in HEADROOM_TYPES:
        fake.register(group, version, resource, kind, namespaced)
    fake.register("apps", "v1", "deployments", "Deployment", True)
    fake.register("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers", "CapacityBuffer", True)
    fake.put("apps", "v1", "deployments", _workload(gpu_requests=False))
    proc = first_install.helm_install(kubeconfig, *SCALABLE)
    assert proc.returncode != 0
    [line] = [ln for ln in proc.stderr.splitlines() if "headroom.capacityBuffer.ref" in ln]
    assert ("headroom.capacityBuffer.ref scalableRef: Deployment default/vllm's container \"server\" asks for "
            "nvidia.com/gpu under limits only") in line
    assert 'Add requests: {nvidia.com/gpu: "1"} to that container, or use headroom.capacityBuffer.ref podTemplate' \
        in line
    # Fixed in the workload: the buffer installs, and NOTES say it was checked.
    fake.put("apps", "v1", "deployments", _workload(gpu_requests=True))
    docs, notes = _install(fake, kubeconfig, *SCALABLE)
    assert one(docs, "CapacityBuffer")["spec"]["scalableRef"]["name"] == "vllm" and not find(docs, "PodTemplate")
    assert ("must request their GPUs under\n    requests, not limits alone, or the buffer holds none "
            "(checked: they do)") in notes
    # helm template cannot look at the cluster: it renders, and NOTES (at install) would say it was not checked.
    assert one(rendered(*SCALABLE[2:]), "CapacityBuffer")["spec"]["percentage"] == 50


# ------------------------------------------------------------------------------------- placeholder pods

def _pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            out.append((f"{doc['kind']} {doc['metadata']['name']}", doc["spec"]["template"]["spec"]))
        elif doc["kind"] == "Pod":
            out.append((f"Pod {doc['metadata']['name']}", doc["spec"]))
    return out


def test_priority_class_is_below_every_workload_the_chart_renders():
    docs = render(VALUES_SETS["all-on"], *VLLM, "headroom.placeholders.enabled=true")
    [klass] = find(docs, "PriorityClass")
    value = klass["value"]
    assert klass["preemptionPolicy"] == "Never" and klass["globalDefault"] is False
    assert value < 0  # pods without a class get priority 0 (no globalDefault class)
    # Cluster Autoscaler FAQ / flag --expendable-pods-priority-cutoff (default -10): pods below it never trigger a
    # scale-up, so the placeholders must not go under it.
    assert value >= -10
    classes = {**BUILTIN_PRIORITY, **{k["metadata"]["name"]: k["value"] for k in find(docs, "PriorityClass")}}
    pods = _pod_specs(docs)
    placeholder = [spec for name, spec in pods if name == "Deployment vllm-headroom"]
    assert [spec["priorityClassName"] for spec in placeholder] == [klass["metadata"]["name"]]
    others = [(name, classes[spec["priorityClassName"]] if "priorityClassName" in spec else 0)
              for name, spec in pods if name != "Deployment vllm-headroom"]
    assert others and all(priority > value for _, priority in others), others
    # The example workloads name no class: priority 0, above the placeholders too.
    workloads = [d for d in load_files([EXAMPLES / "vllm.yaml", EXAMPLES / "vision-api.yaml"])
                 if d["kind"] == "Deployment"]
    assert workloads and not [w for w in workloads if "priorityClassName" in w["spec"]["template"]["spec"]]


@pytest.mark.parametrize("value", [0, 5, -11])
def test_priority_value_must_be_negative_and_not_below_the_cluster_autoscaler_cutoff(value):
    proc = template(None, *VLLM, "headroom.placeholders.enabled=true",
                    f"headroom.placeholders.priorityClass.value={value}", check=False)
    assert proc.returncode != 0 and "headroom.placeholders.priorityClass.value" in proc.stderr


def test_placeholders_pull_the_workloads_image_when_asked():
    docs = rendered("headroom.placeholders.enabled=true", "headroom.placeholders.prePullImage=vllm/vllm-openai:v0.11.0",
                    "headroom.placeholders.imagePullSecrets[0].name=ngc")
    pod = one(docs, "Deployment", "vllm-headroom")["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    assert (init["image"], init["command"], init["imagePullPolicy"]) == ("vllm/vllm-openai:v0.11.0",
                                                                        ["sh", "-c", "true"], "IfNotPresent")
    # It asks for next to nothing: the pod's requests stay one replica's (the largest of init and main containers).
    assert "nvidia.com/gpu" not in init["resources"]["requests"]
    assert pod["imagePullSecrets"] == [{"name": "ngc"}]
    assert [c["image"] for c in pod["containers"]] == ["registry.k8s.io/pause:3.10"]
    assert validate_all(docs) == []
    plain = one(rendered("headroom.placeholders.enabled=true"), "Deployment", "vllm-headroom")["spec"]["template"]
    assert "initContainers" not in plain["spec"] and "imagePullSecrets" not in plain["spec"]


def test_placeholder_pods_hold_one_replicas_gpus_on_the_gpu_nodes():
    docs = rendered("headroom.placeholders.enabled=true", "headroom.placeholders.replicas=3",
                    "headroom.workload.gpusPerReplica=2", "headroom.workload.requests.cpu=4",
                    "headroom.workload.requests.memory=32Gi", "karpenter.nodePool.enabled=true")
    deployment = one(docs, "Deployment", "vllm-headroom")
    assert deployment["metadata"]["namespace"] == "default" and deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"].startswith("registry.k8s.io/pause:")
    assert container["resources"] == {"requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "2"},
                                      "limits": {"nvidia.com/gpu": "2"}}
    # Not 0: a forced delete on preemption (docs/capacity.md, "Placeholder settings").
    assert pod["terminationGracePeriodSeconds"] == 5
    # It tolerates the taint of the NodePool the chart renders.
    [taint] = one(docs, "NodePool")["spec"]["template"]["spec"]["taints"]
    assert any(t["key"] == taint["key"] and t["operator"] == "Exists" and t["effect"] == taint["effect"]
               for t in pod["tolerations"])
    # No surge: a rollout never asks for one more GPU than the headroom.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    assert validate_all(docs) == []


# --------------------------------------------------------------------------------- headroom that follows demand

@pytest.mark.parametrize(("signal", "per", "quantity"), [
    ("queue", "5", "5"),
    ("queue", "2.5", "2500m"),
    ("queue", "0.0004", None),  # below the HPA's resolution: an error
    ("requests", "15", "15"),
    ("requests", "7.25", "7250m"),
    ("requests", "0.0015", "2m"),  # rounded to the resolution the HPA controller compares in (MilliValue)
])
def test_auto_hpa_target_is_the_demand_one_replica_stands_for(signal, per, quantity):
    """The metric is the demand's growth times the provisioning time (Prometheus records which time), so the target
    is the demand per replica alone and does not change with the provisioning time."""
    key = "queuePerReplica" if signal == "queue" else "requestsPerReplica"
    sets = ("headroom.auto.enabled=true", f"headroom.auto.signal={signal}", f"headroom.auto.{key}={per}")
    if quantity is None:
        assert f"headroom.auto.{key}: {per} is below 0.001" in error_of(*VLLM, *sets)
        return
    for time in ("9m", "1m30s", "1h"):
        docs = rendered(*sets, f"headroom.auto.provisioningTime={time}")
        [metric] = one(docs, "HorizontalPodAutoscaler", "vllm-headroom")["spec"]["metrics"]
        assert metric["object"]["metric"] == {"name": QUEUE_METRIC if signal == "queue" else METRIC}
        assert metric["object"]["target"] == {"type": "AverageValue", "averageValue": quantity}
        assert abs(parse_quantity(quantity) - Decimal(per)) <= Decimal("0.0005")


def test_auto_hpa_reads_the_servers_request_rate_as_an_object_metric_on_the_workload():
    docs = rendered(*AUTO, "headroom.auto.maxReplicas=6")
    hpa = one(docs, "HorizontalPodAutoscaler", "vllm-headroom")
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-headroom"}
    # A 1.33 cluster (these tests' default) cannot scale an HPA to zero: one standing placeholder.
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 6)
    assert spec["metrics"][0]["type"] == "Object"
    assert spec["metrics"][0]["object"]["describedObject"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                                "name": "vllm"}
    assert spec["metrics"][0]["object"]["metric"] == {"name": METRIC}
    # The HPA owns the count: the Deployment leaves replicas out, so an upgrade does not reset it.
    assert "replicas" not in one(docs, "Deployment", "vllm-headroom")["spec"]
    assert validate_all(docs) == []
    # Where the HPA may scale to zero (1.37: HPAScaleToZero beta, on by default) the headroom goes to zero; before,
    # one placeholder stands; a value given is kept.
    for version, least in (("1.37.0", 0), ("1.36.2", 1), ("1.33.0", 1)):
        assert one(rendered(*AUTO, kube_version=version), "HorizontalPodAutoscaler")["spec"]["minReplicas"] == least
    for value in (0, 1, 2):
        assert one(rendered(*AUTO, f"headroom.auto.minReplicas={value}"),
                   "HorizontalPodAutoscaler")["spec"]["minReplicas"] == value


@pytest.mark.parametrize(("signal", "metric", "quantity"), [("requests", METRIC, "10"),
                                                            ("queue", QUEUE_METRIC, "5")])
def test_auto_hpa_reads_the_gateway_as_an_external_metric(signal, metric, quantity):
    docs = rendered(*AUTO, f"headroom.auto.signal={signal}", "headroom.auto.source=gateway",
                    "headroom.auto.inferencePool=vllm-pool", "adapter.apiService.externalMetrics.enabled=true")
    [spec] = one(docs, "HorizontalPodAutoscaler")["spec"]["metrics"]
    assert spec == {"type": "External", "external": {
        "metric": {"name": metric, "selector": {"matchLabels": {"inference_pool": "vllm-pool"}}},
        "target": {"type": "AverageValue", "averageValue": quantity}}}
    assert validate_all(docs) == []


def _rules(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(one(docs, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")["data"]["rules.yaml"])


def test_the_adapter_rules_carry_the_preset_while_auto_is_on(tmp_path):
    preset = yaml.safe_load(capacity_yaml())
    off = _rules(rendered())
    for sets in (AUTO, ("adapter.rules.capacityPresets=true",)):
        docs = rendered(*sets)
        data = _rules(docs)
        assert data["rules"] == off["rules"] + preset["rules"]
        assert data["externalRules"] == off.get("externalRules", []) + preset["externalRules"]
        path = tmp_path / "rules.yaml"
        path.write_text(yaml.safe_dump(data))
        config = load_rules(str(path))  # the adapter's own loader accepts it
        served = ["inference_queue_growth_rate", "inference_request_rate_growth", QUEUE_METRIC, METRIC]
        assert [r.name.as_ for r in config.rules[-len(preset["rules"]):]] == served
        assert [r.name.as_ for r in config.external_rules[-len(preset["externalRules"]):]] == served
        # The Object metric joins on the pod -> Deployment recording rule, which the PrometheusRule now carries.
        groups = one(docs, "PrometheusRule")["spec"]["groups"]
        records = [r["record"] for g in groups for r in g["rules"] if "record" in r]
        assert "namespace_deployment_pod:kube_pod_owner:relabel" in records
    assert "namespace_deployment_pod:kube_pod_owner:relabel" not in yaml.safe_dump(one(rendered(), "PrometheusRule"))


# ------------------------------------------------------------------------------------------ render-time errors

ERRORS = [
    ((*VLLM, "karpenter.nodePool.enabled=true", "karpenter.nodePool.instanceTypes={g5.xlarge,g7.2xlarge}"),
     'karpenter.nodePool.instanceTypes: no known GPU count for "g7.2xlarge"'),
    ((*VLLM, "karpenter.nodePool.enabled=true", "karpenter.nodePool.instanceTypes={p3.2xlarge}"),
     'karpenter.nodePool.instanceTypes: "p3.2xlarge" is of none of karpenter.nodePool.instanceFamilies'),
    ((*VLLM, "karpenter.nodePool.enabled=true", "headroom.placeholders.enabled=true",
      "headroom.placeholders.replicas=5", "headroom.workload.gpusPerReplica=4"),
     "headroom: 20 GPUs of headroom (placeholders 5 x 4) is more than karpenter.nodePool.limits nvidia.com/gpu 16"),
    ((*VLLM, "karpenter.nodePool.enabled=true", *AUTO, "headroom.auto.maxReplicas=9",
      "headroom.workload.gpusPerReplica=2"),
     "headroom: 18 GPUs of headroom (auto.maxReplicas 9 x 2) is more than karpenter.nodePool.limits"),
    ((*VLLM, "karpenter.nodePool.enabled=true", "karpenter.nodePool.instanceTypes={g6e.xlarge,g6e.2xlarge}",
      "headroom.placeholders.enabled=true", "headroom.workload.gpusPerReplica=4"),
     "headroom.workload.gpusPerReplica: 4 GPUs per replica, but no instance type karpenter.nodePool may launch"),
    (("headroom.placeholders.enabled=true",), "headroom.workload.name: required"),
    ((*VLLM, "headroom.capacityBuffer.enabled=auto", "headroom.capacityBuffer.replicas=null"),
     "headroom.capacityBuffer: set replicas, percentage or gpus"),
    ((*VLLM, *AUTO, "headroom.placeholders.enabled=true"),
     "headroom.placeholders.enabled and headroom.auto.enabled both size the placeholder Deployment"),
    ((*VLLM, *AUTO, "headroom.auto.source=gateway", "headroom.auto.inferencePool=p"),
     "headroom.auto.source: gateway reads the External metric inference_request_rate_ahead, served only with "
     "adapter.apiService.externalMetrics.enabled=true"),
    ((*VLLM, *AUTO, "headroom.auto.source=gateway",
      "adapter.apiService.externalMetrics.enabled=true"), "headroom.auto.inferencePool: required"),
    ((*VLLM, *AUTO, "headroom.workload.kind=StatefulSet"),
     "headroom.auto.source: servers reads the Object metric"),
    ((*VLLM, "headroom.auto.enabled=true"),
     "headroom.auto.requestsPerReplica: required with signal requests (the requests per second one replica stands "
     "for at the workload HPA's target)"),
    ((*VLLM, *AUTO, "headroom.auto.provisioningTime=0m"),
     'headroom.auto.provisioningTime: "0m" is no time at all'),
    ((*VLLM, "headroom.capacityBuffer.enabled=true", "headroom.capacityBuffer.percentage=20"),
     "headroom.capacityBuffer.percentage counts the workload's replicas, which only a buffer with ref scalableRef "
     "reads"),
    ((*VLLM, *AUTO, "headroom.auto.minReplicas=5"),
     "headroom.auto.minReplicas: 5 is above headroom.auto.maxReplicas 4"),
]


@pytest.mark.parametrize(("sets", "message"), ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_bad_values_fail_the_render_with_one_line_naming_them(sets, message):
    assert message in error_of(*sets)


def test_the_nodepool_gpu_limit_error_says_a_percentage_is_not_counted():
    common = (*VLLM, "karpenter.nodePool.enabled=true", "headroom.workload.gpusPerReplica=4",
              "headroom.capacityBuffer.enabled=true", "headroom.capacityBuffer.replicas=5",
              "headroom.capacityBuffer.ref=scalableRef")
    uncounted = "(a CapacityBuffer's percentage is not counted: it depends on the workload's replicas at run time)"
    line = error_of(*common, "headroom.capacityBuffer.percentage=50")
    assert "headroom: 20 GPUs of headroom (capacityBuffer 20) is more than karpenter.nodePool.limits" in line
    assert line.endswith(uncounted)
    assert uncounted not in error_of(*common)  # said only where a percentage is set


def test_a_capacity_buffer_counts_against_the_nodepool_gpu_limit_beside_placeholders():
    # The buffer's replicas x gpusPerReplica, capped by its gpus (5 x 4 = 20, capped at 12), plus the placeholders'.
    common = (*VLLM, "karpenter.nodePool.enabled=true", "headroom.workload.gpusPerReplica=4",
              "headroom.capacityBuffer.enabled=true", "headroom.capacityBuffer.replicas=5",
              "headroom.placeholders.enabled=true", "headroom.placeholders.replicas=2")
    served = KUBE_PROMETHEUS_STACK + V1BETA1
    assert ("headroom: 20 GPUs of headroom (capacityBuffer 12 + placeholders 2 x 4) is more than "
            "karpenter.nodePool.limits nvidia.com/gpu 16") in error_of(*common, "headroom.capacityBuffer.gpus=12",
                                                                        api_versions=served)
    assert "headroom: 28 GPUs of headroom (capacityBuffer 20 + placeholders 2 x 4)" in error_of(*common,
                                                                                                api_versions=served)
    docs = rendered(*common[2:], "headroom.capacityBuffer.gpus=8", api_versions=served)  # 8 + 8 = 16 fits
    assert one(docs, "CapacityBuffer")["spec"]["limits"] == {"nvidia.com/gpu": "8"}  # a Quantity


def test_headroom_within_the_nodepool_renders_and_pins_instance_types():
    docs = rendered("karpenter.nodePool.enabled=true", "karpenter.nodePool.instanceTypes={g6e.xlarge,g6e.12xlarge}",
                    "headroom.placeholders.enabled=true", "headroom.placeholders.replicas=4",
                    "headroom.workload.gpusPerReplica=4")
    requirements = {r["key"]: r for r in one(docs, "NodePool")["spec"]["template"]["spec"]["requirements"]}
    assert requirements["node.kubernetes.io/instance-type"] == {
        "key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g6e.xlarge", "g6e.12xlarge"]}
    assert validate_all(docs) == []


@pytest.mark.parametrize("sets", [("headroom.auto.window=5m",), ("headroom.capacityBuffer.enabled=yes",),
                                  ("headroom.workload.kind=Job",), ("headroom.auto.provisioningTime=3 minutes",),
                                  ("headroom.workload.requests.nvidia\\.com/gpu=1",),
                                  ("headroom.auto.signal=latency",), ("headroom.auto.requestsPerReplica=-2",),
                                  ("headroom.placeholders.prePullCommand=7",),
                                  ("headroom.placeholders.imagePullSecrets[0].secret=x",),
                                  ("headroom.placeholders.terminationGracePeriodSeconds=0",),
                                  ("headroom.capacityBuffer.ref=Deployment",),
                                  ("headroom.auto.provisioningTimeSource=guess",)])
def test_values_schema_rejects_unknown_or_bad_headroom_values(sets):
    proc = template(None, *VLLM, *sets, check=False)
    assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_form_together_is_valid_on_each_kubernetes(kube_version):
    docs = rendered("headroom.capacityBuffer.enabled=auto", *AUTO,
                    "headroom.placeholders.prePullImage=vllm/vllm-openai:v0.11.0",
                    api_versions=KUBE_PROMETHEUS_STACK + V1BETA1, kube_version=f"{kube_version}.0")
    assert {"CapacityBuffer", "PriorityClass", "HorizontalPodAutoscaler"} <= {d["kind"] for d in docs}
    assert validate_all(docs, [kube_version]) == []


def test_headroom_is_off_by_default():
    docs = render(None)
    assert not find(docs, "CapacityBuffer") and not find(docs, "PriorityClass")
    assert not find(docs, "HorizontalPodAutoscaler")


# ------------------------------------------------------------------------------------- NOTES.txt (helm install)

cluster = first_install.cluster  # the fake Kubernetes API fixture
HEADROOM_TYPES = [("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False),
                  ("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True),
                  ("", "v1", "podtemplates", "PodTemplate", True)]


def _install(fake: FakeKube, kubeconfig: str, *sets: str) -> tuple[list[dict[str, Any]], str]:
    """`helm install --dry-run=server` against the fake API (tests/test_chart_first_install.py), which now also
    serves the kinds the headroom forms create."""
    for group, version, resource, kind, namespaced in HEADROOM_TYPES:
        fake.register(group, version, resource, kind, namespaced)
    proc = first_install.helm_install(kubeconfig, *sets)
    assert proc.returncode == 0, proc.stderr
    return first_install._manifest_and_notes(proc.stdout)


def test_notes_say_the_capacity_buffer_was_left_out_and_why(cluster):
    fake, kubeconfig = cluster
    docs, notes = _install(fake, kubeconfig, *VLLM, "headroom.capacityBuffer.enabled=auto", *AUTO)
    assert not find(docs, "CapacityBuffer") and find(docs, "HorizontalPodAutoscaler")
    assert ("CapacityBuffer (GPU headroom): no autoscaling.x-k8s.io/v1beta1 or v1alpha1 CapacityBuffer "
            "(headroom.capacityBuffer.enabled is auto)") in notes
    assert "Cluster Autoscaler 1.34+" in notes and "Karpenter 1.14+ (feature gate" in notes
    assert f"from {METRIC} (servers: the demand's growth x the provisioning time), target averageValue" in notes
    assert "10 (requestsPerReplica), 1 to 4 pods of 1 GPU(s)" in notes
    assert ("the p90 time to ready\n    of vllm's replicas that waited for a new node (provisioningTime 9m until there "
            "is history)") in notes
    assert "No PrometheusRule is rendered here" in notes  # the fake API serves no PrometheusRule kind
    assert f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/deployments.apps/vllm/{METRIC}" in notes


def test_notes_name_the_capacity_buffer_where_the_cluster_serves_it(cluster):
    fake, kubeconfig = cluster
    fake.register("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers", "CapacityBuffer", True)
    docs, notes = _install(fake, kubeconfig, *VLLM, "headroom.capacityBuffer.enabled=auto",
                           "headroom.placeholders.enabled=true", "headroom.placeholders.replicas=2")
    assert one(docs, "CapacityBuffer")["apiVersion"] == "autoscaling.x-k8s.io/v1beta1"
    assert "CapacityBuffer (GPU headroom): no" not in notes and "CapacityBuffer: left out" not in notes
    assert "CapacityBuffer vllm-headroom (autoscaling.x-k8s.io/v1beta1): 1 replica(s)" in notes
    assert "2 placeholder pod(s) holding 2 GPU(s)" in notes


def test_notes_for_the_gateway_source_and_an_existing_rules_configmap(cluster):
    fake, kubeconfig = cluster
    docs, notes = _install(fake, kubeconfig, *VLLM, *AUTO, "headroom.auto.source=gateway",
                           "headroom.auto.inferencePool=vllm-pool", "adapter.apiService.externalMetrics.enabled=true",
                           "adapter.rules.existingConfigMap=my-rules")
    assert one(docs, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["type"] == "External"
    assert (f'kubectl get --raw "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/{METRIC}'
            f'?labelSelector=inference_pool%3Dvllm-pool"') in notes
    assert "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/deployments.apps/vllm/" not in notes
    assert (f"Your rules ConfigMap my-rules must serve {METRIC}: add include: [capacity-headroom] to it."
            in notes)


def test_notes_say_the_nodepool_check_left_out_the_capacity_buffers_percentage(cluster):
    fake, kubeconfig = cluster
    fake.register("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers", "CapacityBuffer", True)
    fake.register("karpenter.sh", "v1", "nodepools", "NodePool", False)
    sets = (*VLLM, "karpenter.nodePool.enabled=true", "headroom.capacityBuffer.enabled=auto",
            "headroom.capacityBuffer.ref=scalableRef")
    uncounted = "did not count this percentage"
    _, notes = _install(fake, kubeconfig, *sets, "headroom.capacityBuffer.percentage=25")
    assert "1 replica(s) 25% of its replicas, each shaped as Deployment vllm's pod template as stored" in notes
    assert uncounted in notes
    _, notes = _install(fake, kubeconfig, *sets)
    assert "CapacityBuffer vllm-headroom" in notes and uncounted not in notes


def test_notes_say_when_placeholders_leave_part_of_a_node_idle(cluster):
    """Karpenter packs the placeholders of one batch onto one node (pkg/controllers/provisioning/scheduling/
    scheduler.go: existing, then in-flight NodeClaims before a new one): three 1-GPU placeholders on a g5/g6 pool
    share a node, and the smallest that holds three GPUs has four."""
    fake, kubeconfig = cluster
    fake.register("karpenter.sh", "v1", "nodepools", "NodePool", False)
    sets = (*VLLM, "karpenter.nodePool.enabled=true", "karpenter.nodePool.instanceFamilies={g5,g6}",
            "headroom.placeholders.enabled=true")
    _, notes = _install(fake, kubeconfig, *sets, "headroom.placeholders.replicas=3")
    assert ("Karpenter packs the placeholders of one batch onto one node: no instance type of the NodePool has "
            "exactly 3 GPU(s), and the smallest that holds them all (g5.12xlarge) has 4, 1 of them idle.") in notes
    for whole in (1, 4):  # g5.xlarge holds 1, g5.12xlarge 4: whole nodes
        _, notes = _install(fake, kubeconfig, *sets, f"headroom.placeholders.replicas={whole}")
        assert "Karpenter packs the placeholders" not in notes


# ------------------------------------------------------------------------------------------ hpa-examples/

EXAMPLE_FILES = ("headroom-capacitybuffer.yaml", "headroom-placeholders.yaml", "headroom-auto-hpa.yaml")


@pytest.fixture(scope="module")
def examples() -> list[dict[str, Any]]:
    return load_files([EXAMPLES / name for name in EXAMPLE_FILES])


def test_one_example_per_form_and_each_is_valid(examples):
    assert [d["kind"] for d in examples] == ["PodTemplate", "CapacityBuffer", "PriorityClass", "Deployment",
                                             "HorizontalPodAutoscaler"]
    assert validate_all(examples) == []


def test_the_examples_are_what_the_chart_renders_for_vllm(examples):
    vllm = one(load_files([EXAMPLES / "vllm.yaml"]), "Deployment", "vllm")
    container = vllm["spec"]["template"]["spec"]["containers"][0]["resources"]
    sets = ("headroom.workload.gpusPerReplica=1", f"headroom.workload.requests.cpu={container['requests']['cpu']}",
            f"headroom.workload.requests.memory={container['requests']['memory']}")
    chart_buffer = rendered(*sets, "headroom.capacityBuffer.enabled=auto", "headroom.capacityBuffer.gpus=4",
                            api_versions=V1BETA1)
    chart_cb = one(chart_buffer, "CapacityBuffer")
    assert one(examples, "CapacityBuffer") == {**chart_cb, "metadata": one(examples, "CapacityBuffer")["metadata"]}
    # The buffer's pods: one vllm replica's requests, GPU included, where vllm runs.
    template, chart_template = (one(d, "PodTemplate")["template"]["spec"] for d in (examples, chart_buffer))
    assert template["containers"] == chart_template["containers"]
    assert template["tolerations"] == chart_template["tolerations"] == vllm["spec"]["template"]["spec"]["tolerations"]
    assert template["affinity"] == vllm["spec"]["template"]["spec"]["affinity"]
    assert template["containers"][0]["resources"]["requests"] == container["requests"]
    # The placeholders request what one vllm replica does, and the chart's render agrees.
    example_pod = one(examples, "Deployment", "vllm-headroom")["spec"]["template"]["spec"]
    chart = rendered(*sets, "headroom.placeholders.enabled=true", "headroom.placeholders.replicas=2")
    chart_pod = one(chart, "Deployment", "vllm-headroom")["spec"]["template"]["spec"]
    assert example_pod["containers"][0]["resources"] == chart_pod["containers"][0]["resources"]
    assert example_pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == \
        container["limits"]["nvidia.com/gpu"]
    for key in ("tolerations", "terminationGracePeriodSeconds", "securityContext"):
        assert example_pod[key] == chart_pod[key], key
    assert example_pod["affinity"] == vllm["spec"]["template"]["spec"]["affinity"]
    klass = one(examples, "PriorityClass")
    assert {k: klass[k] for k in ("value", "preemptionPolicy", "globalDefault")} == \
        {k: one(chart, "PriorityClass")[k] for k in ("value", "preemptionPolicy", "globalDefault")}
    # The auto HPA: the chart's for the same values, apart from the behavior the example spells out.
    hpa = one(examples, "HorizontalPodAutoscaler")
    per = re.search(r"requestsPerReplica (\S+)", (EXAMPLES / "headroom-auto-hpa.yaml").read_text()).group(1)
    chart_hpa = one(rendered(*sets, "headroom.auto.enabled=true", f"headroom.auto.requestsPerReplica={per}",
                             kube_version="1.37.0"), "HorizontalPodAutoscaler")  # the example's minReplicas 0
    for key in ("scaleTargetRef", "metrics", "minReplicas", "maxReplicas"):
        assert hpa["spec"][key] == chart_hpa["spec"][key], key
