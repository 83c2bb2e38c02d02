"""The real adapter in "cluster mode": a fake Kubernetes API on loopback, front-proxy certificates, delegated auth.

What the aggregator, the HPA controller and a human with kubectl do, end to end over HTTPS
(../shared/spec/k8s-metrics-api.md §3.4, §4).
"""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.adapter_process import AdapterProcess
from tests.support.certs import Issued, issue, make_ca
from tests.support.fake_kube import FakeKube, configmap, pod
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]

FRONT_PROXY_CA = make_ca("front-proxy-ca")
OTHER_CA = make_ca("not-the-front-proxy-ca")
HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
HPA_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kube-system")
C2 = "/apis/custom.metrics.k8s.io/v1beta2"
METRIC = "DCGM_FI_DEV_GPU_UTIL"

SERIES = "".join(
    f'{METRIC}{{gpu="{i}",UUID="GPU-{i}",namespace="ml",pod="{name}",container="main"}} {util}\n'
    for i, (name, util) in enumerate([("infer-0", 40), ("infer-1", 80), ("batch-0", 10)]))


def _policy(spec: dict) -> tuple[bool, str]:
    """RBAC stand-in: the HPA and alice may read custom metrics in namespace ml; nobody else anything."""
    attrs = spec.get("resourceAttributes") or {}
    if spec.get("user") in (HPA, "alice") and attrs.get("group") == "custom.metrics.k8s.io" \
            and attrs.get("namespace") == "ml" and attrs.get("verb") == "get":
        return True, ""
    return False, "no RBAC policy matched"


@dataclass
class Cluster:
    kube: FakeKube
    adapter: AdapterProcess
    tmp: Path

    def client(self, cert: Issued | None = None) -> httpx.Client:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if cert is not None:
            ctx.load_cert_chain(*cert.write(self.tmp, f"client-{id(cert)}"))
        return httpx.Client(base_url=self.adapter.url, verify=ctx, timeout=10)

    def as_proxy(self, path: str, user: str, groups: tuple[str, ...] = (), cert: Issued | None = None,
                 **params: str) -> httpx.Response:
        headers = [("X-Remote-User", user), *(("X-Remote-Group", g) for g in groups)]
        with self.client(cert or PROXY) as client:
            return client.get(path, params=params or None, headers=headers)


PROXY = issue(FRONT_PROXY_CA, "front-proxy-client")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("auth")
    kube = FakeKube(authorize=_policy)
    kube.tokens["alice-token"] = {"username": "alice", "uid": "u-1", "groups": ["devs"]}
    kube.start()
    kube.put("", "v1", "configmaps", configmap("kube-system", "extension-apiserver-authentication", {
        "requestheader-client-ca-file": FRONT_PROXY_CA.cert_pem.decode(),
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    }))
    for name, app in (("infer-0", "infer"), ("infer-1", "infer"), ("batch-0", "batch")):
        kube.put("", "v1", "pods", pod("ml", name, {"app": app}))
    endpoint = MetricsEndpoint(SERIES)
    prom = PrometheusServer([endpoint.address], job="dcgm", honor_labels=True).start()
    adapter = None
    try:
        prom.wait_for(METRIC, timeout=30)
        kubeconfig = kube.write_kubeconfig(tmp / "kubeconfig")
        adapter = AdapterProcess(prom.url, str(tmp / "certs"), ["--kubeconfig", kubeconfig,
                                                                "--metrics-relist-interval", "2s"], disable_auth=False)
        yield Cluster(kube, adapter, tmp)
    finally:
        if adapter is not None:
            adapter.stop()
        prom.stop()
        endpoint.stop()
        kube.stop()


def _pods(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 200, response.text
    return {item["describedObject"]["name"]: item["value"] for item in response.json()["items"]}


def test_availability_probe_as_the_aggregator_sends_it(cluster: Cluster) -> None:
    """system:masters skips the SubjectAccessReview; 5 parallel probes all answer 200."""
    before = len(cluster.kube.access_reviews)
    for _ in range(5):
        response = cluster.as_proxy(C2, "system:kube-aggregator", ("system:masters",))
        assert response.status_code == 200 and response.json()["kind"] == "APIResourceList"
    assert len(cluster.kube.access_reviews) == before


def test_hpa_pods_request_is_authorised_and_resolved_from_the_watch_cache(cluster: Cluster) -> None:
    response = cluster.as_proxy(f"{C2}/namespaces/ml/pods/%2A/{METRIC}", HPA, HPA_GROUPS, labelSelector="app=infer")
    assert _pods(response) == {"infer-0": "40", "infer-1": "80"}
    review = next(r for r in reversed(cluster.kube.access_reviews) if r.get("user") == HPA)
    assert review["resourceAttributes"] == {"namespace": "ml", "verb": "get", "group": "custom.metrics.k8s.io",
                                            "version": "v1beta2", "resource": "pods", "subresource": METRIC,
                                            "name": "*"}
    assert set(review["groups"]) == {*HPA_GROUPS, "system:authenticated"}


def test_identity_headers_without_the_front_proxy_certificate_get_401(cluster: Cluster) -> None:
    with cluster.client() as client:
        response = client.get(f"{C2}/namespaces/ml/pods/%2A/{METRIC}", params={"labelSelector": "app=infer"},
                              headers={"X-Remote-User": HPA, "X-Remote-Group": "system:masters"})
    assert response.status_code == 401
    assert response.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                               "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def test_front_proxy_ca_certificate_with_a_cn_not_allowed_gets_401(cluster: Cluster) -> None:
    response = cluster.as_proxy(C2, "system:kube-aggregator", ("system:masters",),
                                cert=issue(FRONT_PROXY_CA, "somebody-else"))
    assert response.status_code == 401


def test_client_certificate_from_another_ca_is_rejected(cluster: Cluster) -> None:
    with pytest.raises(httpx.TransportError):
        cluster.as_proxy(C2, "system:kube-aggregator", ("system:masters",),
                         cert=issue(OTHER_CA, "front-proxy-client"))


def test_denied_requests_get_403_in_kube_apiserver_wording(cluster: Cluster) -> None:
    response = cluster.as_proxy(f"{C2}/namespaces/prod/pods/%2A/{METRIC}", HPA, HPA_GROUPS,
                                labelSelector="app=infer")
    assert response.status_code == 403
    body = response.json()
    assert body["reason"] == "Forbidden"
    assert body["message"] == (f'pods.custom.metrics.k8s.io "*" is forbidden: User "{HPA}" cannot get resource '
                               f'"pods/{METRIC}" in API group "custom.metrics.k8s.io" in the namespace "prod": '
                               "no RBAC policy matched")
    assert body["details"] == {"name": "*", "group": "custom.metrics.k8s.io", "kind": "pods"}


def test_bearer_tokens_go_through_token_review_and_ignore_identity_headers(cluster: Cluster) -> None:
    with cluster.client() as client:
        ok = client.get(f"{C2}/namespaces/ml/pods/infer-0/{METRIC}",
                        headers={"Authorization": "Bearer alice-token", "X-Remote-User": "admin",
                                 "X-Remote-Group": "system:masters"})
        bad = client.get(f"{C2}/namespaces/ml/pods/infer-0/{METRIC}", headers={"Authorization": "Bearer nope"})
    assert _pods(ok) == {"infer-0": "40"}
    review = next(r for r in reversed(cluster.kube.access_reviews) if r.get("user") in ("alice", "admin"))
    assert review["user"] == "alice" and "system:masters" not in review["groups"]
    assert bad.status_code == 401
    assert any(r["spec"]["token"] == "nope" for r in cluster.kube.token_reviews)


def test_health_and_self_metrics_need_no_credentials(cluster: Cluster) -> None:
    # A front-proxy request with a selector first: it authenticates and starts the pod cache (whatever ran before)
    assert cluster.as_proxy(f"{C2}/namespaces/ml/pods/%2A/{METRIC}", HPA, HPA_GROUPS,
                            labelSelector="app=infer").status_code == 200
    with cluster.client() as client:
        for path in ("/healthz", "/livez", "/readyz"):
            assert client.get(path).text == "ok"
        metrics = client.get("/metrics").text
    assert 'gpu_adapter_authentications_total{result="frontproxy"}' in metrics
    assert 'gpu_adapter_kube_cache_objects{resource="pods"} 3.0' in metrics


def test_selectors_follow_pod_changes_without_listing_per_request(cluster: Cluster) -> None:
    kube = cluster.kube

    def selected() -> dict[str, str]:
        return _pods(cluster.as_proxy(f"{C2}/namespaces/ml/pods/%2A/{METRIC}", HPA, HPA_GROUPS,
                                      labelSelector="app=infer"))

    selected()  # the pod cache exists (its one LIST done), whichever test ran before
    lists_before = kube.count("GET", "/api/v1/pods", watch=False)
    for _ in range(20):
        selected()
    kube.put("", "v1", "pods", pod("ml", "batch-0", {"app": "infer"}))
    wait_until(lambda: "batch-0" in selected())
    assert kube.count("GET", "/api/v1/pods", watch=False) == lists_before, "no LIST per request"

    kube.compact()
    kube.expire_watches()  # the watch expires (410): the cache relists and carries on
    kube.put("", "v1", "pods", pod("ml", "batch-0", {"app": "batch"}))
    wait_until(lambda: selected() == {"infer-0": "40", "infer-1": "80"})

    kube.stop()  # the API server restarts; a pod is deleted while it is down
    kube.delete("", "v1", "pods", "ml", "infer-1")
    kube.start()
    wait_until(lambda: selected() == {"infer-0": "40"})


def test_startup_fails_clearly_without_the_front_proxy_configmap(tmp_path: Path) -> None:
    kube = FakeKube()
    kube.start()
    try:
        out = subprocess.run([sys.executable, "-m", "adapter", "serve", "--prometheus-url", "http://127.0.0.1:1",
                              "--cert-dir", str(tmp_path), "--kubeconfig", kube.write_kubeconfig(tmp_path / "kc")],
                             capture_output=True, text=True, timeout=60)
    finally:
        kube.stop()
    assert out.returncode != 0
    error = out.stderr.strip().splitlines()[-1]
    assert error.startswith("gpu-adapter: error: configmap kube-system/extension-apiserver-authentication")
    assert "extension-apiserver-authentication-reader" in error and "Traceback" not in out.stderr


def test_debug_explain_is_behind_the_same_auth(cluster: Cluster) -> None:
    path = f"/debug/explain{C2}/namespaces/ml/pods/infer-0/{METRIC}"
    with cluster.client() as client:
        assert client.get(path).status_code == 401
    denied = cluster.as_proxy(path, HPA, HPA_GROUPS)
    assert denied.status_code == 403
    assert denied.json()["message"].startswith(f'forbidden: User "{HPA}" cannot get path "/debug/explain')
    allowed = cluster.as_proxy(path, "system:kube-aggregator", ("system:masters",))
    assert allowed.status_code == 200 and allowed.json()
