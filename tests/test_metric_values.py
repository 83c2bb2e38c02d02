"""Metric-value requests answered before routing (adapter/metric_values.py) answer exactly as the routed way does.

Each request is sent twice into the same app: as it comes (``MetricValueRequests`` answers it, or hands it on) and
under a root path, where the middleware always hands it to the router and the app's route answers. Status,
headers and body must match. Separately, the middleware must answer value requests without the app behind it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from adapter.app import AdapterState, create_app
from adapter.discovery import Discovery
from adapter.metric_values import MetricValueRequests
from adapter.prometheus import PrometheusConfig, PrometheusUnavailable, Sample
from adapter.provider import Provider
from adapter.rules import build_catalogue, gpu_presets

PRESETS = gpu_presets()
SERIES = [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "namespace": "ml", "pod": "infer-0", "service": "dcgm-exporter"},
          {"__name__": "DCGM_FI_DEV_GPU_UTIL", "namespace": "ml", "pod": "infer-1", "service": "dcgm-exporter"}]
CATALOGUE = build_catalogue(PRESETS, {q: SERIES for q in PRESETS.series_queries()})
ROOT = "/behind-a-proxy"
BASE = "/apis/custom.metrics.k8s.io"
POD = f"{BASE}/v1beta2/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL"


class StaticPrometheus:
    """Two pods with a GPU utilisation each; ``down`` makes every query fail as an unreachable Prometheus."""

    def __init__(self) -> None:
        self.config = PrometheusConfig(url="http://prometheus.invalid")
        self.down = False
        self.queries = 0

    async def query(self, promql: str, at: float | None = None) -> list[Sample]:
        self.queries += 1
        if self.down:
            raise PrometheusUnavailable("connection refused")
        if promql.startswith("avg by (service)"):  # the Service's average over its pods
            return [Sample({"namespace": "ml", "service": "dcgm-exporter"}, 1.7e9, 60.25)]
        return [Sample({"namespace": "ml", "pod": "infer-0", "service": "dcgm-exporter"}, 1.7e9, 50.0),
                Sample({"namespace": "ml", "pod": "infer-1", "service": "dcgm-exporter"}, 1.7e9, 70.5)]

    async def scrape_intervals(self) -> list[float]:
        return []

    async def aclose(self) -> None:
        pass


def _app(prom: StaticPrometheus) -> Any:
    discovery = Discovery(prom, lambda: PRESETS)  # type: ignore[arg-type]
    discovery.catalogue = CATALOGUE
    provider = Provider(prom, lambda: discovery.catalogue)  # type: ignore[arg-type]
    return create_app(AdapterState(prom, discovery, provider, serve_external=lambda: False),  # type: ignore[arg-type]
                      run_discovery=False)


def _send(app: Any, method: str, path: str, root_path: str = "") -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, root_path=root_path)
        async with httpx.AsyncClient(transport=transport, base_url="http://adapter") as client:
            return await client.request(method, root_path + path)

    return asyncio.run(go())


CASES = [
    # (what, method, path, status)
    ("one pod, v1beta2", "GET", POD, 200),
    ("one pod, v1beta1", "GET", f"{BASE}/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL", 200),
    ("all pods", "GET", f"{BASE}/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL", 200),
    ("all pods, %2A", "GET", f"{BASE}/v1beta1/namespaces/ml/pods/%2A/DCGM_FI_DEV_GPU_UTIL", 200),
    ("the Service", "GET", f"{BASE}/v1beta2/namespaces/ml/services/dcgm-exporter/DCGM_FI_DEV_GPU_UTIL_AVG", 200),
    ("HEAD", "HEAD", POD, 200),
    ("metricLabelSelector", "GET", f"{POD}?metricLabelSelector=gpu%3D0", 200),
    ("bad metricLabelSelector", "GET", f"{POD}?metricLabelSelector=%3D%3D%3D", 400),
    ("labelSelector without a Kubernetes API", "GET",
     f"{BASE}/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dx", 400),
    ("no such metric", "GET", f"{BASE}/v1beta2/namespaces/ml/pods/infer-0/no_such_metric", 404),
    ("no sample for the pod", "GET", f"{BASE}/v1beta2/namespaces/ml/pods/infer-9/DCGM_FI_DEV_GPU_UTIL", 404),
    ("every namespace", "GET", f"{BASE}/v1beta2/namespaces/*/pods/infer-0/DCGM_FI_DEV_GPU_UTIL", 400),
    ("too many segments", "GET", f"{POD}/x", 400),
    ("discovery list", "GET", f"{BASE}/v1beta2", 200),
    ("discovery list, trailing slash", "GET", f"{BASE}/v1beta2/", 200),
    ("unknown version", "GET", f"{BASE}/v1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL", 404),
    ("POST", "POST", POD, 405),
]


@pytest.mark.parametrize(("method", "path", "status"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_answered_as_the_routed_app_answers(method: str, path: str, status: int) -> None:
    app = _app(StaticPrometheus())
    direct, routed = _send(app, method, path), _send(app, method, path, ROOT)
    assert direct.status_code == routed.status_code == status, direct.text
    assert direct.content == routed.content
    assert direct.headers == routed.headers
    assert direct.headers["content-type"] == "application/json"
    if method == "HEAD":
        assert direct.content == b"" and int(direct.headers["content-length"]) > 0
    elif status >= 400:
        body = orjson.loads(direct.content)
        assert body["kind"] == "Status" and body["code"] == status


def test_prometheus_down_is_the_same_503() -> None:
    prom = StaticPrometheus()
    prom.down = True
    app = _app(prom)
    direct, routed = _send(app, "GET", POD), _send(app, "GET", POD, ROOT)
    assert direct.status_code == routed.status_code == 503
    assert direct.content == routed.content
    assert "connection refused" in orjson.loads(direct.content)["message"]


def test_value_requests_are_answered_without_the_app_behind() -> None:
    prom = StaticPrometheus()
    app = _app(prom)
    provider = app.state.adapter.provider
    handed_on: list[str] = []

    async def behind(scope: dict[str, Any], receive: Any, send: Any) -> None:
        handed_on.append(scope["path"])
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    lane = MetricValueRequests(behind, provider)
    value = f"{BASE}/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL"
    response = _send(lane, "GET", value)
    assert response.status_code == 200 and handed_on == []
    assert [i["describedObject"]["name"] for i in orjson.loads(response.content)["items"]] == ["infer-0", "infer-1"]
    assert prom.queries > 0
    for path in (f"{BASE}/v1beta2", f"{BASE}/v1beta2/", f"{BASE}/v2/namespaces/ml/pods/a/m", "/apis",
                 "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/m"):
        assert _send(lane, "GET", path).status_code == 299
    assert _send(lane, "DELETE", value).status_code == 299
    assert _send(lane, "GET", value, ROOT).status_code == 299  # under a root path: the router strips it
    assert handed_on[-1] == ROOT + value


def test_the_app_answers_values_inside_its_auth_and_observe_middleware() -> None:
    """Innermost of the app's own middleware: requests reach it only authenticated, authorised and timed."""
    app = _app(StaticPrometheus())
    assert [m.cls for m in app.user_middleware][-1] is MetricValueRequests
