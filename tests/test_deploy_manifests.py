"""apiservice/ (kustomize overlays) and hpa-examples/: what a user applies to a cluster, checked offline with the real
kubectl (kustomize), Kubernetes schemas for 1.29-1.33, the published CRDs, openssl, and the adapter's own CLI and
rules loader."""

from __future__ import annotations

import base64
import copy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from adapter.presets.gpu import gpu_presets
from adapter.rules import build_catalogue
from adapter.rulesfile.loader import load_rules, parse_rules
from tests.support.k8s_validation import REPO, find, kustomize, load_files, one, run, validate_all
from tests.support.tools import require_tool

pytestmark = pytest.mark.unit

APISERVICE = REPO / "apiservice"
EXAMPLES = REPO / "hpa-examples"
OVERLAYS = ("generated-ca", "cert-manager", "insecure")


def _copy_apiservice(tmp_path: Path) -> Path:
    target = tmp_path / "apiservice"
    shutil.copytree(APISERVICE, target, ignore=shutil.ignore_patterns("certs"))
    return target


def _gen_certs(overlay: Path) -> Path:
    require_tool("openssl")  # gen-certs.sh needs it
    run(["bash", str(overlay / "gen-certs.sh")])
    return overlay / "certs"


def _with_external(overlay: Path) -> None:
    kustomization = overlay / "kustomization.yaml"
    text = kustomization.read_text()
    assert "components: []" in text
    kustomization.write_text(text.replace("components: []", "components:\n- ../../components/external-metrics"))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Each overlay rendered by kubectl kustomize, with and without the external-metrics component."""
    out = {}
    for external in (False, True):
        tree = _copy_apiservice(tmp_path_factory.mktemp("apiservice"))
        _gen_certs(tree / "overlays" / "generated-ca")
        for overlay in OVERLAYS:
            if external:
                _with_external(tree / "overlays" / overlay)
            out[overlay + ("+external" if external else "")] = kustomize(tree / "overlays" / overlay)
    return out


@pytest.mark.e2e
@pytest.mark.tools
@pytest.mark.parametrize("variant", [*OVERLAYS, *(o + "+external" for o in OVERLAYS)])
def test_overlay_is_valid_for_kubernetes_1_29_to_1_33(rendered, variant):
    docs = rendered[variant]
    assert validate_all(docs) == []
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding", "ConfigMap",
            "Deployment", "Service", "PodDisruptionBudget", "APIService"} <= kinds


@pytest.mark.parametrize("variant", [*OVERLAYS, *(o + "+external" for o in OVERLAYS)])
def test_apiservices_point_at_the_adapter_service(rendered, variant):
    docs = rendered[variant]
    apiservices = {d["metadata"]["name"]: d for d in find(docs, "APIService")}
    expected = {"v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io"}
    if variant.endswith("+external"):
        expected.add("v1beta1.external.metrics.k8s.io")
    assert set(apiservices) == expected
    for name, api in apiservices.items():
        spec = api["spec"]
        assert name == f"{spec['version']}.{spec['group']}"  # the aggregator's validation rule
        assert 1 <= spec["groupPriorityMinimum"] <= 20000 and 1 <= spec["versionPriority"] <= 1000
        service = one(docs, "Service", spec["service"]["name"])
        assert service["metadata"]["namespace"] == spec["service"]["namespace"]
        assert spec["service"]["port"] in [p["port"] for p in service["spec"]["ports"]]
        assert not (spec.get("insecureSkipTLSVerify") and spec.get("caBundle"))  # rejected by the apiserver
    # v1beta2 is the preferred version of the group.
    assert apiservices["v1beta2.custom.metrics.k8s.io"]["spec"]["versionPriority"] > \
        apiservices["v1beta1.custom.metrics.k8s.io"]["spec"]["versionPriority"]


def test_service_reaches_the_adapter_pods(rendered):
    docs = rendered["generated-ca"]
    service = one(docs, "Service", "gpu-metrics-adapter")
    deployment = one(docs, "Deployment", "gpu-metrics-adapter")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    ports = {p["name"]: p["containerPort"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in ports
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def test_generated_ca_overlay_trusts_exactly_the_serving_certificate(rendered):
    docs = rendered["generated-ca"]
    deployment = one(docs, "Deployment", "gpu-metrics-adapter")
    secret_name = next(v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]
                       if v["name"] == "serving-cert")
    secret = one(docs, "Secret", secret_name)
    assert secret["type"] == "kubernetes.io/tls"
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    key = _private_key(base64.b64decode(secret["data"]["tls.key"]))
    for api in find(docs, "APIService"):
        assert base64.b64decode(api["spec"]["caBundle"]) == base64.b64decode(secret["data"]["ca.crt"])
        host = f"{api['spec']['service']['name']}.{api['spec']['service']['namespace']}.svc"
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert host in sans.get_values_for_type(x509.DNSName)  # the ServerName the aggregator verifies
    cert.verify_directly_issued_by(ca)
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def _private_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


@pytest.mark.e2e
@pytest.mark.tools
def test_gen_certs_renews_the_certificate_but_keeps_the_ca(tmp_path):
    overlay = _copy_apiservice(tmp_path) / "overlays" / "generated-ca"
    certs = _gen_certs(overlay)
    ca_before, cert_before = (certs / "ca.crt").read_bytes(), (certs / "tls.crt").read_bytes()
    run(["bash", str(overlay / "gen-certs.sh"), "--service", "adapter", "--namespace", "metrics"])
    assert (certs / "ca.crt").read_bytes() == ca_before
    assert (certs / "tls.crt").read_bytes() != cert_before
    cert = x509.load_pem_x509_certificate((certs / "tls.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "adapter.metrics.svc" in names
    assert oct((certs / "tls.key").stat().st_mode & 0o777) == "0o600"


@pytest.mark.tools
def test_generated_ca_overlay_without_certificates_fails_with_the_missing_file(tmp_path):
    overlay = _copy_apiservice(tmp_path) / "overlays" / "generated-ca"
    from tests.support.k8s_validation import tool

    proc = run([tool("kubectl"), "kustomize", str(overlay)], check=False)
    assert proc.returncode != 0 and "certs/tls.crt" in proc.stderr


def test_cert_manager_overlay_injects_the_ca_of_the_certificate_the_adapter_serves(rendered):
    docs = rendered["cert-manager+external"]
    deployment = one(docs, "Deployment", "gpu-metrics-adapter")
    secret_name = next(v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]
                       if v["name"] == "serving-cert")
    for api in find(docs, "APIService"):
        namespace, name = api["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
        certificate = one(docs, "Certificate", name)
        assert certificate["metadata"]["namespace"] == namespace
        assert certificate["spec"]["secretName"] == secret_name
        assert f"{api['spec']['service']['name']}.{api['spec']['service']['namespace']}.svc" in \
            certificate["spec"]["dnsNames"]
        assert "caBundle" not in api["spec"] and not api["spec"].get("insecureSkipTLSVerify")
    # The chain: self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate.
    serving = one(docs, "Certificate", "gpu-metrics-adapter")
    ca_issuer = one(docs, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca_cert = one(docs, "Certificate", next(c["metadata"]["name"] for c in find(docs, "Certificate")
                                            if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]))
    assert ca_cert["spec"]["isCA"] is True
    assert "selfSigned" in one(docs, "Issuer", ca_cert["spec"]["issuerRef"]["name"])["spec"]


def test_insecure_overlay_self_signs_into_a_writable_empty_dir(rendered):
    docs = rendered["insecure+external"]
    for api in find(docs, "APIService"):
        assert api["spec"]["insecureSkipTLSVerify"] is True and "caBundle" not in api["spec"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volume = next(v for v in pod["volumes"] if v["name"] == "serving-cert")
    assert volume == {"name": "serving-cert", "emptyDir": {}}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "serving-cert")
    assert mount["readOnly"] is False
    assert "--cert-dir=" + mount["mountPath"] in container["args"]
    assert not [a for a in container["args"] if a.startswith("--tls-")]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_rbac_grants_what_an_aggregated_api_server_needs(rendered):
    docs = rendered["generated-ca+external"]
    deployment = one(docs, "Deployment", "gpu-metrics-adapter")
    sa = (deployment["spec"]["template"]["spec"]["serviceAccountName"], deployment["metadata"]["namespace"])
    assert one(docs, "ServiceAccount", sa[0])["metadata"]["namespace"] == sa[1]

    def bound(role_kind: str, role: str, binding_kind: str = "ClusterRoleBinding") -> list[dict[str, Any]]:
        return [b for b in find(docs, binding_kind)
                if b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role}]

    def subjects(bindings: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(s["name"], s["namespace"]) for b in bindings for s in b["subjects"] if s["kind"] == "ServiceAccount"}

    assert sa in subjects(bound("ClusterRole", "system:auth-delegator"))
    reader = bound("Role", "extension-apiserver-authentication-reader", "RoleBinding")
    assert reader and all(b["metadata"]["namespace"] == "kube-system" for b in reader)
    assert sa in subjects(reader)
    # The adapter can read pods (labelSelector resolution) and the other objects its rules map.
    readable = _granted(docs, sa)
    for resource in [("", "pods"), ("", "services"), ("", "namespaces"), ("", "nodes"), ("apps", "deployments")]:
        assert {"get", "list", "watch"} <= readable.get(resource, set()), resource
    # The HPA controller may read both metrics APIs.
    hpa = _granted(docs, ("horizontal-pod-autoscaler", "kube-system"))
    assert {"get", "list"} <= hpa[("custom.metrics.k8s.io", "*")]
    assert {"get", "list"} <= hpa[("external.metrics.k8s.io", "*")]


def _granted(docs: list[dict[str, Any]], sa: tuple[str, str]) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for binding in find(docs, "ClusterRoleBinding"):
        if not any((s["name"], s.get("namespace")) == sa for s in binding["subjects"]):
            continue
        roles = find(docs, "ClusterRole", binding["roleRef"]["name"])
        for role in roles:
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_adapter_deployment_is_hardened_and_highly_available(rendered):
    for variant in OVERLAYS:
        deployment = one(rendered[variant], "Deployment", "gpu-metrics-adapter")
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert deployment["spec"]["replicas"] == 2
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                "capabilities": {"drop": ["ALL"]}}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
        assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "https", "scheme": "HTTPS"}
        assert "memory" in container["resources"]["limits"] and "cpu" in container["resources"]["requests"]
        assert not [a for a in container["args"] if "disable-auth" in a]
        assert one(rendered[variant], "Namespace")["metadata"]["labels"][
            "pod-security.kubernetes.io/enforce"] == "restricted"


def test_adapter_drains_within_its_grace_period_and_its_critical_class_is_admitted(rendered):
    """The chart's lifecycle defaults (tests/test_chart_lifecycle.py) in the plain manifests too."""
    for variant in OVERLAYS:
        pod = one(rendered[variant], "Deployment", "gpu-metrics-adapter")["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        assert {"--shutdown-delay-duration=15s", "--shutdown-drain-timeout=10s"} <= set(args)
        assert pod["terminationGracePeriodSeconds"] == 30
        assert [c["topologyKey"] for c in pod["topologySpreadConstraints"]] == [
            "kubernetes.io/hostname", "topology.kubernetes.io/zone"]
        quota = one(rendered[variant], "ResourceQuota")
        assert quota["metadata"]["namespace"] == pod_namespace(rendered[variant])
        assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == [pod["priorityClassName"]]
        assert "hard" not in quota["spec"]


def test_adapter_resources_are_the_charts_defaults(rendered):
    """The plain manifests' adapter container asks for what the chart's values.yaml does (measured:
    docs/performance.md), so the two installs size the adapter alike."""
    chart = yaml.safe_load((REPO / "charts" / "gpu-autoscaler" / "values.yaml").read_text())["adapter"]["resources"]
    for variant in OVERLAYS:
        pod = one(rendered[variant], "Deployment", "gpu-metrics-adapter")["spec"]["template"]["spec"]
        [container] = [c for c in pod["containers"] if c["name"] == "adapter"]
        assert container["resources"] == chart, variant


def pod_namespace(docs):
    return one(docs, "Deployment", "gpu-metrics-adapter")["metadata"]["namespace"]


@pytest.mark.e2e
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_adapter_cli_accepts_the_deployment_arguments(rendered, overlay):
    container = one(rendered[overlay], "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["gpu-adapter"]
    # An unknown flag makes the CLI exit 2 before --help is honoured; every flag we pass must exist.
    proc = subprocess.run([sys.executable, "-m", "adapter", *container["args"], "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rules_configmap_loads_with_the_adapter_and_includes_the_presets(rendered, tmp_path):
    config_map = one(rendered["generated-ca"], "ConfigMap", "gpu-metrics-adapter-rules")
    deployment = one(rendered["generated-ca"], "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "rules")
    config_arg = next(a for a in container["args"] if a.startswith("--config="))
    assert config_arg == f"--config={mount['mountPath']}/rules.yaml"
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(config_map["data"]["rules.yaml"])
    config = load_rules(str(rules_file))
    presets = gpu_presets()
    # The presets come after the file's own rule; the file's own rule serves deployments.
    assert [r.series_query for r in config.rules[-len(presets.rules):]] == [r.series_query for r in presets.rules]
    own = config.rules[0]
    assert own.name.as_ == "DCGM_FI_DEV_GPU_UTIL_AVG"
    assert {str(gr) for _, gr in own.resources.overrides} == {"namespaces", "deployments.apps"}


def test_plain_and_chart_deployment_rule_are_the_same():
    plain = yaml.safe_load(
        one(load_files([APISERVICE / "base" / "rules.yaml"]), "ConfigMap")["data"]["rules.yaml"])
    chart = yaml.safe_load((REPO / "charts" / "gpu-autoscaler" / "files" / "deployment-rules.yaml").read_text())
    assert plain["rules"] == chart["rules"]


# --------------------------------------------------------------------------------------------- hpa-examples/

@pytest.fixture(scope="module")
def examples() -> list[dict[str, Any]]:
    return load_files(sorted(EXAMPLES.rglob("*.yaml")))


def _k8s_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # chart-values-*.yaml (Helm values) and the eksctl ClusterConfig are not Kubernetes objects.
    return [d for d in docs if "kind" in d and d.get("apiVersion") != "eksctl.io/v1alpha5"]


def test_examples_are_valid_for_kubernetes_1_29_to_1_33(examples):
    objects = _k8s_objects(examples)
    assert validate_all(objects) == []
    assert {d["kind"] for d in objects} >= {"Deployment", "Service", "HorizontalPodAutoscaler", "NodePool",
                                              "EC2NodeClass", "ServiceMonitor"}


def test_validation_catches_a_misspelt_field(examples):
    hpa = copy.deepcopy(one(examples, "HorizontalPodAutoscaler", "vision-api-gpu-util"))
    hpa["spec"]["metrics"][0]["pods"]["target"]["averageValu"] = "60"
    assert validate_all([hpa], ["1.33"])
    pool = copy.deepcopy(one(examples, "NodePool"))
    pool["spec"]["template"]["spec"]["taint"] = pool["spec"]["template"]["spec"].pop("taints")
    assert validate_all([pool])


def test_the_eks_guide_hpa_is_unchanged(examples):
    hpa = one(examples, "HorizontalPodAutoscaler", "vision-api-gpu-hpa")
    assert hpa["metadata"]["namespace"] == "default"
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vision-api"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 12)
    assert spec["metrics"] == [{"type": "Object", "object": {
        "metric": {"name": "DCGM_FI_DEV_GPU_UTIL_AVG"},
        "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "dcgm-exporter"},
        "target": {"type": "Value", "value": "30"}}}]
    # The chart names the exporter's Service so that this HPA finds it.
    values = yaml.safe_load((REPO / "charts" / "gpu-autoscaler" / "values.yaml").read_text())
    assert values["exporter"]["service"]["name"] == "dcgm-exporter"


def test_every_hpa_targets_the_example_workload_and_has_a_behavior(examples):
    hpas = find(examples, "HorizontalPodAutoscaler")
    assert {m["type"] for h in hpas for m in h["spec"]["metrics"]} == {"Object", "Pods", "External"}
    described = {m["object"]["describedObject"]["kind"] for h in hpas for m in h["spec"]["metrics"]
                 if m["type"] == "Object"}
    assert described == {"Service", "Deployment", "InferencePool"}
    for hpa in hpas:
        target = hpa["spec"]["scaleTargetRef"]
        deployment = one(examples, target["kind"], target["name"])
        assert deployment["metadata"]["namespace"] == hpa["metadata"]["namespace"]
        behavior = hpa["spec"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 300  # GPU pods are slow to come back
        assert behavior["scaleUp"]["policies"]


def test_workload_requests_a_gpu_and_waits_for_readiness(examples):
    pod = one(examples, "Deployment", "vision-api")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["resources"].get("requests", {}).get("nvidia.com/gpu", "1") == "1"
    assert container["readinessProbe"]["httpGet"]["port"] in [p["name"] for p in container["ports"]]
    service = one(examples, "Service", "vision-api")
    assert service["spec"]["selector"].items() <= \
        one(examples, "Deployment", "vision-api")["spec"]["template"]["metadata"]["labels"].items()


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator", "Equal") == "Exists" and t.get("key") in (None, taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value") == taint.get("value"):
            return True
    return False


def _term_matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    for expr in term["matchExpressions"]:
        value = labels.get(expr["key"])
        if expr["operator"] == "In" and value not in expr["values"]:
            return False
        if expr["operator"] == "Exists" and value is None:
            return False
    return True


# GPU of each instance family (Karpenter's instance-gpu-name label values).
GPU_OF_FAMILY = {"g4dn": "t4", "g5": "a10g", "g6": "l4", "g6e": "l40s", "p4d": "a100", "p5": "h100"}


def test_karpenter_provisions_nodes_the_workload_can_use(examples):
    pool = one(examples, "NodePool", "gpu")
    node_class = one(examples, "EC2NodeClass")
    template = pool["spec"]["template"]["spec"]
    assert template["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                        "name": node_class["metadata"]["name"]}
    assert "nvidia.com/gpu" in pool["spec"]["limits"]
    requirements = {r["key"]: r for r in template["requirements"]}
    families = requirements["karpenter.k8s.aws/instance-family"]["values"]
    pod = one(examples, "Deployment", "vision-api")["spec"]["template"]["spec"]
    assert all(_tolerates(pod["tolerations"], taint) for taint in template["taints"])
    assert any(t["key"] == "nvidia.com/gpu" and t["effect"] == "NoSchedule" for t in template["taints"])
    # Some node Karpenter may launch satisfies the pod's required affinity (one of the ORed terms).
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    launchable = [{"karpenter.k8s.aws/instance-family": f, "karpenter.k8s.aws/instance-gpu-name": GPU_OF_FAMILY[f],
                   **pool["spec"]["template"]["metadata"]["labels"]} for f in families]
    assert any(_term_matches(term, node) for term in terms for node in launchable)
    # ...and every GPU the Karpenter term asks for is in the pool, so no pod waits for a node it cannot get.
    karpenter_term = next(t for t in terms if t["matchExpressions"][0]["key"].startswith("karpenter"))
    assert set(karpenter_term["matchExpressions"][0]["values"]) <= {GPU_OF_FAMILY[f] for f in families}
    assert node_class["spec"]["amiSelectorTerms"][0]["alias"].split("@")[0] in ("al2023", "bottlerocket", "al2")


def test_cluster_autoscaler_node_groups_can_scale_from_zero_for_the_workload(examples):
    config = next(d for d in examples if d.get("kind") == "ClusterConfig")
    pod = one(examples, "Deployment", "vision-api")["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    prefix = "k8s.io/cluster-autoscaler/node-template/"
    cluster = config["metadata"]["name"]
    for group in config["managedNodeGroups"]:
        tags = group["tags"]
        assert group["minSize"] == 0
        assert tags["k8s.io/cluster-autoscaler/enabled"] == "true" and f"k8s.io/cluster-autoscaler/{cluster}" in tags
        # The template node CA simulates from tags alone: labels, taints and the GPU count.
        template_labels = {k[len(prefix + "label/"):]: v for k, v in tags.items() if k.startswith(prefix + "label/")}
        assert template_labels == group["labels"]
        assert "k8s.amazonaws.com/accelerator" in template_labels  # CA's AWS GPU label
        template_taints = [{"key": k[len(prefix + "taint/"):], "value": v.split(":")[0], "effect": v.split(":")[1]}
                           for k, v in tags.items() if k.startswith(prefix + "taint/")]
        assert template_taints == group["taints"]
        assert int(tags[prefix + "resources/nvidia.com/gpu"]) >= 1
        assert all(_tolerates(pod["tolerations"], t) for t in template_taints)
        assert any(_term_matches(term, template_labels) for term in terms), group["name"]


@pytest.mark.tools
def test_resource_metrics_component_registers_metrics_k8s_io(tmp_path):
    tree = _copy_apiservice(tmp_path)
    overlay = tree / "overlays" / "insecure"
    kustomization = overlay / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace(
        "components: []", "components:\n- ../../components/resource-metrics"))
    docs = kustomize(overlay)
    assert validate_all(docs) == []
    api = one(docs, "APIService", "v1beta1.metrics.k8s.io")
    assert api["spec"]["group"] == "metrics.k8s.io" and api["spec"]["insecureSkipTLSVerify"] is True
    assert api["spec"]["service"]["name"] == one(docs, "Service", "gpu-metrics-adapter")["metadata"]["name"]
    hpa = _granted(docs, ("horizontal-pod-autoscaler", "kube-system"))
    assert {"get", "list"} <= hpa[("metrics.k8s.io", "pods")] and {"get", "list"} <= hpa[("metrics.k8s.io", "nodes")]


def test_vllm_hpa_scales_on_its_queue_with_gpu_utilisation_second(examples):
    hpa = one(examples, "HorizontalPodAutoscaler", "vllm-queue")
    metrics = hpa["spec"]["metrics"]
    assert [(m["type"], m["pods"]["metric"]["name"], m["pods"]["target"]["type"]) for m in metrics] == [
        ("Pods", "vllm:num_requests_waiting", "AverageValue"), ("Pods", "DCGM_FI_DEV_GPU_UTIL", "AverageValue")]
    # Both metrics are served per pod by the rules the chart values (or `include`) bring in.
    config = parse_rules("include: [gpu-presets, vllm]\n", "rules.yaml")
    pod = {"namespace": "default", "pod": "vllm-6c9d-x2k4p"}
    series = [{"__name__": "vllm:num_requests_waiting", "model_name": "qwen2.5-7b-instruct", "engine": "0", **pod},
              {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "UUID": "GPU-1", **pod}]
    catalogue = build_catalogue(config, {q: series for q in config.series_queries()})
    for metric in metrics:
        assert catalogue.lookup(metric["pods"]["metric"]["name"], "pods"), metric
    values = yaml.safe_load((EXAMPLES / "chart-values-vllm.yaml").read_text())
    assert values["adapter"]["rules"]["inferencePresets"] == ["vllm"]
    # Slow model loads: the pod may take up to 15 minutes to start; scale-up steps are spaced by minutes, so pods
    # still loading are not answered by yet more pods, and scale-down waits longer still.
    container = one(examples, "Deployment", "vllm")["spec"]["template"]["spec"]["containers"][0]
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    behavior = hpa["spec"]["behavior"]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert min(p["periodSeconds"] for p in behavior["scaleUp"]["policies"]) >= 180
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 600


def test_vllm_pods_are_scraped_per_pod(examples):
    deployment = one(examples, "Deployment", "vllm")
    service = one(examples, "Service", "vllm")
    monitor = one(examples, "ServiceMonitor", "vllm")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]] and endpoint["path"] == "/metrics"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert all(container[p]["httpGet"]["path"] == "/health" for p in ("startupProbe", "readinessProbe"))
