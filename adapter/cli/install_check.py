"""``gpu-adapter check-install``: is the metrics API installed and answering, seen from inside the cluster?

The chart's ``helm test`` pod runs it with the pod's service account. It reads what a user reads by hand (``kubectl
get apiservice``, ``kubectl get --raw <metric path>``) through the Kubernetes API, plus whether anything answers at
the adapter's Prometheus URL, and for each failure names the likely cause: an APIService that is not Available
(with the aggregator's reason), no Prometheus at the URL, no series yet, or RBAC.

Judging (``judge``: pure functions of the answers) is separate from fetching the answers (``observe``).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import typer

from clikit.flags import Options

OK, FAIL, SKIP = "ok", "FAIL", "skip"
DOCS = "docs/install.md"


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: its status code and body (parsed JSON when it is JSON, else text); code 0 is no answer at
    all, with the transport's error in ``error``."""

    code: int
    body: Any = None
    error: str = ""


@dataclass(frozen=True)
class Finding:
    status: str  # OK, FAIL or SKIP
    subject: str
    detail: str
    cause: str = ""  # when not OK: the likely cause, and what to look at


@dataclass(frozen=True)
class Observed:
    """Everything the check read: each APIService, the Prometheus probe, the metric and its API's resource list."""

    apiservices: dict[str, Answer]
    prometheus: Answer | None = None  # None: no URL given
    metric: Answer | None = None  # None: not read (an APIService is not Available)
    discovery: Answer | None = None


def status_message(answer: Answer) -> str:
    """What the server said: a Status' message, else the text (one line), else the transport error."""
    if answer.code == 0:
        return answer.error or "no answer"
    body = answer.body
    if isinstance(body, dict) and body.get("kind") == "Status":
        return str(body.get("message") or body.get("reason") or "")
    text = body if isinstance(body, str) else json.dumps(body) if body is not None else ""
    return " ".join(text.split())[:300]


def _not_answered(subject: str, answer: Answer, what: str) -> Finding | None:
    """The failures every read shares: no answer, the token refused, RBAC."""
    if answer.code == 0:
        return Finding(FAIL, subject, f"no answer from the Kubernetes API: {answer.error}",
                       "the pod cannot reach the API server (its Service kubernetes.default, a NetworkPolicy)")
    if answer.code == 401:
        return Finding(FAIL, subject, f"401 Unauthorized: {status_message(answer)}",
                       "the API server does not accept this pod's service account token")
    if answer.code == 403:
        return Finding(FAIL, subject, f"403 Forbidden: {status_message(answer)}",
                       f"RBAC: the caller may not {what}. Grant get on it (for its `helm test` pod the chart "
                       "creates a ClusterRole <release>-...-test that does)")
    return None


# -- APIServices -------------------------------------------------------------------------------------------------

def _service_of(body: dict[str, Any]) -> tuple[str, str, Any]:
    service = (body.get("spec") or {}).get("service") or {}
    return str(service.get("namespace", "")), str(service.get("name", "")), service.get("port", 443)


def _apiservice_cause(reason: str, message: str, namespace: str, service: str, port: Any) -> str:
    where = f"Service {namespace}/{service}"
    if reason == "ServiceNotFound":
        return f"{where} does not exist: the adapter is turned off (adapter.enabled) or its Service was deleted"
    if reason == "ServicePortError":
        return f"{where} has no port {port}, which the APIService names"
    if reason in ("MissingEndpoints", "EndpointsNotFound"):
        return (f"no adapter pod behind {where} is ready. The adapter turns ready only once it has listed series "
                f"from Prometheus, so a wrong or unreachable Prometheus URL keeps it unready (see the Prometheus "
                f"line below): kubectl -n {namespace} get pods; kubectl -n {namespace} logs deploy/{service}")
    if reason == "FailedDiscoveryCheck":
        lowered = message.lower()
        if "x509" in lowered or "certificate" in lowered or "tls" in lowered:
            return ("the kube-apiserver does not trust the adapter's serving certificate: the APIService's "
                    "caBundle does not match it (adapter.tls.mode; with cert-manager, is its CA injector running?)")
        if " 401" in message or " 403" in message:
            return ("the adapter refused the kube-apiserver's own request: its delegated authentication (RoleBinding "
                    "to extension-apiserver-authentication-reader in kube-system) or the front-proxy CA")
        return ("the kube-apiserver cannot reach the adapter's pods: a NetworkPolicy or a firewall between the "
                f"control plane and the pods (private EKS/GKE clusters must allow the control plane to the "
                f"adapter's container port), or the pods answer too slowly: kubectl -n {namespace} logs "
                f"deploy/{service}")
    if not reason:
        return "the kube-apiserver has not checked it yet: run the check again in a few seconds"
    return (f"{reason}: see kubectl describe apiservice and the adapter's log "
            f"(kubectl -n {namespace} logs deploy/{service})")


def judge_apiservice(name: str, answer: Answer) -> Finding:
    subject = f"APIService {name}"
    failed = _not_answered(subject, answer, "get apiservices.apiregistration.k8s.io")
    if failed:
        return failed
    if answer.code == 404:
        return Finding(FAIL, subject, "not found",
                       "this release does not create it (adapter.enabled, adapter.apiService.*) or it was deleted")
    if answer.code != 200 or not isinstance(answer.body, dict):
        return Finding(FAIL, subject, f"HTTP {answer.code}: {status_message(answer)}",
                       "an unexpected answer from the API server")
    conditions = (answer.body.get("status") or {}).get("conditions") or []
    available = next((c for c in conditions if c.get("type") == "Available"), None)
    namespace, service, port = _service_of(answer.body)
    if available is None:
        return Finding(FAIL, subject, "no Available condition yet", _apiservice_cause("", "", namespace, service, port))
    reason, message = str(available.get("reason", "")), str(available.get("message", ""))
    said = f"{reason}: {message}" if message else reason
    if available.get("status") == "True":
        return Finding(OK, subject, f"Available ({said})")
    return Finding(FAIL, subject, f"not Available ({said})",
                   _apiservice_cause(reason, message, namespace, service, port))


# -- Prometheus --------------------------------------------------------------------------------------------------

PROMETHEUS_PROBE = "/api/v1/query"


def judge_prometheus(url: str, answer: Answer) -> Finding:
    subject = f"Prometheus at {url}"
    if answer.code == 0:
        return Finding(FAIL, subject, f"no answer: {answer.error}",
                       "no Prometheus at this URL (adapter.prometheus.url): wrong Service name, namespace or port, "
                       f"or a NetworkPolicy that lets only the adapter in. {DOCS} shows how to find the URL for "
                       "kube-prometheus-stack, a plain Prometheus and VictoriaMetrics")
    if answer.code in (401, 403):
        return Finding(OK, subject, f"answers (HTTP {answer.code}: it wants credentials, which the adapter has from "
                                    "adapter.prometheus.tokenFile and this check does not)")
    if answer.code == 200 and isinstance(answer.body, dict) and answer.body.get("status") == "success":
        return Finding(OK, subject, "answers PromQL queries")
    return Finding(FAIL, subject, f"HTTP {answer.code} from {PROMETHEUS_PROBE}: {status_message(answer)}",
                   "something answers at this URL, but not Prometheus' query API: check the port and the path "
                   "prefix (VictoriaMetrics cluster: http://vmselect-...:8481/select/0/prometheus)")


# -- the metric --------------------------------------------------------------------------------------------------

_CUSTOM_PATH = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/(?:namespaces/(?P<namespace>[^/]+)/)?"
                          r"(?P<resource>[^/]+)/(?P<name>[^/]+)/(?P<metric>[^/?]+)$")
_EXTERNAL_PATH = re.compile(r"^/apis/(?P<group>external\.metrics\.k8s\.io)/(?P<version>[^/]+)/namespaces/"
                            r"(?P<namespace>[^/]+)/(?P<metric>[^/?]+)$")


def discovery_path(metric_path: str) -> tuple[str, str] | None:
    """``(/apis/<group>/<version>, the resource name its list shows for the metric)`` for a metric path."""
    path = urlsplit(metric_path).path
    found = _EXTERNAL_PATH.match(path)
    if found:
        return f"/apis/{found['group']}/{found['version']}", found["metric"]
    found = _CUSTOM_PATH.match(path)
    if found and found["group"] != "metrics.k8s.io":
        return f"/apis/{found['group']}/{found['version']}", f"{found['resource']}/{found['metric']}"
    return None


def _listed(discovery: Answer | None) -> list[str] | None:
    if discovery is None or discovery.code != 200 or not isinstance(discovery.body, dict):
        return None
    return [str(r.get("name", "")) for r in discovery.body.get("resources") or []]


def _no_series(metric_path: str, discovery: Answer | None, prometheus_url: str) -> str:
    at = f"Prometheus at {prometheus_url}" if prometheus_url else "Prometheus"
    wanted = discovery_path(metric_path)
    listed = _listed(discovery)
    scraping = ("Is Prometheus scraping the exporter? With the Prometheus Operator its ServiceMonitor must match "
                "the Prometheus' serviceMonitorSelector (kube-prometheus-stack: the release label, "
                "exporter.serviceMonitor.labels); without it, an annotation job or the scrape job in "
                f"{DOCS}. Does a GPU node run the exporter (it runs on GPU nodes only)? The adapter relists "
                "series every adapter.metricsRelistInterval")
    if listed == []:
        return f"no series yet: the adapter found none of its rules' series in {at}. {scraping}"
    if listed and wanted and wanted[1] not in listed:
        resource = wanted[1].split("/")[0]
        hint = (" (for services: the `service` label, which a ServiceMonitor or a Service-annotation job adds and a "
                "pod-annotation job does not)" if resource == "services" else "")
        return (f"no series yet for {wanted[1]}: the adapter serves {len(listed)} other metric(s) "
                f"(e.g. {', '.join(listed[:3])}), so Prometheus answers, but none of its series map to {resource}"
                f"{hint}")
    return f"no series yet: {at} has no series the adapter's rules turn into this metric. {scraping}"


def judge_metric(metric_path: str, answer: Answer | None, discovery: Answer | None = None,
                 prometheus_url: str = "") -> Finding:
    subject = f"metric {metric_path}"
    if answer is None:
        return Finding(SKIP, subject, "not read: the APIService serving it is not Available")
    group = metric_path.split("/")[2] if metric_path.count("/") >= 2 else "the metrics API"
    failed = _not_answered(subject, answer, f"get this metric in API group {group}")
    if failed:
        return failed
    if answer.code == 200 and isinstance(answer.body, dict):
        items = answer.body.get("items")
        if items:
            first = items[0]
            described = first.get("describedObject") or {}
            what = f"{described.get('kind', '')} {described.get('name', '')}".strip() or first.get("metricName", "")
            return Finding(OK, subject, f"{len(items)} value(s); {what}: {first.get('value')}")
        return Finding(FAIL, subject, "answered with no values", _no_series(metric_path, discovery, prometheus_url))
    message = status_message(answer)
    if answer.code == 404:
        return Finding(FAIL, subject, f"404: {message}", _no_series(metric_path, discovery, prometheus_url))
    if answer.code == 503:
        if "unable to fetch metrics" in message or "discovery" in message:
            cause = (f"the adapter could not query Prometheus at {prometheus_url or 'its URL'}: see the Prometheus "
                     "line and the adapter's log")
        else:
            cause = "the APIService is not Available (the aggregator answers 503 for it): see the APIService lines"
        return Finding(FAIL, subject, f"503: {message}", cause)
    return Finding(FAIL, subject, f"HTTP {answer.code}: {message}", "an unexpected answer: see the adapter's log")


def judge(observed: Observed, metric_path: str, prometheus_url: str = "") -> list[Finding]:
    findings = [judge_apiservice(name, answer) for name, answer in observed.apiservices.items()]
    if observed.prometheus is not None:
        findings.append(judge_prometheus(prometheus_url, observed.prometheus))
    if metric_path:
        findings.append(judge_metric(metric_path, observed.metric, observed.discovery, prometheus_url))
    return findings


def passed(findings: Sequence[Finding]) -> bool:
    return all(f.status != FAIL for f in findings)


def render(findings: Sequence[Finding]) -> str:
    lines = []
    for finding in findings:
        lines.append(f"{finding.status:<5} {finding.subject}: {finding.detail}")
        if finding.cause and finding.status != OK:
            lines.append(f"      likely cause: {finding.cause}")
    failed = sum(f.status == FAIL for f in findings)
    lines.append(f"{failed} check(s) failed" if failed else "the metrics API is installed and answering")
    return "\n".join(lines)


# -- I/O ---------------------------------------------------------------------------------------------------------

Fetch = Callable[[str], Answer]


def _parse(data: bytes, content_type: str) -> Any:
    text = data.decode("utf-8", "replace")
    if "json" in content_type or text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def kube_fetcher(kubeconfig: str | None, timeout_s: float = 10.0) -> Fetch:
    """GET through the Kubernetes API with the official client: ``kubeconfig`` when given, else the pod's service
    account, else the caller's default kubeconfig (as kubectl)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration, persist_config=False)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration, persist_config=False)
    api = client.ApiClient(configuration)

    def fetch(path: str) -> Answer:
        parts = urlsplit(path)
        try:
            method, url, headers, body, post = api.param_serialize(
                "GET", parts.path, query_params=parse_qsl(parts.query) or None,
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
            response = api.call_api(method, url, headers, body, post, _request_timeout=timeout_s)
            data = response.read() or b""
        except Exception as exc:  # urllib3's and ssl's errors: no answer, said in one line
            return Answer(0, error=" ".join(str(exc).split()) or type(exc).__name__)
        return Answer(response.status, _parse(data, response.getheader("Content-Type") or ""))

    return fetch


def prometheus_answer(url: str, timeout_s: float = 5.0) -> Answer:
    import httpx  # this command's only HTTP client outside the Kubernetes API

    try:
        response = httpx.get(url.rstrip("/") + PROMETHEUS_PROBE, params={"query": "vector(1)"}, timeout=timeout_s,
                             verify=False)  # reachability only: the adapter verifies with adapter.prometheus.caFile
    except httpx.HTTPError as exc:
        return Answer(0, error=" ".join(str(exc).split()) or type(exc).__name__)
    return Answer(response.status_code, _parse(response.content, response.headers.get("content-type", "")))


def observe(fetch: Fetch, apiservices: Sequence[str], metric_path: str, prometheus_url: str,
            probe: Callable[[str], Answer] = prometheus_answer) -> Observed:
    answers = {name: fetch(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}") for name in apiservices}
    available = all(judge_apiservice(name, answer).status == OK for name, answer in answers.items())
    metric = discovery = None
    if metric_path and available:
        metric = fetch(metric_path)
        listing = discovery_path(metric_path)
        if listing and metric.code != 200:
            discovery = fetch(listing[0])
    return Observed(answers, probe(prometheus_url) if prometheus_url else None, metric, discovery)


def check_install(options: Options) -> None:
    """Check from inside the cluster that the APIServices are Available and a metric answers; name the likely
    cause of each failure (the chart's `helm test`)."""
    try:
        fetch = kube_fetcher(options.kubeconfig)
    except Exception as exc:  # the config loaders raise ConfigException, OSError, KeyError, TypeError...
        where = f"kubeconfig {options.kubeconfig}" if options.kubeconfig else "no Kubernetes API configuration"
        print(f"gpu-adapter: error: {where}: {' '.join(str(exc).split())}", file=sys.stderr)
        raise typer.Exit(2) from None
    metric_path, prometheus_url = options.metric_path, options.prometheus_url
    deadline = time.monotonic() + options.wait_seconds
    while True:
        findings = judge(observe(fetch, options.apiservice, metric_path, prometheus_url), metric_path, prometheus_url)
        if passed(findings) or time.monotonic() >= deadline:
            break
        first = next(f for f in findings if f.status == FAIL)
        print(f"waiting: {first.subject}: {first.detail}", flush=True)
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
    print(render(findings), flush=True)
    if not passed(findings):
        raise typer.Exit(1)
