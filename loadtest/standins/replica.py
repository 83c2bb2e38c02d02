"""The inference stand-in: one replica owning one simulated GPU, behind a minimal HTTP/1.1 server (asyncio).

``GET``/``POST /infer`` holds the GPU for a fixed service time; requests take the GPU one at a time, in arrival
order, so an overloaded replica queues and its latency grows. ``POST /v1/completions`` does the same for an
OpenAI-compatible completion request, checked as a server would: a JSON object body naming the served ``model`` with
a ``prompt`` (400, 404 or 415 otherwise), and every header given with ``--require-header`` (401 without it). A
request whose client has gone away by the time the GPU is free is skipped, as inference servers abort disconnected
requests. ``GET /metrics`` exports what a vLLM server would (its names and labels, via prometheus_client as vLLM
does): requests running on the GPU and waiting for it, a KV-cache usage gauge that rises with the requests in
flight, and the finished requests by reason (served: ``stop``; skipped: ``abort``). ``GET /stats`` reports the GPU's
busy fraction over a sliding window (what the demo writes into the exporter's fake GPU state) and those counts,
``GET /healthz`` answers ``ok`` (503 while the model loads and once draining). A cold start (``cold_start_s``: the
model load) keeps ``/healthz`` and the inference paths at 503 for that long after start-up, as a pod whose readiness
probe fails until its server has loaded the model. SIGTERM stops accepting, lets queued requests finish (within a
grace period) and exits, as a pod does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from loadtest.standins.busy import BusyWindow
from loadtest.standins.http1 import MAX_HEAD, Request, read_request, response

__all__ = ["READY_PREFIX", "InferenceReplica", "ReplicaConfig", "VllmMetrics", "serve"]

READY_PREFIX = "listening on "


@dataclass(frozen=True)
class ReplicaConfig:
    name: str
    gpu: int
    service_s: float = 0.04
    busy_window_s: float = 2.0
    host: str = "127.0.0.1"
    port: int = 0
    grace_s: float = 10.0
    model: str = "demo-model"
    required_headers: tuple[tuple[str, str], ...] = ()  # (lower-case name, value)
    kv_cache_requests: int = 8  # requests in flight that fill the simulated KV cache
    cold_start_s: float = 0.0  # model load: not ready for this long after start-up


class InferenceReplica:
    def __init__(self, config: ReplicaConfig) -> None:
        self.config = config
        self.busy = BusyWindow(config.busy_window_s)
        self.served = 0
        self.abandoned = 0
        self.rejected = 0
        self.in_flight = 0  # queued for the GPU or on it
        self.draining = False
        self._loaded_at = 0.0
        self._gpu = asyncio.Lock()
        self._server: asyncio.Server | None = None
        self._idle: set[asyncio.StreamWriter] = set()
        self._active = 0
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(VllmMetrics(self))

    @property
    def running(self) -> int:
        """Requests on the GPU (the batch: one at a time here)."""
        return 1 if self.busy.busy else 0

    @property
    def waiting(self) -> int:
        """Requests queued for the GPU."""
        return self.in_flight - self.running

    @property
    def kv_cache_usage(self) -> float:
        return min(1.0, self.in_flight / self.config.kv_cache_requests)

    async def start(self) -> int:
        """Listen (the model load starts now); return the bound port."""
        self._loaded_at = time.monotonic() + self.config.cold_start_s
        self._server = await asyncio.start_server(self._connection, self.config.host, self.config.port,
                                                  limit=MAX_HEAD)
        return int(self._server.sockets[0].getsockname()[1])

    async def drain(self) -> None:
        """Stop accepting, close idle keep-alive connections, wait (up to the grace period) for requests."""
        self.draining = True
        if self._server is not None:
            self._server.close()
        for writer in list(self._idle):
            writer.close()
        deadline = time.monotonic() + self.config.grace_s
        while self._active and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    @property
    def loading(self) -> bool:
        """Still loading the model (the cold start)."""
        return time.monotonic() < self._loaded_at

    def stats(self) -> dict[str, Any]:
        return {"name": self.config.name, "gpu": self.config.gpu, "busy": round(self.busy.fraction(), 4),
                "window_s": self.config.busy_window_s, "served": self.served, "abandoned": self.abandoned,
                "rejected": self.rejected, "in_flight": self.in_flight, "running": self.running,
                "waiting": self.waiting, "loading": self.loading}

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not self.draining:
                self._idle.add(writer)
                try:
                    request = await read_request(reader)
                finally:
                    self._idle.discard(writer)
                if request is None:
                    return
                self._active += 1
                try:
                    answer = await self._handle(request, reader)
                    if answer is None:  # the client left while queued
                        return
                    status, body = answer
                    keep = request.keep_alive and not self.draining
                    writer.write(response(status, body, keep))
                    await writer.drain()
                finally:
                    self._active -= 1
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _handle(self, request: Request, reader: asyncio.StreamReader) -> tuple[int, bytes] | None:
        path = request.path.split("?", 1)[0]
        if path in ("/infer", "/v1/completions", "/healthz") and self.loading:
            return 503, b"loading the model"
        if path == "/infer":
            if request.method not in ("GET", "POST"):
                return 405, b'{"error": "use GET or POST"}'
            result = await self._infer(reader)
            return None if result is None else (200, json.dumps(result).encode())
        if path == "/v1/completions":
            problem = self._check_completion(request)
            if problem is not None:
                self.rejected += 1
                status, message = problem
                return status, json.dumps({"error": {"message": message, "code": status}}).encode()
            result = await self._infer(reader)
            return None if result is None else (200, json.dumps(self._completion(result)).encode())
        if path == "/healthz":
            return (503, b"draining") if self.draining else (200, b"ok")
        if path == "/stats":
            return 200, json.dumps(self.stats()).encode()
        if path == "/metrics":
            return 200, generate_latest(self.registry)
        return 404, b'{"error": "not found"}'

    def _check_completion(self, request: Request) -> tuple[int, str] | None:
        """Why a completion request is refused (status, message), or None when it is well-formed."""
        if request.method != "POST":
            return 405, "use POST"
        for name, value in self.config.required_headers:
            if request.headers.get(name) != value:
                return 401, f"missing or wrong header {name}"
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return 415, "Content-Type must be application/json"
        try:
            body = json.loads(request.body)
        except ValueError as exc:
            return 400, f"the body is not JSON: {exc}"
        if not isinstance(body, dict):
            return 400, "the body must be a JSON object"
        if body.get("model") != self.config.model:
            return 404, f"The model `{body.get('model')}` does not exist."
        if not isinstance(body.get("prompt"), str | list):
            return 400, "prompt: a string or a list is required"
        return None

    def _completion(self, result: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"cmpl-{self.config.name}-{self.served}", "object": "text_completion",
                "model": self.config.model, "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}, "replica": result}

    async def _infer(self, reader: asyncio.StreamReader) -> dict[str, Any] | None:
        queued = time.monotonic()
        self.in_flight += 1
        try:
            async with self._gpu:
                if reader.at_eof():
                    self.abandoned += 1
                    return None
                started = time.monotonic()
                self.busy.begin(started)
                try:
                    await asyncio.sleep(self.config.service_s)
                finally:
                    finished = time.monotonic()
                    self.busy.end(finished)
        finally:
            self.in_flight -= 1
        self.served += 1
        # started/finished: this process's monotonic clock, to see that GPU intervals never overlap
        return {"replica": self.config.name, "gpu": self.config.gpu, "queued_ms": round((started - queued) * 1e3, 2),
                "service_ms": round((finished - started) * 1e3, 2), "started": started, "finished": finished}


class VllmMetrics(Collector):
    """The replica's state under vLLM's metric names and labels (V1 engine: ``model_name``, ``engine``)."""

    def __init__(self, replica: InferenceReplica) -> None:
        self.replica = replica

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        r = self.replica
        labels = ["model_name", "engine"]
        values = [r.config.model, "0"]
        for name, help_text, value in (
                ("vllm:num_requests_running", "Number of requests in model execution batches.", r.running),
                ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", r.waiting),
                ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", r.kv_cache_usage)):
            family = GaugeMetricFamily(name, help_text, labels=labels)
            family.add_metric(values, value)
            yield family
        # One count per finished request, by finish reason, as the V1 engine's vllm:request_success_total
        # (vllm/v1/metrics/loggers.py): served ones stop, ones whose client had gone are aborted.
        finished = CounterMetricFamily("vllm:request_success", "Count of successfully processed requests.",
                                       labels=[*labels, "finished_reason"])
        finished.add_metric([*values, "stop"], r.served)
        finished.add_metric([*values, "abort"], r.abandoned)
        yield finished


async def serve(config: ReplicaConfig) -> None:
    """Run one replica until SIGTERM/SIGINT; print ``listening on HOST:PORT`` once it accepts connections."""
    replica = InferenceReplica(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    port = await replica.start()
    print(f"{READY_PREFIX}{config.host}:{port}", flush=True)
    await stop.wait()
    await replica.drain()
    print(f"{config.name}: served {replica.served}, skipped {replica.abandoned} abandoned", file=sys.stderr)
