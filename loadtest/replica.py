"""The inference stand-in: one replica owning one simulated GPU, behind a minimal HTTP/1.1 server (asyncio).

``GET``/``POST /infer`` holds the GPU for a fixed service time; requests take the GPU one at a time, in arrival
order, so an overloaded replica queues and its latency grows. ``POST /v1/completions`` does the same for an
OpenAI-compatible completion request, checked as a server would: a JSON object body naming the served ``model``
with a ``prompt`` (400, 404 or 415 otherwise), and every header given with ``--require-header`` (401 without it).
A request whose client has gone away by the time the GPU is free is skipped, as inference servers abort
disconnected requests. ``GET /stats`` reports the GPU's busy fraction over a sliding window (what the demo writes
into the exporter's fake GPU state), ``GET /healthz`` answers ``ok`` (503 once draining). SIGTERM stops
accepting, lets queued requests finish (within a grace period) and exits, as a pod does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from loadtest.busy import BusyWindow

__all__ = ["READY_PREFIX", "InferenceReplica", "ReplicaConfig", "serve"]

READY_PREFIX = "listening on "
_MAX_HEAD = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            415: "Unsupported Media Type", 503: "Service Unavailable"}
_MAX_BODY = 1024 * 1024


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


@dataclass
class _Request:
    method: str
    path: str
    keep_alive: bool
    headers: dict[str, str]  # names lower-cased
    body: bytes


class InferenceReplica:
    def __init__(self, config: ReplicaConfig) -> None:
        self.config = config
        self.busy = BusyWindow(config.busy_window_s)
        self.served = 0
        self.abandoned = 0
        self.rejected = 0
        self.waiting = 0
        self.draining = False
        self._gpu = asyncio.Lock()
        self._server: asyncio.Server | None = None
        self._idle: set[asyncio.StreamWriter] = set()
        self._active = 0

    async def start(self) -> int:
        """Listen; return the bound port."""
        self._server = await asyncio.start_server(self._connection, self.config.host, self.config.port,
                                                  limit=_MAX_HEAD)
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

    def stats(self) -> dict[str, Any]:
        return {"name": self.config.name, "gpu": self.config.gpu, "busy": round(self.busy.fraction(), 4),
                "window_s": self.config.busy_window_s, "served": self.served, "abandoned": self.abandoned,
                "rejected": self.rejected, "waiting": self.waiting}

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not self.draining:
                self._idle.add(writer)
                try:
                    request = await _read_request(reader)
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
                    writer.write(_response(status, body, keep))
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

    async def _handle(self, request: _Request, reader: asyncio.StreamReader) -> tuple[int, bytes] | None:
        path = request.path.split("?", 1)[0]
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
        return 404, b'{"error": "not found"}'

    def _check_completion(self, request: _Request) -> tuple[int, str] | None:
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
        self.waiting += 1
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
            self.waiting -= 1
        self.served += 1
        # started/finished: this process's monotonic clock, to see that GPU intervals never overlap
        return {"replica": self.config.name, "gpu": self.config.gpu, "queued_ms": round((started - queued) * 1e3, 2),
                "service_ms": round((finished - started) * 1e3, 2), "started": started, "finished": finished}


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """One request (head and body); ``None`` when the client closed the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        raise ValueError("chunked request bodies are not supported")
    length = int(headers.get("content-length", "0") or 0)
    if length > _MAX_BODY:
        raise ValueError("request body too large")
    body = await reader.readexactly(length) if length else b""
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return _Request(method, target, keep_alive, headers, body)


def _response(status: int, body: bytes, keep_alive: bool) -> bytes:
    kind = "application/json" if body.startswith(b"{") else "text/plain; charset=utf-8"
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
    return head.encode("latin-1") + body


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
