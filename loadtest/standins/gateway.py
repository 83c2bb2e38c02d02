"""A buffering inference gateway in front of the demo's replicas, shaped like the endpoint picker's flow control.

Requests to ``/infer`` and ``/v1/completions`` wait in one FIFO queue until an endpoint can take them: a ready
endpoint with fewer than ``endpoint_limit`` requests in flight (with none such, the pool is saturated). While no
endpoint is ready at all (the pool at zero replicas, or every replica still loading its model) every request waits.
A request that waited ``timeout_s`` is answered 503 ``request timed out in queue`` (what the endpoint picker answers
when a request's flow-control TTL expires); one whose client went away is dropped from the queue. Dispatch takes the
endpoint with the fewest requests in flight; the upstream answer is passed back as it came (502 when the endpoint
could not be reached).

``/metrics`` exports the endpoint picker's series under llm-d-router's names and labels (``llm_d_epp_*``, the names
``adapter/presets/gateway.py`` reads, from ``pkg/epp/metrics/llm_d_router_metrics.go``), so the ``inference-gateway``
preset serves them:

- ``llm_d_epp_flow_control_queue_size`` and ``..._queue_bytes`` (labels ``fairness_id``, ``priority``,
  ``inference_pool``, ``model_name``, ``target_model_name``): the requests (bytes of their bodies) waiting, one flow.
  The series appears with the flow's first request and stays, at 0 when nothing waits;
- ``llm_d_epp_flow_control_dispatch_cycle_duration_seconds`` (histogram, no labels): one observation per dispatch
  pass, from start-up on, so the preset knows flow control is on and reads an empty queue as 0;
- ``llm_d_epp_ready_endpoints{name=<pool>}``: ready endpoints, 0 included;
- ``llm_d_epp_average_running_requests`` and ``llm_d_epp_average_queue_size`` (``name``): the means over the ready
  endpoints of what their model servers report (given with :meth:`Gateway.set_endpoints`); with no endpoint ready
  the last values stay, as the endpoint picker stops updating them.

Not exported: the previous (Gateway API Inference Extension) names, pool saturation, KV-cache utilisation.

The figures the demo's summary reports are counted here: every request that arrived while no endpoint was ready
(``cold_waits``: how long each waited, until it was forwarded, timed out or its client left) and the first of each
such spell (``first_waits``: the first request after the pool went idle, which waits the longest).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from loadtest.standins.http1 import MAX_HEAD, Request, read_request, response

__all__ = ["QUEUE_METRIC", "QUEUE_TIMED_OUT", "RUNNING_METRIC", "Endpoint", "Gateway", "GatewayConfig"]

QUEUE_METRIC = "llm_d_epp_flow_control_queue_size"
RUNNING_METRIC = "llm_d_epp_average_running_requests"
QUEUE_TIMED_OUT = "request timed out in queue"
PROXIED_PATHS = ("/infer", "/v1/completions")
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                         "upgrade", "host", "content-length"})
_PICKED, _TIMED_OUT, _LEFT = "picked", "timed out", "left"
_CYCLE_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
_FLOW_LABELS = ("fairness_id", "priority", "inference_pool", "model_name", "target_model_name")


@dataclass(frozen=True)
class GatewayConfig:
    """``pool``: the InferencePool's name (the ``inference_pool`` and ``name`` label values); ``timeout_s``: how long
    a request may wait for an endpoint (the flow-control TTL); ``endpoint_limit``: requests in flight that saturate
    an endpoint."""

    pool: str = "infer"
    model: str = "demo-model"
    timeout_s: float = 60.0
    endpoint_limit: int = 4
    host: str = "127.0.0.1"
    port: int = 0
    upstream_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"the gateway timeout must be above 0 s, got {self.timeout_s:g}")
        if self.endpoint_limit < 1:
            raise ValueError(f"endpoint_limit must be at least 1, got {self.endpoint_limit}")


@dataclass(frozen=True)
class Endpoint:
    """A ready model server: ``url`` its base (``http://host:port``); ``running`` and ``waiting`` what it reports."""

    name: str
    url: str
    running: float = 0.0
    waiting: float = 0.0


@dataclass(eq=False)
class _Held:
    arrived: float
    size: int
    cold: bool  # arrived while no endpoint was ready
    first: bool  # ... and nobody was waiting: the first request after the pool went idle
    picked: asyncio.Future[Endpoint]


@dataclass
class GatewayCounts:
    """Requests by outcome, and the waits of those that found no endpoint ready (seconds)."""

    received: int = 0
    forwarded: int = 0
    timed_out: int = 0
    abandoned: int = 0
    upstream_errors: int = 0
    cold_waits: list[float] = field(default_factory=list)
    first_waits: list[float] = field(default_factory=list)


class Gateway:
    """Start with :meth:`start` (returns the port), stop with :meth:`close`; :meth:`set_endpoints` whenever the set of
    ready endpoints (or what they report) changes."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.counts = GatewayCounts()
        self._queue: deque[_Held] = deque()
        self._endpoints: dict[str, Endpoint] = {}
        self._in_flight: Counter[str] = Counter()
        self._averages: tuple[float, float] | None = None  # (running, waiting) over the last ready endpoints
        self._flow_seen = False
        self._turn = 0
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._client = httpx.AsyncClient(timeout=config.upstream_timeout_s, trust_env=False,
                                         limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        # Dispatch-cycle durations: counts per bucket (the last: above every bound), and their sum.
        self.cycles = [0] * (len(_CYCLE_BUCKETS) + 1)
        self.cycles_seconds = 0.0
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_EppMetrics(self))

    # -- state ----------------------------------------------------------------------------------------------------
    @property
    def queued(self) -> int:
        """Requests waiting for an endpoint."""
        return len(self._queue)

    @property
    def queued_bytes(self) -> int:
        return sum(item.size for item in self._queue)

    @property
    def ready(self) -> int:
        return len(self._endpoints)

    @property
    def in_flight(self) -> int:
        """Requests forwarded and not yet answered."""
        return sum(self._in_flight.values())

    @property
    def flow_seen(self) -> bool:
        """Whether the flow has had a request (its queue series exist from then on)."""
        return self._flow_seen

    @property
    def averages(self) -> tuple[float, float] | None:
        """(running, waiting) per endpoint, over the endpoints last ready; ``None`` before any was."""
        return self._averages

    def set_endpoints(self, endpoints: Sequence[Endpoint]) -> None:
        """The ready endpoints from now on (an endpoint left out takes no new request; those in flight finish)."""
        self._endpoints = {e.name: e for e in endpoints}
        if endpoints:
            self._averages = (sum(e.running for e in endpoints) / len(endpoints),
                              sum(e.waiting for e in endpoints) / len(endpoints))
        self._dispatch()

    async def wait_until(self, check: Callable[[], bool]) -> None:
        """Return once ``check()`` holds, re-checking whenever the gateway's state changes."""
        while not check():
            changed = self._changed
            await changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- serving --------------------------------------------------------------------------------------------------
    async def start(self) -> int:
        self._server = await asyncio.start_server(self._connection, self.config.host, self.config.port,
                                                  limit=MAX_HEAD)
        self._dispatch()  # the first dispatch cycle: flow control is on from start-up
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening, end every open connection (waiting requests get no answer) and the upstream client."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(set(self._connections))
        await self._client.aclose()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    return
                answer = await self._handle(request, reader)
                if answer is None:  # the client left while its request waited
                    return
                status, body, content_type, keep = answer
                keep = keep and request.keep_alive
                writer.write(response(status, body, keep, content_type))
                await writer.drain()
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            return
        except asyncio.CancelledError:
            # close() ended the connection. Not re-raised: asyncio's server reports a connection handler that ends
            # cancelled as an unhandled error (Python 3.11).
            return
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _handle(self, request: Request, reader: asyncio.StreamReader
                      ) -> tuple[int, bytes, str | None, bool] | None:
        path = request.path.split("?", 1)[0]
        if path in PROXIED_PATHS:
            return await self._proxy(request, reader)
        if path == "/metrics":
            return 200, generate_latest(self.registry), CONTENT_TYPE_LATEST, True
        if path == "/healthz":
            return 200, b"ok", None, True
        return 404, b'{"error": "not found"}', None, True

    async def _proxy(self, request: Request, reader: asyncio.StreamReader
                     ) -> tuple[int, bytes, str | None, bool] | None:
        loop = asyncio.get_running_loop()
        self.counts.received += 1
        cold = not self._endpoints
        item = _Held(loop.time(), len(request.body), cold, cold and not self._queue, loop.create_future())
        self._flow_seen = True
        self._queue.append(item)
        self._dispatch()
        outcome, keep = (_PICKED, True) if item.picked.done() else await self._wait(item, reader)
        if cold:
            waited = loop.time() - item.arrived
            self.counts.cold_waits.append(waited)
            if item.first:
                self.counts.first_waits.append(waited)
        if outcome == _LEFT:
            self.counts.abandoned += 1
            return None
        if outcome == _TIMED_OUT:
            self.counts.timed_out += 1
            return 503, json.dumps({"error": QUEUE_TIMED_OUT}).encode(), None, keep
        status, body, content_type = await self._forward(item.picked.result(), request)
        return status, body, content_type, keep

    async def _wait(self, item: _Held, reader: asyncio.StreamReader) -> tuple[str, bool]:
        """Wait for an endpoint, the timeout or the client leaving: (outcome, keep the connection). A request that
        timed out or whose client left is out of the queue when this returns, and holds no endpoint."""
        loop = asyncio.get_running_loop()
        gone = asyncio.ensure_future(reader.read(1))  # b"": the client closed its side
        try:
            remaining = item.arrived + self.config.timeout_s - loop.time()
            either: set[asyncio.Future[Any]] = {item.picked, gone}
            await asyncio.wait(either, timeout=max(remaining, 0.0), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not gone.done():
                gone.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await gone
        read = None  # nothing from the client while it waited
        if gone.done() and not gone.cancelled():
            read = b"" if gone.exception() is not None else gone.result()  # a reset connection: gone too
        if read == b"":
            if item.picked.done():  # picked at the moment its client left: give the endpoint back
                self._release(item.picked.result())
            else:
                self._queue.remove(item)
                self._notify()
            return _LEFT, False
        # A byte of a pipelined next request was read: answer this one, then close (no pipelining here).
        keep = read is None
        if item.picked.done():
            return _PICKED, keep
        self._queue.remove(item)
        self._notify()
        return _TIMED_OUT, keep

    async def _forward(self, endpoint: Endpoint, request: Request) -> tuple[int, bytes, str | None]:
        headers = [(k, v) for k, v in request.headers.items() if k not in _HOP_BY_HOP]
        try:
            upstream = await self._client.request(request.method, endpoint.url + request.path, headers=headers,
                                                  content=request.body)
            self.counts.forwarded += 1
            return upstream.status_code, upstream.content, upstream.headers.get("content-type")
        except httpx.HTTPError as exc:
            self.counts.upstream_errors += 1
            message = f"upstream {endpoint.name} failed: {type(exc).__name__}"
            return 502, json.dumps({"error": message}).encode(), None
        finally:
            self._release(endpoint)

    def _release(self, endpoint: Endpoint) -> None:
        self._in_flight[endpoint.name] -= 1
        if self._in_flight[endpoint.name] <= 0:
            del self._in_flight[endpoint.name]
        self._dispatch()

    # -- flow control ---------------------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """One dispatch cycle: hand waiting requests, oldest first, to endpoints that can take them."""
        started = time.perf_counter()
        while self._queue:
            endpoint = self._pick()
            if endpoint is None:
                break
            item = self._queue.popleft()
            self._in_flight[endpoint.name] += 1
            item.picked.set_result(endpoint)
        took = time.perf_counter() - started
        self.cycles[bisect.bisect_left(_CYCLE_BUCKETS, took)] += 1
        self.cycles_seconds += took
        self._notify()

    def _pick(self) -> Endpoint | None:
        """The unsaturated endpoint with the fewest requests in flight; ties taken in turn."""
        names = sorted(self._endpoints)
        if not names:
            return None
        self._turn = (self._turn + 1) % len(names)
        rotated = names[self._turn:] + names[:self._turn]
        free = [n for n in rotated if self._in_flight[n] < self.config.endpoint_limit]
        if not free:
            return None
        return self._endpoints[min(free, key=lambda n: self._in_flight[n])]


class _EppMetrics(Collector):
    """The gateway's state under the endpoint picker's names (see the module docstring)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def collect(self) -> Iterator[GaugeMetricFamily | HistogramMetricFamily]:
        g, cfg = self.gateway, self.gateway.config
        if g.flow_seen:
            flow = ["default", "0", cfg.pool, cfg.model, cfg.model]
            for name, help_text, value in (
                    ("llm_d_epp_flow_control_queue_size", "Requests held in flow control.", g.queued),
                    ("llm_d_epp_flow_control_queue_bytes", "Bytes of the requests held in flow control.",
                     g.queued_bytes)):
                family = GaugeMetricFamily(name, help_text, labels=list(_FLOW_LABELS))
                family.add_metric(flow, value)
                yield family
        cumulative, seen = [], 0
        for bound, count in zip((*(f"{b:g}" for b in _CYCLE_BUCKETS), "+Inf"), g.cycles, strict=True):
            seen += count
            cumulative.append((bound, seen))
        yield HistogramMetricFamily("llm_d_epp_flow_control_dispatch_cycle_duration_seconds",
                                    "Time one flow-control dispatch cycle took.", buckets=cumulative,
                                    sum_value=g.cycles_seconds)
        pool = [cfg.pool]
        ready = GaugeMetricFamily("llm_d_epp_ready_endpoints", "Ready endpoints of the pool.", labels=["name"])
        ready.add_metric(pool, g.ready)
        yield ready
        if g.averages is not None:
            running, waiting = g.averages
            for name, help_text, mean in (
                    (RUNNING_METRIC, "Mean running requests per endpoint in the pool.", running),
                    ("llm_d_epp_average_queue_size", "Mean model-server queue length in the pool.", waiting)):
                family = GaugeMetricFamily(name, help_text, labels=["name"])
                family.add_metric(pool, mean)
                yield family
