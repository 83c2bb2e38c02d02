"""The demo's HPA loop talks to the metrics API as the HPA controller does, and scales on loadtest.hpa's decision."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from loadtest.hpa import Autoscaler, Behavior, HPASpec, MetricSpec, Pod, PodPhase, ScalingRules
from loadtest.hpa.loop import HpaLoop
from loadtest.hpa.metrics_api import CustomMetricsClient, MetricsApiError, choose_version

pytestmark = pytest.mark.unit

PODS_PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pods/%2A/DCGM_FI_DEV_GPU_UTIL"


def group(preferred: str, *versions: str) -> dict[str, Any]:
    return {"kind": "APIGroupList", "groups": [
        {"name": "apps", "versions": [{"version": "v1"}], "preferredVersion": {"version": "v1"}},
        {"name": "custom.metrics.k8s.io", "versions": [{"version": v} for v in versions],
         "preferredVersion": {"version": preferred}}]}


def test_version_choice_follows_the_controller() -> None:
    assert choose_version(group("v1beta2", "v1beta2", "v1beta1")) == "v1beta2"
    assert choose_version(group("v1beta1", "v1beta2", "v1beta1")) == "v1beta1"
    assert choose_version(group("v2alpha9", "v2alpha9", "v1beta1", "v1beta2")) == "v1beta1"
    with pytest.raises(MetricsApiError, match="no known available metric versions found"):
        choose_version(group("v9", "v9"))
    with pytest.raises(MetricsApiError, match=r"no custom metrics API \(custom.metrics.k8s.io\) registered"):
        choose_version({"groups": [{"name": "apps"}]})


def metric_list(values: dict[str, str]) -> dict[str, Any]:
    return {"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {}, "items": [
        {"describedObject": {"kind": "Pod", "namespace": "demo", "name": name, "apiVersion": "/v1"},
         "metric": {"name": "DCGM_FI_DEV_GPU_UTIL", "selector": None}, "timestamp": "2026-01-01T00:00:00Z",
         "value": value} for name, value in values.items()]}


class FakeApi:
    """A custom-metrics API server behind httpx.MockTransport; records every request line."""

    def __init__(self, answer: httpx.Response) -> None:
        self.answer = answer
        self.requests: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request.url.raw_path.decode())
        if request.url.path == "/apis":
            return httpx.Response(200, json=group("v1beta2", "v1beta2", "v1beta1"))
        return self.answer


class Deployment:
    def __init__(self, replicas: int) -> None:
        self.spec_replicas = replicas
        self.scaled_to: list[int] = []

    def pods(self) -> tuple[Pod, ...]:
        return tuple(Pod(f"infer-{i}", PodPhase.RUNNING) for i in range(self.spec_replicas))

    async def scale(self, replicas: int) -> None:
        self.scaled_to.append(replicas)
        self.spec_replicas = replicas


def make_loop(api: FakeApi, deployment: Deployment) -> tuple[HpaLoop, CustomMetricsClient]:
    spec = HPASpec(max_replicas=8, metrics=(MetricSpec.pods("DCGM_FI_DEV_GPU_UTIL", average_value="60"),))
    client = CustomMetricsClient("https://adapter.test", transport=httpx.MockTransport(api))
    loop = HpaLoop(Autoscaler(spec), client, deployment, namespace="demo", selector="app=infer", clock=lambda: 30.0)
    return loop, client


def test_one_sync_discovers_reads_the_pods_metric_and_scales() -> None:
    api = FakeApi(httpx.Response(200, json=metric_list({"infer-0": "90", "infer-1": "89500m"})))
    deployment = Deployment(2)

    async def scenario() -> None:
        loop, client = make_loop(api, deployment)
        record = await loop.sync()
        await client.aclose()
        # (90 + 89.5) / 2 = 89.75 against 60 -> ceil(1.496 * 2) = 3
        assert (record.current, record.desired, record.metric) == (2, 3, 89.75)
        assert record.reason == "pods metric DCGM_FI_DEV_GPU_UTIL above target"

    asyncio.run(scenario())
    assert api.requests == ["/apis", f"{PODS_PATH}?labelSelector=app%3Dinfer"]
    assert deployment.scaled_to == [3]


STATUS_404 = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound",
              "message": "the server could not find the metric DCGM_FI_DEV_GPU_UTIL for pods"}


@pytest.mark.parametrize(("answer", "detail"), [
    (httpx.Response(404, content=json.dumps(STATUS_404)),
     "unable to fetch metrics from custom metrics API: the server could not find the metric DCGM_FI_DEV_GPU_UTIL "
     "for pods"),
    (httpx.Response(200, json=metric_list({})), "no metrics returned from custom metrics API"),
    (httpx.Response(503, text="service unavailable"),
     "unable to fetch metrics from custom metrics API: the server responded with HTTP 503: service unavailable"),
])
def test_a_failed_fetch_keeps_the_scale_and_reads_like_the_controller(answer: httpx.Response, detail: str) -> None:
    deployment = Deployment(2)

    async def scenario() -> None:
        loop, client = make_loop(FakeApi(answer), deployment)
        record = await loop.sync()
        await client.aclose()
        assert (record.current, record.desired, record.metric) == (2, 2, None)
        assert record.error == ("invalid metrics (1 invalid out of 1), first error is: "
                                f"unable to get metric DCGM_FI_DEV_GPU_UTIL: {detail}")

    asyncio.run(scenario())
    assert deployment.scaled_to == []


def test_two_pods_metrics_are_read_and_the_larger_proposal_wins() -> None:
    """GPU utilisation saturates at 100 % (asks for 2), the queue does not (asks for 4): the HPA takes 4."""
    answers = {"DCGM_FI_DEV_GPU_UTIL": metric_list({"infer-0": "100"}),
               "vllm:num_requests_waiting": metric_list({"infer-0": "18"})}
    requests: list[str] = []

    def api(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.raw_path.decode())
        if request.url.path == "/apis":
            return httpx.Response(200, json=group("v1beta2", "v1beta2"))
        return httpx.Response(200, json=answers[request.url.path.rsplit("/", 1)[-1]])

    deployment = Deployment(1)
    spec = HPASpec(max_replicas=8, metrics=(MetricSpec.pods("DCGM_FI_DEV_GPU_UTIL", average_value="60"),
                                            MetricSpec.pods("vllm:num_requests_waiting", average_value="5")))

    async def scenario() -> None:
        client = CustomMetricsClient("https://adapter.test", transport=httpx.MockTransport(api))
        loop = HpaLoop(Autoscaler(spec), client, deployment, namespace="demo", selector="app=infer",
                       clock=lambda: 30.0)
        record = await loop.sync()
        await client.aclose()
        assert (record.current, record.desired) == (1, 4)
        assert record.reason == "pods metric vllm:num_requests_waiting above target"
        assert record.readings == {"DCGM_FI_DEV_GPU_UTIL": 100.0, "vllm:num_requests_waiting": 18.0}
        assert record.metric == 100.0  # the first metric's, as the plot's metric panel shows

    asyncio.run(scenario())
    assert requests == ["/apis", f"{PODS_PATH}?labelSelector=app%3Dinfer",
                        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pods/%2A/vllm%3Anum_requests_waiting"
                        "?labelSelector=app%3Dinfer"]
    assert deployment.scaled_to == [4]


# --- Object and External metrics, scale to zero -----------------------------------------------------------------

EXTERNAL_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/demo/queue"


def external_list(*values: str) -> dict[str, Any]:
    return {"kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1", "metadata": {},
            "items": [{"metricName": "queue", "metricLabels": {"inference_pool": "vllm"},
                       "timestamp": "2026-01-01T00:00:00Z", "value": value} for value in values]}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_external_metric_takes_the_workload_to_zero_and_wakes_it() -> None:
    """minReplicas 0 on the gateway's queue (External, AverageValue 10 per pod): an empty queue takes 2 replicas to
    0, 35 waiting wake 4 (ceil(35 / 10)), no discovery call since only external.metrics.k8s.io is read."""
    queue = iter([external_list("0"), external_list("20", "15")])
    requests: list[str] = []

    def api(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.raw_path.decode())
        return httpx.Response(200, json=next(queue))

    deployment, clock = Deployment(2), Clock()
    spec = HPASpec(max_replicas=8, min_replicas=0,
                   metrics=(MetricSpec.external("queue", average_value="10", selector="inference_pool=vllm"),),
                   behavior=Behavior(scale_down=ScalingRules(stabilization_window_seconds=0)))

    async def scenario() -> list[tuple[int, int, str, bool | None]]:
        client = CustomMetricsClient("https://adapter.test", transport=httpx.MockTransport(api))
        loop = HpaLoop(Autoscaler(spec), client, deployment, namespace="demo", selector="app=infer", clock=clock)
        out = []
        for _ in range(2):
            record = await loop.sync()
            assert loop.last_decision is not None
            out.append((record.current, record.desired, record.reason, loop.last_decision.scaled_to_zero))
            clock.now += 15.0
        await client.aclose()
        return out

    assert asyncio.run(scenario()) == [(2, 0, "All metrics below target", True),
                                       (0, 4, "external metric queue above target", False)]
    assert requests == [f"{EXTERNAL_PATH}?labelSelector=inference_pool%3Dvllm"] * 2
    assert deployment.scaled_to == [0, 4]


def test_an_object_metric_on_a_custom_resource_and_its_failures() -> None:
    """An Object metric on a CRD kind needs its resource; a response with other than one value fails the metric,
    and a failed metric leaves a workload the HPA holds at 0 where it is."""
    answers = iter([httpx.Response(200, json={"items": []}),
                    httpx.Response(200, json={"items": [{"value": "3"}]})])
    requests: list[str] = []

    def api(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.raw_path.decode())
        if request.url.path == "/apis":
            return httpx.Response(200, json=group("v1beta2", "v1beta2"))
        return next(answers)

    deployment, clock = Deployment(0), Clock()
    spec = HPASpec(max_replicas=8, min_replicas=0, metrics=(MetricSpec.object("queue", "Pool/vllm", value="1"),))

    async def scenario() -> list[tuple[int, str | None]]:
        client = CustomMetricsClient("https://adapter.test", transport=httpx.MockTransport(api))
        loop = HpaLoop(Autoscaler(spec, scaled_to_zero=True), client, deployment, namespace="demo",
                       selector="app=infer", clock=clock, object_resources={"Pool": "pools.example.com"})
        out = []
        for _ in range(2):
            record = await loop.sync()
            out.append((record.desired, record.error))
            clock.now += 15.0
        await client.aclose()
        return out

    assert asyncio.run(scenario()) == [
        (0, "invalid metrics (1 invalid out of 1), first error is: unable to get metric queue: unable to fetch "
            "metrics from custom metrics API: expected exactly one value for pools.example.com/vllm, got 0"),
        (3, None),
    ]
    assert requests[:2] == ["/apis", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pools.example.com/vllm/queue"]
    assert deployment.scaled_to == [3]


def test_a_paused_workload_is_left_alone() -> None:
    """Scaled to 0 by hand (no ScaledToZero condition): the loop reads the metric but never scales."""
    deployment = Deployment(0)
    spec = HPASpec(max_replicas=8, min_replicas=0, metrics=(MetricSpec.external("queue", average_value="10"),))

    async def scenario() -> None:
        answer = httpx.Response(200, json=external_list("90"))
        client = CustomMetricsClient("https://adapter.test", transport=httpx.MockTransport(lambda _: answer))
        loop = HpaLoop(Autoscaler(spec), client, deployment, namespace="demo", selector="app=infer", clock=Clock())
        record = await loop.sync()
        await client.aclose()
        assert (record.current, record.desired) == (0, 0)

    asyncio.run(scenario())
    assert deployment.scaled_to == []


@pytest.mark.parametrize(("metric", "error"), [
    (MetricSpec.resource("cpu", average_utilization=60), "a Resource metric comes from metrics.k8s.io"),
    (MetricSpec.object("queue", "Pool/vllm", value="1"), "no resource known for kind 'Pool'"),
])
def test_metrics_the_loop_cannot_read_are_refused_up_front(metric: MetricSpec, error: str) -> None:
    client = CustomMetricsClient("https://adapter.test")
    with pytest.raises(ValueError, match=error):
        HpaLoop(Autoscaler(HPASpec(max_replicas=4, metrics=(metric,))), client, Deployment(1), namespace="demo",
                selector="app=infer", clock=Clock())
    asyncio.run(client.aclose())
