"""The custom-metrics routes of the app: each request's status and shape, the same at the root and under a root path
(a proxy in front of the adapter that strips a prefix)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from adapter.presets.gpu import gpu_presets
from adapter.prometheus.client import PrometheusConfig, PrometheusUnavailable, Sample
from adapter.prometheus.discovery import Discovery
from adapter.provider.engine import Engine
from adapter.rules import build_catalogue
from adapter.server.app import AdapterState, create_app

pytestmark = pytest.mark.unit

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
    engine = Engine(prom, lambda: discovery.catalogue)  # type: ignore[arg-type]
    return create_app(AdapterState(prom, discovery, engine, serve_external=lambda: False),  # type: ignore[arg-type]
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
def test_answered_alike_at_the_root_and_under_a_root_path(method: str, path: str, status: int) -> None:
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
