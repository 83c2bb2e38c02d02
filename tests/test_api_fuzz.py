"""Fuzzing the API in-process: hostile paths, selectors and headers never cause a 500 or change a query's shape.

The app runs with the built-in presets over a recorded catalogue; a stand-in Prometheus records every query
it is sent, and each one must parse (promql_parser) with the request's namespace/name as plain matcher values.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

import httpx
import promql_parser
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from adapter.auth.authn import Authenticator
from adapter.auth.authz import Authorizer
from adapter.auth.delegated import AccessResult, TokenResult
from adapter.auth.identity import User
from adapter.auth.middleware import AuthMiddleware, PathMatcher
from adapter.auth.requestheader import ClientCAs
from adapter.presets.gpu import gpu_presets
from adapter.prometheus.client import PrometheusConfig, Sample
from adapter.prometheus.discovery import Discovery
from adapter.provider.engine import Engine
from adapter.rules import build_catalogue
from adapter.server.app import AdapterState, create_app
from tests.support.promql_checks import hostile_text

pytestmark = pytest.mark.unit

PRESETS = gpu_presets()
METRIC = "DCGM_FI_DEV_GPU_UTIL"
SERIES = [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "namespace": "ml", "pod": "infer-0", "service": "dcgm-exporter"},
          {"__name__": "DCGM_FI_DEV_FB_USED", "namespace": "ml", "pod": "infer-0"}]
CATALOGUE = build_catalogue(PRESETS, {q: SERIES for q in PRESETS.series_queries()})
ALLOWED_STATUS = {200, 400, 401, 403, 404, 503}


class RecordingPrometheus:
    """Answers every instant query with one sample for pod infer-0, in the namespace the query asks for (as
    Prometheus would: the adapter ignores a sample from another namespace); remembers the queries."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.config = PrometheusConfig(url="http://prometheus.invalid")

    async def query(self, promql: str, at: float | None = None) -> list[Sample]:
        self.queries.append(promql)
        asked = [m[2] for m in _matchers(promql_parser.parse(promql))
                 if m[0] == "namespace" and m[1] == promql_parser.MatchOp.Equal]
        return [Sample({"namespace": asked[0] if asked else "ml", "pod": "infer-0"}, 1.7e9, 50.0)]

    async def scrape_intervals(self) -> list[float]:
        return []

    async def aclose(self) -> None:
        pass


class InProcessClient:
    """Requests straight into the ASGI app (httpx's ASGI transport); unexpected exceptions become 500s."""

    def __init__(self, app: object) -> None:
        self._transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # type: ignore[arg-type]

    def get(self, path: str, params: dict[str, str] | None = None) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=self._transport, base_url="http://adapter") as client:
                return await client.get(path, params=params)

        return asyncio.run(go())


def _app(prom: RecordingPrometheus) -> InProcessClient:
    discovery = Discovery(prom, lambda: PRESETS)  # type: ignore[arg-type]
    discovery.catalogue = CATALOGUE
    engine = Engine(prom, lambda: discovery.catalogue)  # type: ignore[arg-type]
    state = AdapterState(prom, discovery, engine, serve_external=lambda: False)  # type: ignore[arg-type]
    return InProcessClient(create_app(state, run_discovery=False))


PROM = RecordingPrometheus()
CLIENT = _app(PROM)

segment = st.one_of(hostile_text(16), st.sampled_from(["*", "%2A", "ml", "infer-0", "pods", "metrics", ""]))
resource = st.one_of(st.sampled_from(["pods", "pod", "po", "services", "namespaces", "nodes", "deployments.apps",
                                      "Pods", "pods.", ".apps"]), hostile_text(10))
metric = st.one_of(st.sampled_from(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_AVG", "DCGM_FI_DEV_FB_USED"]),
                   hostile_text(16))
selector = st.one_of(st.just(""), hostile_text(24),
                     st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["app", "gpu", "a.b/c", "x"]),
                               st.text(st.sampled_from("abc-_.09"), max_size=8)))


@pytest.mark.parametrize("namespace", ['ml"} or vector(1) #', "ml\\", 'a",pod=~".+', "ml\t", "ns}[5m]"])
def test_hostile_namespace_reaches_prometheus_as_a_plain_value(namespace: str) -> None:
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{quote(namespace, safe='')}/pods/infer-0/{METRIC}"
    response = CLIENT.get(path)
    assert response.status_code == 200, response.text
    assert PROM.queries, "the request reached Prometheus"
    _check_queries(namespace, "infer-0")


def _check_queries(namespace: str | None, name: str | None) -> None:
    """Every query Prometheus got parses, and (when given) names this namespace and pod as plain values."""
    for promql in PROM.queries:
        expr = promql_parser.parse(promql)  # raises when a request value escaped its string
        for found in _matchers(expr):
            if found[0] == "namespace" and namespace is not None:
                assert found[2] == namespace, (promql, namespace)
            if found[0] == "pod" and found[1] == promql_parser.MatchOp.Equal and name is not None:
                assert found[2] == name, (promql, name)
    PROM.queries.clear()


def _matchers(expr: object) -> list[tuple[str, object, str]]:
    found: list[tuple[str, object, str]] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        # The presets are one aggregation over one selector: a binary operator could only come from a request.
        assert not isinstance(node, promql_parser.BinaryExpr), node
        if isinstance(node, promql_parser.VectorSelector):
            found.extend((m.name, m.op, m.value) for m in node.matchers.matchers)
        for attr in ("expr", "lhs", "rhs", "param"):
            child = getattr(node, attr, None)
            if child is not None:
                stack.append(child)
    return found


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(["v1beta1", "v1beta2", "v1", "v1beta3"]), namespace=segment, res=resource,
       name=segment, metric_name=metric, label_selector=selector, metric_selector=selector,
       namespaced=st.booleans())
@example(version="v1beta2", namespace="", res="pods", name="metrics", metric_name=METRIC, label_selector="",
         metric_selector="", namespaced=True)  # once drawn: the Namespace "pods"'s metric, not a pod's
def test_custom_paths_and_selectors(version: str, namespace: str, res: str, name: str, metric_name: str,
                                    label_selector: str, metric_selector: str, namespaced: bool) -> None:
    parts = ["namespaces", namespace, res, name, metric_name] if namespaced else [res, name, metric_name]
    path = f"/apis/custom.metrics.k8s.io/{version}/" + "/".join(quote(p, safe="*") for p in parts)
    response = CLIENT.get(path, params={"labelSelector": label_selector, "metricLabelSelector": metric_selector})
    assert response.status_code in ALLOWED_STATUS, (path, response.status_code, response.text)
    body = response.json()
    if response.status_code != 200:
        assert body["kind"] == "Status" and body["code"] == response.status_code and body["message"]
    if "" in parts:
        # adapter/api/paths.py drops empty segments ("namespaces//pods/metrics/m" is the metric m of the Namespace
        # "pods"), so the request is not about these parts: the queries must still parse.
        _check_queries(None, None)
    else:
        _check_queries(namespace, name)


@settings(max_examples=200, deadline=None)
@given(namespace=segment, metric_name=metric, label_selector=selector)
def test_external_paths(namespace: str, metric_name: str, label_selector: str) -> None:
    path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{quote(namespace, safe='')}/{quote(metric_name)}"
    response = CLIENT.get(path, params={"labelSelector": label_selector})
    assert response.status_code in ALLOWED_STATUS
    assert response.json()["kind"] == "Status" or response.status_code == 200
    PROM.queries.clear()


@settings(max_examples=200, deadline=None)
@given(raw=st.lists(st.tuples(st.sampled_from(["x-remote-user", "x-remote-group", "x-remote-extra-scopes",
                                                "authorization", "x-remote-extra-%zz", "impersonate-user"]),
                              st.one_of(st.sampled_from(["Bearer good", "Bearer  good ", "bearer good", "Bearer bad",
                                                         "Basic Z29vZA==", "admin", "system:masters"]),
                                        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30))),
                    max_size=6))
def test_headers_cannot_authenticate_without_a_certificate(raw: list[tuple[str, str]]) -> None:
    """Without a front-proxy certificate no header makes anyone a user, except a valid bearer token."""
    class Tokens:
        async def review_token(self, token: str) -> TokenResult:
            return TokenResult(User("alice") if token == "good" else None, "invalid")

    class Access:
        async def review_access(self, spec: bytes) -> AccessResult:
            return AccessResult(json.loads(spec)["user"] == "alice")

    proxy = ClientCAs()
    inner = create_app(AdapterState(PROM, Discovery(PROM, lambda: PRESETS),  # type: ignore[arg-type]
                                    Engine(PROM, lambda: CATALOGUE),  # type: ignore[arg-type]
                                    serve_external=lambda: False), run_discovery=False)
    app = AuthMiddleware(inner, Authenticator(lambda: proxy, Tokens()), Authorizer(Access()), lambda: proxy,
                         always_allow=PathMatcher(["/healthz"]))
    headers = [(k.encode(), v.encode()) for k, v in raw]
    sent: list[dict] = []

    async def call() -> None:
        async def receive() -> dict:
            return {"type": "http.request", "body": b""}

        async def send(message: dict) -> None:
            sent.append(message)

        await app({"type": "http", "method": "GET", "path": "/apis/custom.metrics.k8s.io/v1beta2", "headers": headers,
                   "query_string": b"", "state": {}}, receive, send)

    asyncio.run(call())
    status = sent[0]["status"]
    assert status != 500
    authorization = next((v for k, v in raw if k == "authorization"), "")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip() == "good":
        assert status == 200, raw
    else:
        assert status == 401, raw


def test_head_is_answered_like_get_and_other_methods_get_a_status() -> None:
    """The metric APIs are plain Starlette routes: HEAD like GET without a body, POST a 405 Status (no 500)."""
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/infer-0/{METRIC}"

    async def go() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=CLIENT._transport, base_url="http://adapter") as client:
            return await client.get(path), await client.head(path), await client.post(path)

    got, head, post = asyncio.run(go())
    assert got.status_code == 200 and got.json()["items"][0]["describedObject"]["name"] == "infer-0"
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(got.content))
    assert post.status_code == 405
    assert post.json()["kind"] == "Status" and post.json()["code"] == 405
