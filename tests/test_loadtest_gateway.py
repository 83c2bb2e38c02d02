"""The demo's buffering gateway, in-process against upstream servers the test controls: requests held while no
endpoint is ready and forwarded once one is, the flow-control TTL (503), a client that leaves, saturated endpoints,
and its /metrics in the endpoint picker's names (those the inference-gateway preset reads). Every wait is on the
gateway's own state or on a response, never a sleep."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapter.presets.gateway import DISPATCH_CYCLES, GATEWAY_METRICS, READY
from loadtest.standins.gateway import QUEUE_TIMED_OUT, Endpoint, Gateway, GatewayConfig
from loadtest.standins.http1 import read_request, response

pytestmark = pytest.mark.unit

POOL = "infer"
FLOW = {"fairness_id": "default", "priority": "0", "inference_pool": POOL, "model_name": "demo-model",
        "target_model_name": "demo-model"}

T = TypeVar("T")


class Upstream:
    """A model server whose answers wait for :meth:`release`; it counts what it received."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.received: list[tuple[str, str, bytes, dict[str, str]]] = []
        self.open = asyncio.Event()
        self.arrived = asyncio.Event()
        self.server: asyncio.Server | None = None

    def release(self) -> None:
        self.open.set()

    async def wait_received(self, count: int) -> None:
        while len(self.received) < count:
            arrived = self.arrived
            await arrived.wait()

    async def start(self) -> Endpoint:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return Endpoint(self.name, f"http://127.0.0.1:{port}")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (request := await read_request(reader)) is not None:
                self.received.append((request.method, request.path, request.body, request.headers))
                self.arrived.set()
                self.arrived = asyncio.Event()
                await self.open.wait()
                writer.write(response(200, json.dumps({"replica": self.name}).encode(), request.keep_alive))
                await writer.drain()
        except asyncio.CancelledError:  # the test's loop ends with keep-alive connections open
            return
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


def run(scenario: Callable[[Gateway, httpx.AsyncClient], Awaitable[T]], **config: Any) -> T:
    async def main() -> T:
        gateway = Gateway(GatewayConfig(pool=POOL, **config))
        port = await gateway.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as client:
                return await scenario(gateway, client)
        finally:
            await gateway.close()

    return asyncio.run(main())


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(text: str, metric: str, **labels: str) -> float | None:
    return samples(text).get((metric, frozenset(labels.items())))


def test_requests_wait_for_a_ready_endpoint_and_are_forwarded_in_order() -> None:
    """At zero endpoints every request waits (the queue metric counts them); once an endpoint is ready they go to
    it oldest first, with their method, path, body and headers, and the answers come back as the upstream gave
    them. Each waited while no endpoint was ready: counted as a cold wait, the first as the first after idle."""

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        upstream = Upstream("infer-0")
        endpoint = await upstream.start()
        headers = {"Authorization": "Bearer t", "Content-Type": "application/json"}
        sent = [asyncio.create_task(client.post("/v1/completions", content=f'{{"n": {n}}}'.encode(), headers=headers))
                for n in range(3)]
        await gateway.wait_until(lambda: gateway.queued == 3)
        metrics = (await client.get("/metrics")).text
        assert value(metrics, "llm_d_epp_flow_control_queue_size", **FLOW) == 3
        assert value(metrics, "llm_d_epp_flow_control_queue_bytes", **FLOW) == 3 * len(b'{"n": 0}')
        assert value(metrics, "llm_d_epp_ready_endpoints", name=POOL) == 0
        assert not upstream.received

        upstream.release()
        gateway.set_endpoints([endpoint])
        answers = await asyncio.gather(*sent)
        assert [(a.status_code, a.json()) for a in answers] == [(200, {"replica": "infer-0"})] * 3
        assert [(m, p, b) for m, p, b, _ in upstream.received] == [
            ("POST", "/v1/completions", f'{{"n": {n}}}'.encode()) for n in range(3)]
        assert {h["authorization"] for *_, h in upstream.received} == {"Bearer t"}
        assert all("content-length" in h and h["host"].startswith("127.0.0.1:") for *_, h in upstream.received)

        metrics = (await client.get("/metrics")).text
        assert value(metrics, "llm_d_epp_flow_control_queue_size", **FLOW) == 0  # the flow's series stays, at 0
        assert value(metrics, "llm_d_epp_ready_endpoints", name=POOL) == 1
        counts = gateway.counts
        assert (counts.received, counts.forwarded, counts.timed_out, counts.abandoned) == (3, 3, 0, 0)
        assert len(counts.cold_waits) == 3 and len(counts.first_waits) == 1
        assert all(w > 0 for w in counts.cold_waits) and counts.first_waits[0] in counts.cold_waits

        # With an endpoint ready, a request is no cold wait.
        assert (await client.get("/infer")).status_code == 200
        assert len(gateway.counts.cold_waits) == 3
        await upstream.close()

    run(scenario)


def test_a_request_that_waits_past_the_timeout_is_answered_503_and_leaves_the_queue() -> None:
    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        answer = await client.get("/infer")
        assert answer.status_code == 503
        assert answer.json() == {"error": QUEUE_TIMED_OUT}
        assert gateway.queued == 0
        assert (gateway.counts.timed_out, gateway.counts.forwarded) == (1, 0)
        assert len(gateway.counts.cold_waits) == 1 and gateway.counts.cold_waits[0] >= 0.2
        metrics = (await client.get("/metrics")).text
        assert value(metrics, "llm_d_epp_flow_control_queue_size", **FLOW) == 0

    run(scenario, timeout_s=0.2)


def test_a_client_that_leaves_is_dropped_from_the_queue() -> None:
    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        waiting = asyncio.create_task(client.get("/infer"))
        await gateway.wait_until(lambda: gateway.queued == 1)
        waiting.cancel()  # closes its connection
        await gateway.wait_until(lambda: gateway.counts.abandoned == 1)
        assert gateway.queued == 0
        upstream = Upstream("infer-0")
        upstream.release()
        gateway.set_endpoints([await upstream.start()])
        assert (await client.get("/infer")).status_code == 200
        assert len(upstream.received) == 1  # the abandoned request was never forwarded
        await upstream.close()

    run(scenario)


def test_saturated_endpoints_hold_requests_and_the_least_loaded_endpoint_takes_the_next() -> None:
    """endpoint_limit 1: two endpoints take one request each, the third waits at the gateway although endpoints
    are ready (the pool is saturated), and goes to whichever endpoint answers first."""

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        first, second = Upstream("infer-0"), Upstream("infer-1")
        gateway.set_endpoints([await first.start(), await second.start()])
        sent = [asyncio.create_task(client.get("/infer")) for _ in range(3)]
        await gateway.wait_until(lambda: gateway.in_flight == 2 and gateway.queued == 1)
        await first.wait_received(1)
        await second.wait_received(1)
        second.release()
        await second.wait_received(2)
        assert len(first.received) == 1
        first.release()
        answers = [a.json()["replica"] for a in await asyncio.gather(*sent)]
        assert sorted(answers) == ["infer-0", "infer-1", "infer-1"]
        assert gateway.counts.cold_waits == []  # endpoints were ready: waiting for capacity is no cold start
        await first.close()
        await second.close()

    run(scenario, endpoint_limit=1)


def test_an_endpoint_taken_away_gets_no_new_request_and_a_failing_one_answers_502() -> None:
    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        gone = Upstream("infer-1")
        endpoint = await gone.start()
        await gone.close()
        gateway.set_endpoints([endpoint])
        answer = await client.get("/infer")
        assert answer.status_code == 502 and "infer-1" in answer.json()["error"]
        assert gateway.counts.upstream_errors == 1
        gateway.set_endpoints([])
        waiting = asyncio.create_task(client.get("/infer"))
        await gateway.wait_until(lambda: gateway.queued == 1)
        assert gateway.counts.upstream_errors == 1  # held, not sent to the endpoint taken away
        waiting.cancel()
        await gateway.wait_until(lambda: gateway.queued == 0)

    run(scenario)


def test_metrics_are_the_series_the_inference_gateway_preset_reads() -> None:
    """From start-up: the ready-endpoints gauge (0) and the dispatch-cycle histogram (flow control is on), so the
    preset reads the queue as 0 before any request; the pool averages appear with ready endpoints and keep their
    last values when none is left, as the endpoint picker's do."""

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        metrics = (await client.get("/metrics")).text
        names = {name for name, _ in samples(metrics)}
        assert value(metrics, READY[0], name=POOL) == 0
        assert DISPATCH_CYCLES[0] in names and value(metrics, DISPATCH_CYCLES[0]) >= 1
        assert "llm_d_epp_flow_control_queue_size" not in names  # no flow yet: no queue series
        assert "llm_d_epp_average_running_requests" not in names

        gateway.set_endpoints([Endpoint("infer-0", "http://127.0.0.1:1", running=0.5, waiting=2),
                               Endpoint("infer-1", "http://127.0.0.1:2", running=0.25, waiting=0)])
        metrics = (await client.get("/metrics")).text
        assert value(metrics, "llm_d_epp_ready_endpoints", name=POOL) == 2
        assert value(metrics, "llm_d_epp_average_running_requests", name=POOL) == 0.375
        assert value(metrics, "llm_d_epp_average_queue_size", name=POOL) == 1
        gateway.set_endpoints([])
        metrics = (await client.get("/metrics")).text
        assert value(metrics, "llm_d_epp_ready_endpoints", name=POOL) == 0
        assert value(metrics, "llm_d_epp_average_running_requests", name=POOL) == 0.375

        # Every series exported is one the preset reads (current names).
        preset = {name for m in GATEWAY_METRICS for name in m.names} | set(DISPATCH_CYCLES)
        exported = {s.name for family in text_string_to_metric_families(metrics) for s in family.samples}
        assert {name for name in exported if not name.startswith(DISPATCH_CYCLES[0].removesuffix("_count"))} <= preset
        assert (await client.get("/healthz")).text == "ok"
        assert (await client.get("/nope")).status_code == 404

    run(scenario)


@pytest.mark.parametrize(("config", "error"), [
    ({"timeout_s": 0}, "the gateway timeout must be above 0 s, got 0"),
    ({"endpoint_limit": 0}, "endpoint_limit must be at least 1, got 0"),
])
def test_bad_settings_are_refused(config: dict[str, float], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        GatewayConfig(**config)  # type: ignore[arg-type]
