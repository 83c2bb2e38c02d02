"""The chart's side of hostile clients (issue 47, item 7), with the real helm: the listener limits as values that
reach their flags (defaults equal to the programs' own, which follow kube-apiserver's k8s.io/apiserver
``pkg/server/secure_serving.go`` and ``pkg/server/config.go``, and dcgm-exporter's ``--web-*-timeout``), the
NetworkPolicies that admit only the API server, Prometheus and KEDA's operator, the one-line render error without
the API server's source, the values schema, and what NOTES.txt says with the policy off and on."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.cli.flags import LIMITS
from adapter.cli.values import listener_limits
from clikit.flags import Options
from exporter.cli.flags import BY_SPELLING
from exporter.cli.flags import parse as parse_exporter_flags
from tests.support.fake_kube import FakeKube
from tests.support.k8s_validation import find, one, validate_all
from tests.test_chart import RELEASE, render, template
from tests.test_chart_first_install import CLUSTER_TYPES, helm_install

pytestmark = pytest.mark.tools

ADAPTER = f"{RELEASE}-gpu-autoscaler-adapter"
EXPORTER = f"{RELEASE}-gpu-autoscaler-exporter"
BARE: tuple[str, ...] = ()
CIDRS = "networkPolicy.apiServer.cidrs={10.0.0.0/19,fd00:10::/64}"
ON = ("networkPolicy.enabled=true", CIDRS)

# values key -> the adapter's flag (adapter/cli/flags.py LIMITS) and the exporter's (exporter/cli/flags.py).
ADAPTER_FLAGS = {"maxRequestsInflight": "--max-requests-inflight", "requestTimeout": "--request-timeout",
                 "readHeaderTimeout": "--read-header-timeout", "idleTimeout": "--idle-timeout",
                 "maxHeaderBytes": "--max-header-bytes", "maxWaitingConnections": "--max-waiting-connections"}
EXPORTER_FLAGS = {"readTimeout": "web-read-timeout", "writeTimeout": "web-write-timeout",
                  "maxWaitingConnections": "web-max-waiting-connections",
                  "maxRequestsInflight": "web-max-requests-inflight"}

# The sources' defaults: kube-prometheus-stack's Prometheus (the Prometheus Operator's pod labels,
# pkg/prometheus/server/operator.go makeSelectorLabels: app.kubernetes.io/name prometheus; prometheus-agent for a
# PrometheusAgent) in namespace monitoring, and KEDA's operator (kedacore/charts keda/templates/manager/
# deployment.yaml: app.kubernetes.io/name keda-operator) in namespace keda.
PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
              "podSelector": {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "In",
                                                    "values": ["prometheus", "prometheus-agent"]}]}}
KEDA = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "keda-operator"}}}
API_SERVER = [{"ipBlock": {"cidr": "10.0.0.0/19"}}, {"ipBlock": {"cidr": "fd00:10::/64"}}]


def container(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return one(docs, kind)["spec"]["template"]["spec"]["containers"][0]


def flag_values(args: list[str], flags: set[str]) -> dict[str, str]:
    """The rendered ``--flag=value`` arguments among ``flags``, by flag."""
    pairs = [a.split("=", 1) for a in args if a.startswith("--") and "=" in a]
    return {name: value for name, value in pairs if name in flags}


def rule(port: int, peers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"from": peers, "ports": [{"port": port, "protocol": "TCP"}]}


def policy(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec = one(docs, "NetworkPolicy", name)["spec"]
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec
    for each in spec["ingress"]:
        assert each["from"], "a rule without peers admits everyone"
    return spec


# ----------------------------------------------------------------------------------------------- the limits

def test_defaults_pass_the_programs_own_defaults_and_no_network_policy():
    docs = render()
    assert not find(docs, "NetworkPolicy")
    assert not find(render(api_versions=BARE), "NetworkPolicy")
    adapter = flag_values(container(docs, "Deployment")["args"], set(ADAPTER_FLAGS.values()))
    defaults = {f.name: str(f.default) for f in LIMITS}
    assert adapter == {flag: defaults[flag] for flag in ADAPTER_FLAGS.values()}
    # ... which are kube-apiserver's (secure_serving.go; config.go), 1 MiB being MaxHeaderBytes' 1 << 20.
    assert {k: adapter[f] for k, f in ADAPTER_FLAGS.items()} == {
        "maxRequestsInflight": "20", "requestTimeout": "60s", "readHeaderTimeout": "32s", "idleTimeout": "90s",
        "maxHeaderBytes": str(1 << 20), "maxWaitingConnections": "1000"}
    exporter = flag_values(container(docs, "DaemonSet")["args"], {f"--{f}" for f in EXPORTER_FLAGS.values()})
    assert exporter == {f"--{f}": str(BY_SPELLING[f].default) for f in EXPORTER_FLAGS.values()}
    # dcgm-exporter 4.8.3's --web-read-timeout and --web-write-timeout defaults.
    assert (exporter["--web-read-timeout"], exporter["--web-write-timeout"]) == ("10s", "30s")


ADAPTER_SETS = {"maxRequestsInflight": ("0", 0), "requestTimeout": ("45s", 45.0),
                "readHeaderTimeout": ("10s", 10.0), "idleTimeout": ("2m", 120.0),
                "maxHeaderBytes": ("65536", 65536), "maxWaitingConnections": ("5000", 5000)}


@pytest.mark.parametrize("key", ADAPTER_FLAGS)
def test_each_adapter_limit_reaches_its_flag_and_the_adapter_takes_it(key):
    value, parsed = ADAPTER_SETS[key]
    args = container(render(None, f"adapter.limits.{key}={value}"), "Deployment")["args"]
    flag = ADAPTER_FLAGS[key]
    assert flag_values(args, {flag}) == {flag: value}
    # The adapter reads the rendered limits as it would at start (adapter/cli/values.py listener_limits).
    given = flag_values(args, set(ADAPTER_FLAGS.values()))
    types = {f.name: f.type for f in LIMITS}
    options = Options(**{f.lstrip("-").replace("-", "_"): types[f](v) for f, v in given.items()})
    limits, requests = listener_limits(options)
    read = {"maxRequestsInflight": requests.max_in_flight, "requestTimeout": requests.timeout_s,
            "readHeaderTimeout": limits.read_header_timeout_s, "idleTimeout": limits.idle_timeout_s,
            "maxHeaderBytes": limits.max_header_bytes, "maxWaitingConnections": limits.max_waiting_connections}
    assert read[key] == parsed


EXPORTER_SETS = {"readTimeout": ("5s", "5s"), "writeTimeout": ("1m", "1m"), "maxWaitingConnections": ("64", 64),
                 "maxRequestsInflight": ("4", 4)}


@pytest.mark.parametrize("key", EXPORTER_FLAGS)
def test_each_exporter_limit_reaches_its_flag_and_the_exporter_takes_it(key):
    value, parsed = EXPORTER_SETS[key]
    args = container(render(None, f"exporter.web.{key}={value}"), "DaemonSet")["args"]
    flag = EXPORTER_FLAGS[key]
    assert flag_values(args, {f"--{flag}"}) == {f"--{flag}": value}
    settings = parse_exporter_flags(args, {}).settings
    assert getattr(settings, BY_SPELLING[flag].field) == parsed


# ----------------------------------------------------------------------------------------- the NetworkPolicies

def test_the_policies_admit_the_api_server_and_prometheus_on_the_serving_ports():
    docs = render(None, *ON)  # with kube-prometheus-stack: the chart's ServiceMonitor scrapes the adapter
    assert validate_all(find(docs, "NetworkPolicy")) == []
    adapter = policy(docs, ADAPTER)
    pod = one(docs, "Deployment")["spec"]["template"]
    assert adapter["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    https = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "https")
    assert adapter["ingress"] == [rule(https, API_SERVER), rule(https, [PROMETHEUS])]
    exporter = policy(docs, EXPORTER)
    pod = one(docs, "DaemonSet")["spec"]["template"]
    assert exporter["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert not pod["spec"].get("hostNetwork")  # a NetworkPolicy does not apply to hostNetwork pods
    metrics = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "metrics")
    assert exporter["ingress"] == [rule(metrics, [PROMETHEUS])]
    # Each policy selects only its own component's pods.
    assert adapter["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "adapter"
    assert exporter["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "exporter"


def test_prometheus_reaches_the_adapter_only_where_the_chart_has_it_scraped():
    bare = render(None, *ON, api_versions=BARE)  # no ServiceMonitor, no annotations: nothing scrapes the adapter
    assert policy(bare, ADAPTER)["ingress"] == [rule(6443, API_SERVER)]
    assert policy(bare, EXPORTER)["ingress"] == [rule(9400, [PROMETHEUS])]
    annotated = render(None, *ON, "adapter.scrapeAnnotations.service=true", api_versions=BARE)
    assert policy(annotated, ADAPTER)["ingress"] == [rule(6443, API_SERVER), rule(6443, [PROMETHEUS])]
    off = render(None, *ON, "adapter.serviceMonitor.enabled=false")
    assert policy(off, ADAPTER)["ingress"] == [rule(6443, API_SERVER)]


def test_keda_operator_reaches_the_scaler_port_when_it_is_on():
    docs = render(None, *ON, "adapter.kedaScaler.enabled=true", "adapter.containerPort=8443",
                  "adapter.kedaScaler.containerPort=9444", "exporter.service.port=9500")
    assert validate_all(find(docs, "NetworkPolicy")) == []
    ports = {p["name"]: p["containerPort"] for p in container(docs, "Deployment")["ports"]}
    assert ports == {"https": 8443, "keda-grpc": 9444}
    assert policy(docs, ADAPTER)["ingress"] == [rule(8443, API_SERVER), rule(8443, [PROMETHEUS]),
                                                rule(9444, [KEDA])]
    assert policy(docs, EXPORTER)["ingress"] == [rule(9500, [PROMETHEUS])]


def test_selectors_and_cidrs_of_each_source():
    docs = render(None, "networkPolicy.enabled=true", "adapter.kedaScaler.enabled=true",
                  "networkPolicy.apiServer.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system",
                  "networkPolicy.apiServer.podSelector.matchLabels.k8s-app=konnectivity-agent",
                  "networkPolicy.prometheus.cidrs={192.168.0.0/16}",
                  "networkPolicy.keda.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=autoscaling")
    assert validate_all(find(docs, "NetworkPolicy")) == []
    api_server = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                  "podSelector": {"matchLabels": {"k8s-app": "konnectivity-agent"}}}
    keda = {**KEDA, "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "autoscaling"}}}
    prometheus = [{"ipBlock": {"cidr": "192.168.0.0/16"}}, PROMETHEUS]
    assert policy(docs, ADAPTER)["ingress"] == [rule(6443, [api_server]), rule(6443, prometheus),
                                                rule(9443, [keda])]


def test_an_empty_selector_is_left_out_and_a_source_without_peers_admits_nobody():
    """``{}`` (or empty matchLabels) would select every namespace or pod; a source left with nothing is no rule,
    never a rule without peers (which would admit everyone)."""
    docs = render(None, *ON, "adapter.kedaScaler.enabled=true",
                  "networkPolicy.prometheus.namespaceSelector=null", "networkPolicy.prometheus.podSelector=null",
                  "networkPolicy.keda.podSelector.matchLabels=null")
    assert policy(docs, ADAPTER)["ingress"] == [
        rule(6443, API_SERVER), rule(9443, [{"namespaceSelector": KEDA["namespaceSelector"]}])]
    assert policy(docs, EXPORTER)["ingress"] == []
    assert validate_all(find(docs, "NetworkPolicy")) == []


def test_without_the_adapter_the_exporter_policy_needs_no_api_server():
    docs = render(None, "networkPolicy.enabled=true", "adapter.enabled=false")
    assert [d["metadata"]["name"] for d in find(docs, "NetworkPolicy")] == [EXPORTER]


@pytest.mark.parametrize("api_server", [
    {},
    {"cidrs": [], "namespaceSelector": {"matchLabels": {}}, "podSelector": {"matchExpressions": []}},  # selects all
])
def test_missing_api_server_source_is_a_one_line_render_error_naming_the_fix(api_server, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"networkPolicy": {"enabled": True, "apiServer": api_server}}))
    proc = template(values, check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("Use --debug")]
    assert len(lines) == 1, proc.stderr
    assert "networkPolicy.enabled needs networkPolicy.apiServer.cidrs" in lines[0]
    assert "--set 'networkPolicy.apiServer.cidrs={10.0.0.0/16}'" in lines[0]
    assert "Traceback" not in proc.stderr and "panic" not in proc.stderr


@pytest.mark.parametrize("sets, message", [
    (["networkPolicy.enabled=yes"], "enabled"),
    (["networkPolicy.apiServer.cidrs={10.0.0.0}"], "cidrs"),
    (["networkPolicy.apiServer.cidrs={api-server}"], "cidrs"),
    (["networkPolicy.apiServer.cidrs=10.0.0.0/16"], "cidrs"),  # a string, not a list
    (["networkPolicy.prometheus.podSelector=app"], "podSelector"),
    (["networkPolicy.keda.namespaceSelector.matchNames={keda}"], "matchNames"),
    (["networkPolicy.prometheus.podSelector.matchExpressions[0].key=app",
      "networkPolicy.prometheus.podSelector.matchExpressions[0].operator=Equals"], "operator"),
    (["networkPolicy.apiserver.cidrs={10.0.0.0/16}"], "apiserver"),
    (["adapter.limits.maxRequestsInflight=-1"], "maxRequestsInflight"),
    (["adapter.limits.maxRequestsInflight=many"], "maxRequestsInflight"),
    (["adapter.limits.requestTimeout=60"], "requestTimeout"),
    (["adapter.limits.readHeaderTimeout=0s"], "readHeaderTimeout"),
    (["adapter.limits.idleTimeout=0m0s"], "idleTimeout"),
    (["adapter.limits.maxHeaderBytes=1024"], "maxHeaderBytes"),
    (["adapter.limits.maxWaitingConnections=0"], "maxWaitingConnections"),
    (["adapter.limits.maxRequestInflight=10"], "maxRequestInflight"),
    (["exporter.web.readTimeout=ten"], "readTimeout"),
    (["exporter.web.maxRequestsInflight=0"], "maxRequestsInflight"),
    (["exporter.web.maxWaitingConnections=lots"], "maxWaitingConnections"),
])
def test_values_schema_rejects_bad_values(sets, message):
    proc = template(None, *sets, check=False)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr and message in proc.stderr, \
        proc.stderr


# ------------------------------------------------------------------------------ NOTES.txt (helm install --dry-run)

@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[str]:
    fake = FakeKube()
    for group, version, resource, kind, namespaced in [
            *CLUSTER_TYPES, ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True)]:
        fake.register(group, version, resource, kind, namespaced)
    fake.start()
    try:
        yield fake.write_kubeconfig(tmp_path / "kubeconfig")
    finally:
        fake.stop()


def notes(kubeconfig: str, *sets: str) -> str:
    proc: subprocess.CompletedProcess[str] = helm_install(kubeconfig, *sets)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.partition("\nNOTES:\n")[2]


def test_notes_say_why_the_policy_matters_while_it_is_off(kubeconfig):
    text = " ".join(notes(kubeconfig, "adapter.limits.maxRequestsInflight=300").split())
    assert ("No NetworkPolicy (networkPolicy.enabled is false): every pod in the cluster can reach the adapter's "
            "port 6443 and the exporter's port 9400, before it is authenticated.") in text
    # What the limits bound (with the values in force), and what only a policy can.
    assert "32s for the TLS handshake and headers, 90s idle, 1024 KiB of headers, 1000 waiting connections" in text
    assert "300 requests at once (429 past them)" in text
    assert "They cannot tell the API server from another pod" in text
    assert "--set networkPolicy.enabled=true --set 'networkPolicy.apiServer.cidrs={" in text
    exporter_only = " ".join(notes(kubeconfig, "adapter.enabled=false").split())
    assert "can reach the exporter's port 9400, before it is authenticated" in exporter_only
    assert "apiServer" not in exporter_only


def test_notes_say_what_the_policy_admits_when_it_is_on(kubeconfig):
    text = notes(kubeconfig, *ON, "adapter.scrapeAnnotations.service=true")
    assert "No NetworkPolicy" not in text
    prometheus = ("pods app.kubernetes.io/name in (prometheus,prometheus-agent) in namespaces "
                  "kubernetes.io/metadata.name=monitoring")
    assert "  - adapter port 6443: the API server from 10.0.0.0/19; fd00:10::/64\n" in text
    assert f"    and Prometheus (for /metrics) from {prometheus}\n" in text
    assert f"  - exporter port 9400: Prometheus from {prometheus}\n" in text
    assert "FailedDiscoveryCheck" in text and "fix networkPolicy.apiServer" in text
