"""adapter.cli.install_check's judging, without servers: each answer the Kubernetes API, the aggregator, the adapter or
Prometheus gives (shapes and wording from docs/spec: the aggregator's Available reasons and messages,
kube-apiserver's 403, the adapter's 404/503 Statuses) turns into ok/FAIL and the likely cause a user needs.
The real command against the fake API, a real adapter and a real VictoriaMetrics: tests/test_install_check_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.cli.install_check import (
    FAIL,
    OK,
    SKIP,
    Answer,
    Observed,
    discovery_path,
    judge,
    judge_apiservice,
    judge_metric,
    judge_prometheus,
    observe,
    passed,
    render,
)

pytestmark = pytest.mark.unit

NS, SERVICE = "gpu-system", "gpu-gpu-autoscaler-adapter"
URL = "http://prometheus-operated.monitoring.svc:9090"
METRIC = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NS}/services/dcgm-exporter/DCGM_FI_DEV_GPU_UTIL_AVG"


def status(code: int, message: str, reason: str = "") -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def apiservice(available: str | None, reason: str = "", message: str = "") -> Answer:
    body: dict[str, Any] = {"kind": "APIService", "apiVersion": "apiregistration.k8s.io/v1",
                            "metadata": {"name": "v1beta2.custom.metrics.k8s.io"},
                            "spec": {"group": "custom.metrics.k8s.io", "version": "v1beta2",
                                     "service": {"name": SERVICE, "namespace": NS, "port": 443}},
                            "status": {}}
    if available is not None:
        body["status"]["conditions"] = [{"type": "Available", "status": available, "reason": reason,
                                         "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    return Answer(200, body)


FORBIDDEN_APISERVICE = status(403, 'apiservices.apiregistration.k8s.io "v1beta2.custom.metrics.k8s.io" is forbidden: '
                                   'User "system:serviceaccount:gpu-system:default" cannot get resource "apiservices" '
                                   'in API group "apiregistration.k8s.io" at the cluster scope', "Forbidden")

# (answer, status, words in the detail, words in the likely cause); the aggregator's reasons and messages are
# kube-aggregator's remote_available_controller.go as docs/spec/k8s-metrics-api.md §3.4 lists them.
APISERVICE_CASES = {
    "available": (apiservice("True", "Passed", "all checks passed"), OK, ["Available (Passed: all checks passed)"],
                  []),
    "no ready adapter pod": (
        apiservice("False", "MissingEndpoints",
                   f'endpointslices for service/{SERVICE} in "{NS}" have no addresses with port name "https"'),
        FAIL, ["not Available (MissingEndpoints: endpointslices for service/"],
        [f"no adapter pod behind Service {NS}/{SERVICE} is ready", "unreachable Prometheus URL",
         f"kubectl -n {NS} logs deploy/{SERVICE}"]),
    "no endpoint slices": (apiservice("False", "EndpointsNotFound", f'cannot find endpointslices for service/{SERVICE}'
                                                                    f' in "{NS}"'), FAIL, ["EndpointsNotFound"],
                           ["no adapter pod"]),
    "service deleted": (apiservice("False", "ServiceNotFound", f'service/{SERVICE} in "{NS}" is not present'), FAIL,
                        ["ServiceNotFound"], [f"Service {NS}/{SERVICE} does not exist"]),
    "wrong port": (apiservice("False", "ServicePortError", f'service/{SERVICE} in "{NS}" is not listening on port 443'),
                   FAIL, ["ServicePortError"], ["has no port 443"]),
    "certificate": (apiservice("False", "FailedDiscoveryCheck",
                               "failing or missing response from https://10.0.3.7:6443/apis/custom.metrics.k8s.io/"
                               "v1beta2: Get \"https://10.0.3.7:6443/apis/custom.metrics.k8s.io/v1beta2\": tls: "
                               "failed to verify certificate: x509: certificate signed by unknown authority"),
                    FAIL, ["FailedDiscoveryCheck"], ["caBundle does not match"]),
    "adapter refuses the aggregator": (
        apiservice("False", "FailedDiscoveryCheck", "failing or missing response from https://10.0.3.7:6443/apis/"
                                                    "custom.metrics.k8s.io/v1beta2: bad status from https://10.0.3.7"
                                                    ":6443/apis/custom.metrics.k8s.io/v1beta2: 403"),
        FAIL, ["bad status"], ["delegated authentication"]),
    "unreachable pods": (apiservice("False", "FailedDiscoveryCheck",
                                    "failing or missing response from https://10.0.3.7:6443/apis/custom.metrics.k8s.io"
                                    "/v1beta2: Get \"https://10.0.3.7:6443/...\": context deadline exceeded"),
                         FAIL, ["context deadline exceeded"], ["NetworkPolicy", "control plane"]),
    "not checked yet": (apiservice(None), FAIL, ["no Available condition yet"], ["has not checked it yet"]),
    "not found": (Answer(404, status(404, 'apiservices.apiregistration.k8s.io "v1beta2.custom.metrics.k8s.io" not '
                                          'found', "NotFound")), FAIL, ["not found"], ["adapter.apiService"]),
    "rbac": (Answer(403, FORBIDDEN_APISERVICE), FAIL, ["403 Forbidden", "cannot get resource \"apiservices\""],
             ["RBAC", "get apiservices.apiregistration.k8s.io"]),
    "no api server": (Answer(0, error="Connection refused"), FAIL, ["no answer from the Kubernetes API"],
                      ["cannot reach the API server"]),
    "token refused": (Answer(401, status(401, "Unauthorized", "Unauthorized")), FAIL, ["401"],
                      ["service account token"]),
}


@pytest.mark.parametrize("case", APISERVICE_CASES)
def test_apiservice(case):
    answer, expected, detail, cause = APISERVICE_CASES[case]
    finding = judge_apiservice("v1beta2.custom.metrics.k8s.io", answer)
    assert finding.status == expected and finding.subject == "APIService v1beta2.custom.metrics.k8s.io"
    assert all(word in finding.detail for word in detail), finding.detail
    assert all(word in finding.cause for word in cause), finding.cause
    assert (finding.cause == "") == (expected == OK)


PROMETHEUS_CASES = {
    "answers": (Answer(200, {"status": "success", "data": {"resultType": "vector", "result": []}}), OK,
                ["answers PromQL queries"]),
    "needs a token": (Answer(401, "Unauthorized"), OK, ["wants credentials"]),
    "nothing there": (Answer(0, error="[Errno -2] Name or service not known"), FAIL,
                      ["no answer: [Errno -2] Name or service not known", "no Prometheus at this URL",
                       "docs/install.md"]),
    "something else": (Answer(404, "404 page not found"), FAIL, ["HTTP 404", "path prefix"]),
}


@pytest.mark.parametrize("case", PROMETHEUS_CASES)
def test_prometheus(case):
    answer, expected, words = PROMETHEUS_CASES[case]
    finding = judge_prometheus(URL, answer)
    assert finding.status == expected and finding.subject == f"Prometheus at {URL}"
    assert all(word in finding.detail + finding.cause for word in words), finding


def metric_value(value: str = "55") -> dict[str, Any]:
    return {"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {},
            "items": [{"describedObject": {"kind": "Service", "namespace": NS, "name": "dcgm-exporter",
                                           "apiVersion": "/v1"},
                       "metric": {"name": "DCGM_FI_DEV_GPU_UTIL_AVG", "selector": None},
                       "timestamp": "2026-01-01T00:00:00Z", "value": value}]}


def resource_list(*names: str) -> Answer:
    return Answer(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "custom.metrics.k8s.io/v1beta2",
                        "resources": [{"name": n, "singularName": "", "namespaced": True, "kind": "MetricValueList",
                                       "verbs": ["get"]} for n in names]})


NOT_FOUND = Answer(404, status(404, "the server could not find the metric DCGM_FI_DEV_GPU_UTIL_AVG for services "
                                    "dcgm-exporter", "NotFound"))
METRIC_CASES = {
    "answers": (Answer(200, metric_value()), None, OK, ["1 value(s); Service dcgm-exporter: 55"]),
    "no values": (Answer(200, {**metric_value(), "items": []}), resource_list(), FAIL,
                  ["answered with no values", "no series yet: the adapter found none of its rules' series"]),
    "no series at all": (NOT_FOUND, resource_list(), FAIL,
                         ["404: the server could not find the metric", f"found none of its rules' series in "
                          f"Prometheus at {URL}", "serviceMonitorSelector", "GPU node"]),
    "series without the service label": (
        NOT_FOUND, resource_list("pods/DCGM_FI_DEV_GPU_UTIL", "namespaces/DCGM_FI_DEV_GPU_UTIL"), FAIL,
        ["no series yet for services/DCGM_FI_DEV_GPU_UTIL_AVG", "serves 2 other metric(s)", "`service` label"]),
    "no listing": (NOT_FOUND, None, FAIL, [f"no series yet: Prometheus at {URL} has no series"]),
    "rbac": (Answer(403, status(403, 'services.custom.metrics.k8s.io "dcgm-exporter" is forbidden: User "system:'
                                     'serviceaccount:gpu-system:default" cannot get resource "services/DCGM_FI_DEV_'
                                     'GPU_UTIL_AVG" in API group "custom.metrics.k8s.io" in the namespace '
                                     '"gpu-system"', "Forbidden")), None, FAIL,
             ["403 Forbidden", "RBAC", "get this metric in API group custom.metrics.k8s.io"]),
    "prometheus down": (Answer(503, status(503, "unable to fetch metrics: Prometheus at http://x:9090 is "
                                                "unreachable", "ServiceUnavailable")), None, FAIL,
                        ["503: unable to fetch metrics", f"could not query Prometheus at {URL}"]),
    "aggregator 503": (Answer(503, "service unavailable\n"), None, FAIL,
                       ["503: service unavailable", "APIService is not Available"]),
    "not read": (None, None, SKIP, ["not read: the APIService serving it is not Available"]),
}


@pytest.mark.parametrize("case", METRIC_CASES)
def test_metric(case):
    answer, discovery, expected, words = METRIC_CASES[case]
    finding = judge_metric(METRIC, answer, discovery, URL)
    assert finding.status == expected and finding.subject == f"metric {METRIC}"
    assert all(word in finding.detail + " " + finding.cause for word in words), finding


@pytest.mark.parametrize("path, expected", [
    (METRIC, ("/apis/custom.metrics.k8s.io/v1beta2", "services/DCGM_FI_DEV_GPU_UTIL_AVG")),
    ("/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dx",
     ("/apis/custom.metrics.k8s.io/v1beta1", "pods/DCGM_FI_DEV_GPU_UTIL")),
    ("/apis/custom.metrics.k8s.io/v1beta2/nodes/gpu-node-1/DCGM_FI_DEV_GPU_UTIL",
     ("/apis/custom.metrics.k8s.io/v1beta2", "nodes/DCGM_FI_DEV_GPU_UTIL")),
    ("/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/queue_depth",
     ("/apis/external.metrics.k8s.io/v1beta1", "queue_depth")),
    ("/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods/infer-0", None),
    ("/api/v1/pods", None),
])
def test_discovery_path(path, expected):
    assert discovery_path(path) == expected


def test_the_metric_is_not_read_while_an_apiservice_is_unavailable_and_the_listing_only_on_failure():
    asked: list[str] = []

    def fetch_with(answers: dict[str, Answer]):
        def fetch(path: str) -> Answer:
            asked.append(path)
            return answers[path]
        return fetch

    read = "/apis/apiregistration.k8s.io/v1/apiservices/v1beta2.custom.metrics.k8s.io"
    down = {read: apiservice("False", "MissingEndpoints", "no addresses")}
    seen = observe(fetch_with(down), ["v1beta2.custom.metrics.k8s.io"], METRIC, URL,
                   probe=lambda url: Answer(0, error="refused"))
    assert asked == list(down) and seen.metric is None and seen.discovery is None
    findings = judge(seen, METRIC, URL)
    assert [f.status for f in findings] == [FAIL, FAIL, SKIP] and not passed(findings)

    asked.clear()
    up = {read: apiservice("True", "Passed", "all checks passed"), METRIC: NOT_FOUND,
          "/apis/custom.metrics.k8s.io/v1beta2": resource_list()}
    seen = observe(fetch_with(up), ["v1beta2.custom.metrics.k8s.io"], METRIC, "")
    assert asked == [read, METRIC, "/apis/custom.metrics.k8s.io/v1beta2"] and seen.prometheus is None
    assert [f.status for f in judge(seen, METRIC)] == [OK, FAIL]

    asked.clear()
    seen = observe(fetch_with({**up, METRIC: Answer(200, metric_value())}), ["v1beta2.custom.metrics.k8s.io"],
                   METRIC, "")
    assert asked == [read, METRIC]  # answered: no listing needed
    assert passed(judge(seen, METRIC))


def test_render_prints_each_check_and_the_cause_of_each_failure():
    findings = judge(Observed({"v1beta2.custom.metrics.k8s.io": apiservice("True", "Passed", "all checks passed")},
                              Answer(0, error="connection refused"), NOT_FOUND, resource_list()), METRIC, URL)
    text = render(findings)
    lines = text.splitlines()
    assert lines[0] == "ok    APIService v1beta2.custom.metrics.k8s.io: Available (Passed: all checks passed)"
    assert lines[1] == f"FAIL  Prometheus at {URL}: no answer: connection refused"
    assert lines[2].startswith("      likely cause: no Prometheus at this URL (adapter.prometheus.url)")
    assert lines[3].startswith(f"FAIL  metric {METRIC}: 404: the server could not find the metric")
    assert lines[-1] == "2 check(s) failed"
    ok = judge(Observed({"v1beta2.custom.metrics.k8s.io": apiservice("True", "Passed", "ok")}, None,
                        Answer(200, metric_value())), METRIC)
    assert render(ok).splitlines()[-1] == "the metrics API is installed and answering"
