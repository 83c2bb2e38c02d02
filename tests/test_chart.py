"""charts/gpu-autoscaler with the real helm: lint, render over several values sets and Kubernetes 1.29-1.33, validate
against Kubernetes schemas and the published CRDs, and run what the chart renders (the exporter's and the adapter's
command lines, the adapter serving the chart's certificate)."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from adapter.presets.gateway import gateway_preset, gateway_yaml
from adapter.presets.gpu import GPU_PRESETS_YAML
from adapter.presets.inference import INFERENCE_PRESETS, preset_yaml, recording_rules
from adapter.rulesfile.loader import load_rules
from tests.support.k8s_validation import KUBE_VERSIONS, REPO, find, load_documents, one, run, tool, validate_all
from tests.support.processes import terminate
from tests.support.prometheus import free_port

pytestmark = pytest.mark.tools

CHART = REPO / "charts" / "gpu-autoscaler"
CI = CHART / "ci"
NAMESPACE = "gpu-system"
RELEASE = "gpu"
VALUES_SETS = {
    "default": None,
    "all-off": CI / "all-off-values.yaml",
    "all-on": CI / "all-on-values.yaml",
    "cert-manager": CI / "cert-manager-values.yaml",
    "cert-manager-issuer": CI / "cert-manager-issuer-values.yaml",
    "insecure": CI / "insecure-values.yaml",
    "existing-secret": CI / "existing-secret-values.yaml",
    "external-metrics": REPO / "hpa-examples" / "chart-values-external-metrics.yaml",
    "vllm": REPO / "hpa-examples" / "chart-values-vllm.yaml",
    "headroom": CI / "headroom-values.yaml",
}


# What a cluster with kube-prometheus-stack serves beyond Kubernetes itself, as Helm's capabilities list it. The
# chart renders its ServiceMonitors and PrometheusRule only where these are served (tests/test_chart_first_install.py
# renders a bare cluster); the tests here check those objects, so they render with them.
KUBE_PROMETHEUS_STACK = ("monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor",
                         "monitoring.coreos.com/v1/PodMonitor", "monitoring.coreos.com/v1/PrometheusRule",
                         "monitoring.coreos.com/v1/Prometheus", "monitoring.coreos.com/v1/Alertmanager")


def template(values: Path | None = None, *sets: str, kube_version: str = "1.33.0", check: bool = True,
             api_versions: tuple[str, ...] = KUBE_PROMETHEUS_STACK) -> subprocess.CompletedProcess[str]:
    args = [tool("helm"), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version]
    for api in api_versions:
        args += ["--api-versions", api]
    if values:
        args += ["-f", str(values)]
    for item in sets:
        args += ["--set", item]
    proc = _helm_template(tuple(args), hashlib.sha256(values.read_bytes()).hexdigest() if values else "")
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@functools.lru_cache(maxsize=512)
def _helm_template(args: tuple[str, ...], values_digest: str) -> subprocess.CompletedProcess[str]:
    """One rendering per arguments and values file content (a render costs helm about half a second of CPU, and
    many tests render the same values); the chart does not change while the suite runs."""
    del values_digest  # part of the cache key only
    return run(list(args), check=False)


def render(values: Path | None = None, *sets: str, kube_version: str = "1.33.0",
           api_versions: tuple[str, ...] = KUBE_PROMETHEUS_STACK) -> list[dict[str, Any]]:
    return load_documents(template(values, *sets, kube_version=kube_version, api_versions=api_versions).stdout)


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return render()


@pytest.fixture(scope="module")
def all_on() -> list[dict[str, Any]]:
    return render(VALUES_SETS["all-on"])


@pytest.mark.parametrize("name", VALUES_SETS)
def test_helm_lint(name):
    args = [tool("helm"), "lint", str(CHART), "--strict", "--namespace", NAMESPACE]
    if VALUES_SETS[name]:
        args += ["-f", str(VALUES_SETS[name])]
    proc = run(args, check=False)
    assert proc.returncode == 0 and "0 chart(s) failed" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", VALUES_SETS)
def test_rendered_chart_is_valid(name, kube_version):
    docs = render(VALUES_SETS[name], kube_version=f"{kube_version}.0")
    assert validate_all(docs, [kube_version]) == []


def test_chart_refuses_kubernetes_older_than_1_29():
    proc = template(kube_version="1.28.0", check=False)
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr


def test_everything_off_renders_nothing():
    assert render(VALUES_SETS["all-off"]) == []


def test_everything_on_renders_every_resource(all_on):
    kinds = {d["kind"] for d in all_on}
    assert kinds == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
                     "Secret", "Deployment", "Service", "PodDisruptionBudget", "APIService", "ServiceMonitor",
                     "DaemonSet", "PrometheusRule", "NodePool", "EC2NodeClass", "Pod", "ResourceQuota",
                     "NetworkPolicy"}
    assert {d["metadata"]["name"] for d in find(all_on, "APIService")} == {
        "v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io"}
    assert all(d["metadata"]["labels"]["team"] == "ml-platform" for d in all_on)


@pytest.mark.parametrize("switch, kind", [
    ("adapter.podDisruptionBudget.enabled", "PodDisruptionBudget"),
    ("prometheusRule.enabled", "PrometheusRule"),
    ("adapter.apiService.customMetrics.enabled", "APIService"),
    ("exporter.enabled", "DaemonSet"),
    ("adapter.enabled", "Deployment"),
])
def test_each_resource_can_be_turned_off(default, switch, kind):
    assert find(default, kind)
    assert not find(render(None, f"{switch}=false"), kind)


def test_service_monitors_and_dashboard_can_be_turned_off():
    docs = render(None, "adapter.serviceMonitor.enabled=false", "exporter.serviceMonitor.enabled=false",
                  "grafanaDashboard.enabled=false", "adapter.rbac.create=false",
                  "adapter.serviceAccount.create=false", "exporter.serviceAccount.create=false")
    assert not find(docs, "ServiceMonitor")
    assert not [c for c in find(docs, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
    assert {d["kind"] for d in docs} >= {"Deployment", "DaemonSet"}
    assert not find(docs, "ServiceAccount") and not find(docs, "ClusterRole") and not find(docs, "RoleBinding")


@pytest.mark.parametrize("sets, message", [
    (["adapter.replica=3"], "replica"),
    (["adapter.tls.mode=selfsigned"], "mode"),
    (["adapter.tls.mode=existingSecret", "adapter.tls.existingSecret=x"], "caBundle"),
    (["exporter.kubernetes.gpuIdType=uuid"], "gpuIdType"),
    (["exporter.configMapData=exporter-metrics"], "configMapData"),
    (["adapter.prometheus.url=prometheus:9090"], "url"),
    (["karpenter.ec2NodeClass.enabled=true"], "role"),
    (["adapter.metricsRelistInterval=60"], "metricsRelistInterval"),
])
def test_values_schema_rejects_bad_values(sets, message):
    proc = template(None, *sets, check=False)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr and message in proc.stderr


# ----------------------------------------------------------------------------------------------- adapter

def _adapter_host(docs: list[dict[str, Any]]) -> str:
    service = one(docs, "Service", f"{RELEASE}-gpu-autoscaler-adapter")
    return f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"


def test_generated_certificate_is_trusted_by_the_apiservices(default):
    secret = one(default, "Secret")
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert _adapter_host(default) in sans
    apiservices = find(default, "APIService")
    assert {a["metadata"]["name"] for a in apiservices} == {"v1beta2.custom.metrics.k8s.io",
                                                            "v1beta1.custom.metrics.k8s.io"}
    for api in apiservices:
        assert base64.b64decode(api["spec"]["caBundle"]) == ca_pem
        assert api["spec"]["service"] == {"name": f"{RELEASE}-gpu-autoscaler-adapter", "namespace": NAMESPACE,
                                          "port": 443}
    pod = one(default, "Deployment")["spec"]["template"]
    assert pod["metadata"]["annotations"]["checksum/serving-cert"] == \
        hashlib.sha256(base64.b64decode(secret["data"]["tls.crt"])).hexdigest()
    assert next(v for v in pod["spec"]["volumes"] if v["name"] == "serving-cert")["secret"]["secretName"] == \
        secret["metadata"]["name"]


def test_cert_manager_mode_injects_the_ca_and_issues_the_served_secret():
    for values in (VALUES_SETS["cert-manager"], VALUES_SETS["cert-manager-issuer"]):
        docs = render(values)
        assert not find(docs, "Secret")
        certificate = one(docs, "Certificate", f"{RELEASE}-gpu-autoscaler-adapter")
        assert _adapter_host(docs) in certificate["spec"]["dnsNames"]
        volume = next(v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
                      if v["name"] == "serving-cert")
        assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
        for api in find(docs, "APIService"):
            assert api["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
                f"{NAMESPACE}/{certificate['metadata']['name']}"
            assert "caBundle" not in api["spec"]
    own_issuer = render(VALUES_SETS["cert-manager-issuer"])
    assert one(own_issuer, "Certificate")["spec"]["issuerRef"] == {"name": "cluster-ca", "kind": "ClusterIssuer",
                                                                   "group": "cert-manager.io"}
    assert not find(own_issuer, "Issuer")


def test_insecure_and_existing_secret_modes():
    insecure = render(VALUES_SETS["insecure"])
    assert all(a["spec"]["insecureSkipTLSVerify"] is True for a in find(insecure, "APIService"))
    container = one(insecure, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--cert-dir=/var/run/serving-cert" in container["args"]
    existing = render(VALUES_SETS["existing-secret"])
    values = yaml.safe_load(VALUES_SETS["existing-secret"].read_text())["adapter"]["tls"]
    assert all(a["spec"]["caBundle"] == values["caBundle"] for a in find(existing, "APIService"))
    volume = next(v for v in one(existing, "Deployment")["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "serving-cert")
    assert volume["secret"]["secretName"] == "my-adapter-tls" and not find(existing, "Secret")


def test_adapter_rbac_and_pod_settings(default):
    deployment = one(default, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert one(default, "RoleBinding")["metadata"]["namespace"] == "kube-system"
    assert one(default, "RoleBinding")["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    delegator = [b for b in find(default, "ClusterRoleBinding") if b["roleRef"]["name"] == "system:auth-delegator"]
    assert delegator[0]["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                         "namespace": NAMESPACE}]
    hpa = [b for b in find(default, "ClusterRoleBinding")
           if b["subjects"][0]["name"] == "horizontal-pod-autoscaler"]
    role = one(default, "ClusterRole", hpa[0]["roleRef"]["name"])
    assert [r["apiGroups"] for r in role["rules"]] == [["custom.metrics.k8s.io"]]
    monitor = one(default, "ServiceMonitor", f"{RELEASE}-gpu-autoscaler-adapter")["spec"]["endpoints"][0]
    assert monitor["scheme"] == "https" and monitor["tlsConfig"]["serverName"] == _adapter_host(default)


def test_the_adapter_cli_accepts_the_rendered_arguments(all_on):
    container = one(all_on, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    proc = subprocess.run([sys.executable, "-m", "adapter", *container["args"], "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_adapter_serves_the_chart_certificate_with_the_chart_arguments(default, tmp_path):
    """Run the adapter with the Deployment's arguments and mounts (paths mapped into a temp dir), and connect the
    way the aggregator does: trusting only the APIService's caBundle, checking the name <service>.<ns>.svc."""
    secret = one(default, "Secret")
    rules = one(default, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")
    pod = one(default, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (tmp_path / "cert").mkdir()
    (tmp_path / "rules").mkdir()
    for key in ("tls.crt", "tls.key"):
        (tmp_path / "cert" / key).write_bytes(base64.b64decode(secret["data"][key]))
    (tmp_path / "rules" / "rules.yaml").write_text(rules["data"]["rules.yaml"])
    port = free_port()
    args = []
    for arg in container["args"]:
        arg = arg.replace(mounts["serving-cert"], str(tmp_path / "cert")).replace(mounts["rules"],
                                                                                  str(tmp_path / "rules"))
        if arg.startswith("--secure-port="):
            arg = f"--secure-port={port}"
        if arg.startswith("--prometheus-url="):
            arg = f"--prometheus-url=http://127.0.0.1:{free_port()}"  # nothing listens: discovery just fails
        if arg.startswith("--shutdown-delay-duration="):
            arg = "--shutdown-delay-duration=0s"  # no Service here to leave: stop at once
        args.append(arg)
    # --disable-auth: no kube-apiserver here to delegate authentication to (never in the manifests).
    proc = subprocess.Popen([sys.executable, "-m", "adapter", *args, "--bind-address=127.0.0.1", "--disable-auth"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    ca = base64.b64decode(find(default, "APIService")[0]["spec"]["caBundle"]).decode()
    context = ssl.create_default_context(cadata=ca)
    try:
        status = _https_get(context, port, _adapter_host(default), container["livenessProbe"]["httpGet"]["path"],
                            proc)
        assert status == 200
        with pytest.raises(ssl.SSLCertVerificationError):
            _https_get(context, port, "some-other-service.default.svc", "/livez", proc)
    finally:
        log = terminate(proc)
    assert "Traceback" not in log, log


def _https_get(context: ssl.SSLContext, port: int, server_name: str, path: str, proc: subprocess.Popen[str],
               timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"adapter exited {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}")
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        with context.wrap_socket(raw, server_hostname=server_name) as tls:
            conn = http.client.HTTPConnection("127.0.0.1", port)
            conn.sock = tls
            conn.request("GET", path)
            return conn.getresponse().status


# ------------------------------------------------------------------------------------------ rules / presets

def test_chart_presets_match_the_adapter_presets():
    chart_copy = (CHART / "files" / "gpu-presets.yaml").read_text()
    if not chart_copy.endswith(GPU_PRESETS_YAML):
        pytest.fail("charts/gpu-autoscaler/files/gpu-presets.yaml differs from the adapter's presets "
                    "(adapter/presets/gpu.py): run scripts/gen-chart-presets.py", pytrace=False)
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-chart-presets.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_rules_configmap_is_custom_then_deployment_then_presets(all_on, tmp_path):
    data = yaml.safe_load(one(all_on, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")["data"]["rules.yaml"])
    values = yaml.safe_load(VALUES_SETS["all-on"].read_text())["adapter"]["rules"]
    presets = yaml.safe_load(GPU_PRESETS_YAML)
    deployment = yaml.safe_load((CHART / "files" / "deployment-rules.yaml").read_text())
    inference = [rule for name in values["inferencePresets"]
                 for rule in yaml.safe_load(preset_yaml(INFERENCE_PRESETS[name]))["rules"]]
    assert data["rules"] == values["custom"] + deployment["rules"] + presets["rules"] + inference
    assert data["externalRules"] == values["external"] + presets.get("externalRules", [])
    # The adapter's own loader accepts the rendered file.
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_rules(str(path))
    assert len(config.rules) == len(data["rules"]) and len(config.external_rules) == len(data["externalRules"])


def test_inference_presets_bring_their_rules_and_recording_rules(tmp_path):
    docs = render(None, "adapter.rules.inferencePresets={tgi,vllm}")
    data = yaml.safe_load(one(docs, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")["data"]["rules.yaml"])
    chosen = [rule for name in ("tgi", "vllm")
              for rule in yaml.safe_load(preset_yaml(INFERENCE_PRESETS[name]))["rules"]]
    assert data["rules"][-len(chosen):] == chosen
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    [inference] = [g for g in groups if g["name"] == "gpu-autoscaler.inference"]
    assert inference["rules"] == recording_rules(["tgi", "vllm"])
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    # 35: the default rules (tests/test_prometheus_rules.py); the presets' come on top.
    assert f"SUCCESS: {35 + len(inference['rules'])} rules found" in run([tool("promtool"), "check", "rules",
                                                                         str(path)]).stdout
    # Without presets, or without recording rules, there is no such group.
    for sets in ((), ("adapter.rules.inferencePresets={vllm}", "prometheusRule.recordingRules=false")):
        rule = find(render(None, *sets), "PrometheusRule")
        assert not [g for r in rule for g in r["spec"]["groups"] if g["name"] == "gpu-autoscaler.inference"]
    # values.schema.json lists exactly the adapter's presets, so a typo fails at install time.
    schema = json.loads((CHART / "values.schema.json").read_text())
    listed = schema["properties"]["adapter"]["properties"]["rules"]["properties"]["inferencePresets"]["items"]["enum"]
    assert sorted(listed) == sorted(INFERENCE_PRESETS)
    bad = template(None, "adapter.rules.inferencePresets={vlm}", check=False)
    assert bad.returncode != 0 and "inferencePresets" in bad.stderr


def test_gateway_presets_are_appended_when_asked_and_the_adapter_loads_them(tmp_path):
    gateway = yaml.safe_load(gateway_yaml())
    default = yaml.safe_load(one(render(None), "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")["data"]
                             ["rules.yaml"])
    docs = render(None, "adapter.rules.gatewayPresets=true", "adapter.apiService.externalMetrics.enabled=true")
    data = yaml.safe_load(one(docs, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")["data"]["rules.yaml"])
    assert data["rules"] == default["rules"] + gateway["rules"]
    assert data["externalRules"] == default.get("externalRules", []) + gateway["externalRules"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_rules(str(path))
    assert len(config.external_rules) == len(gateway_preset().external_rules)
    bad = template(None, "adapter.rules.gatewayPresets=yes", check=False)
    assert bad.returncode != 0 and "gatewayPresets" in bad.stderr


def test_default_rules_are_the_presets_and_can_be_left_out(default):
    data = yaml.safe_load(one(default, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")["data"]["rules.yaml"])
    assert data["rules"][1:] == yaml.safe_load(GPU_PRESETS_YAML)["rules"]
    bare = render(None, "adapter.rules.presets=false", "adapter.rules.deploymentMetrics=false")
    rules = one(bare, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")
    assert yaml.safe_load(rules["data"]["rules.yaml"]) == {"rules": []}
    external = render(None, "adapter.rules.existingConfigMap=my-rules")
    assert not [c for c in find(external, "ConfigMap") if c["metadata"]["name"].endswith("-rules")]
    volume = next(v for v in one(external, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "rules")
    assert volume["configMap"]["name"] == "my-rules"



def test_resource_metrics_option_registers_metrics_k8s_io_with_working_rules(default, tmp_path):
    """Off by default (metrics-server may own the group); on: the APIService, the HPA controller's read access,
    and kube-prometheus-stack resourceRules the adapter's loader accepts."""
    assert "v1beta1.metrics.k8s.io" not in {d["metadata"]["name"] for d in find(default, "APIService")}
    rules = one(default, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")["data"]["rules.yaml"]
    assert "resourceRules" not in yaml.safe_load(rules)
    docs = render(None, "adapter.apiService.resourceMetrics.enabled=true")
    assert validate_all(docs) == []
    api = one(docs, "APIService", "v1beta1.metrics.k8s.io")
    assert api["spec"]["group"] == "metrics.k8s.io" and api["spec"]["version"] == "v1beta1"
    assert api["spec"]["service"]["name"] == f"{RELEASE}-gpu-autoscaler-adapter"
    reader = one(docs, "ClusterRole", f"{RELEASE}-gpu-autoscaler-adapter-metrics-reader")
    assert {"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]} \
        in reader["rules"]
    path = tmp_path / "rules.yaml"
    path.write_text(one(docs, "ConfigMap", f"{RELEASE}-gpu-autoscaler-adapter-rules")["data"]["rules.yaml"])
    config = load_rules(str(path)).resource_rules
    assert config is not None and config.window_s == 300
    assert "container_cpu_usage_seconds_total" in config.cpu.render_pods("ml", ["infer-0"])
    assert config.memory.render_nodes(["node-a"]).strip() == (
        'sum by (instance) (node_memory_MemTotal_bytes{instance="node-a"} - '
        'node_memory_MemAvailable_bytes{instance="node-a"})')
    bad = template(None, "adapter.apiService.resourceMetrics.enabled=true", "adapter.rules.resource.window=soon",
                   check=False)
    assert bad.returncode != 0 and "window" in bad.stderr

# ---------------------------------------------------------------------------------------------- exporter

def test_exporter_daemonset_runs_on_gpu_nodes_without_privileges(default):
    daemonset = one(default, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {t["matchExpressions"][0]["key"] for t in terms}
    assert {"nvidia.com/gpu.present", "k8s.amazonaws.com/accelerator", "karpenter.k8s.aws/instance-gpu-count"} <= keys
    security = container["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert "SYS_ADMIN" not in str(daemonset)
    assert pod["automountServiceAccountToken"] is False and "hostPID" not in pod
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # The pod-resources *directory* from the host, read-only, and the socket inside it.
    volume = next(v for v in pod["volumes"] if v["name"] == "pod-resources")
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "pod-resources")
    assert mount == {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
    assert "--pod-resources-kubelet-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in container["args"]
    assert "--kubernetes" in container["args"] and "runtimeClassName" not in pod
    assert not [a for a in container["args"] if a.startswith("--proc-root")]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"


def test_exporter_options_runtime_class_and_shared_gpu_attribution(all_on):
    pod = one(all_on, "DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["runtimeClassName"] == "nvidia"
    # NVML reports PIDs in the caller's PID namespace: attribution needs the host's, and then /proc is the host's.
    assert pod["hostPID"] is True
    assert not [a for a in container["args"] if a.startswith("--proc-root")]
    assert "--pod-identity-source=kubelet-logs" in container["args"]
    for name, path in (("kubelet-pod-logs", "/var/log/pods"), ("kubelet-container-logs", "/var/log/containers")):
        assert next(v for v in pod["volumes"] if v["name"] == name)["hostPath"]["path"] == path
        assert next(m for m in container["volumeMounts"] if m["name"] == name) == \
            {"name": name, "mountPath": path, "readOnly": True}
    assert not [m for m in container["volumeMounts"] if not m.get("readOnly")]
    assert "--collectors=/etc/gpu-exporter/counters.csv" in container["args"]
    assert "--nvidia-resource-names=nvidia.com/gpu.shared" in container["args"]


def test_exporter_api_features_get_their_rbac_and_a_token(default, all_on):
    exporter = f"{RELEASE}-gpu-autoscaler-exporter"
    # off by default: no role, no token (the kubelet's socket needs neither)
    assert not [d for d in default if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"] == exporter]
    assert one(default, "ServiceAccount", exporter)["automountServiceAccountToken"] is False

    pod = one(all_on, "DaemonSet")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    rendered = [a for a in args if a.startswith(("--kubernetes-enable", "--kubernetes-pod-label", "--configmap"))]
    assert rendered == ["--kubernetes-enable-pod-labels",
                        r"--kubernetes-pod-label-allowlist-regex=^app\.kubernetes\.io/,^team$",
                        "--kubernetes-enable-pod-uid", "--configmap-data=gpu-operator:exporter-metrics"]
    assert pod["automountServiceAccountToken"] is True
    assert one(all_on, "ServiceAccount", exporter)["automountServiceAccountToken"] is True
    subject = {"kind": "ServiceAccount", "name": exporter, "namespace": NAMESPACE}
    pods = one(all_on, "ClusterRole", f"{exporter}-pods")
    assert pods["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert one(all_on, "ClusterRoleBinding", f"{exporter}-pods")["subjects"] == [subject]
    role = one(all_on, "Role", f"{exporter}-counters")
    assert role["metadata"]["namespace"] == "gpu-operator"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["exporter-metrics"],
                              "verbs": ["get"]}]
    binding = one(all_on, "RoleBinding", f"{exporter}-counters")
    assert binding["metadata"]["namespace"] == "gpu-operator" and binding["subjects"] == [subject]

    # the flags without the roles (rbac.create=false); pod labels need -k, so without it nothing watches pods
    docs = render(VALUES_SETS["all-on"], "exporter.rbac.create=false")
    assert not [d for d in docs if d["metadata"]["name"].startswith(f"{exporter}-")
                and d["kind"] in ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")]
    docs = render(None, "exporter.kubernetes.enabled=false", "exporter.kubernetes.enablePodLabels=true")
    assert not find(docs, "ClusterRole", f"{exporter}-pods")
    assert "--kubernetes-enable-pod-labels" not in one(docs, "DaemonSet")["spec"]["template"]["spec"][
        "containers"][0]["args"]


def test_exporter_service_and_service_monitor(default):
    service = one(default, "Service", "dcgm-exporter")
    pod = one(default, "DaemonSet")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] in [p["name"] for p in pod["spec"]["containers"][0]["ports"]]
    monitor = one(default, "ServiceMonitor", f"{RELEASE}-gpu-autoscaler-exporter")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["honorLabels"] is True and endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert {"action": "labeldrop", "regex": "(pod|namespace|container)"} in endpoint["relabelings"]


@pytest.mark.parametrize("name", ["default", "all-on"])
def test_the_exporter_runs_with_the_rendered_command_line(name, tmp_path):
    """The DaemonSet's arguments and mounts (host paths mapped to local ones), with simulated GPUs."""
    docs = render(VALUES_SETS[name])
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["gpu-exporter"]
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    counters = find(docs, "ConfigMap")
    local = {"pod-resources": str(tmp_path / "pod-resources"), "host-proc": "/proc",
             "counters": str(tmp_path / "counters"), "kubelet-pod-logs": str(tmp_path / "log" / "pods"),
             "kubelet-container-logs": str(tmp_path / "log" / "containers")}
    mounts_root = {"/var/log": str(tmp_path / "log")}
    for config_map in counters:
        if config_map["metadata"]["name"].endswith("-counters"):
            Path(local["counters"]).mkdir()
            for key, text in config_map["data"].items():
                (Path(local["counters"]) / key).write_text(text)
    args = []
    for arg in container["args"]:
        for volume, path in mounts.items():
            arg = arg.replace(path, local[volume])
        for path, replacement in mounts_root.items():
            arg = arg.replace(f"={path}", f"={replacement}")
        args.append(arg)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", *args, "--backend", "fake",
                             "--address", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={"NODE_NAME": "gpu-node-1", "PATH": "/usr/bin:/bin"})
    try:
        body = _http_get_when_up(port, "/metrics", proc)
    finally:
        terminate(proc)
    assert 'DCGM_FI_DEV_GPU_UTIL{' in body and 'Hostname="gpu-node-1"' in body
    if name == "all-on":  # the counters ConfigMap was used: only its three fields are exported
        assert "DCGM_FI_DEV_POWER_USAGE" not in body


def _http_get_when_up(port: int, path: str, proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"exporter exited {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", path)
                body = conn.getresponse().read().decode()
                if "DCGM_FI_DEV_GPU_UTIL{" in body or time.monotonic() > deadline:
                    return body
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("exporter did not become healthy")
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------- karpenter

def test_karpenter_node_pool_from_the_chart(all_on):
    pool = one(all_on, "NodePool", "gpu")
    node_class = one(all_on, "EC2NodeClass", "gpu")
    spec = pool["spec"]["template"]["spec"]
    assert spec["nodeClassRef"]["name"] == node_class["metadata"]["name"]
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in spec["taints"]
    requirements = {r["key"]: r["values"] for r in spec["requirements"]}
    assert requirements["karpenter.k8s.aws/instance-family"] == ["g5", "g6", "g6e", "p4d", "p5"]
    assert requirements["karpenter.sh/capacity-type"] == ["on-demand", "spot"]
    assert pool["spec"]["limits"]["nvidia.com/gpu"] == "16"
    assert node_class["spec"]["amiSelectorTerms"] == [{"alias": "bottlerocket@latest"}]
    # The exporter's default affinity lands on the nodes this pool makes (Karpenter labels them).
    exporter = one(all_on, "DaemonSet")["spec"]["template"]["spec"]
    assert any(t["matchExpressions"][0]["key"].startswith("karpenter.k8s.aws/")
               for t in exporter["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                   "nodeSelectorTerms"])
