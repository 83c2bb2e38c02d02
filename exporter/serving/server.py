"""A small HTTP server: ``/metrics`` serves the collector's latest snapshot, ``/health`` its health.

Served by uvicorn through the project's guarded listener (listener/), on an event loop in a thread of its own: the
port is reachable from the node's network (and Prometheus' scrape is what the node's autoscaling depends on), so a
client gets what Go's ``net/http`` gives dcgm-exporter and no more: ``--web-read-timeout`` bounds the TLS handshake,
each request's head and the wait between requests (Go's ``ReadHeaderTimeout`` and ``IdleTimeout`` both fall back
to ``ReadTimeout``), ``--web-write-timeout`` the answer, heads are limited to Go's 1 MiB, and the connections
without a request in progress are capped (``--web-max-waiting-connections``). Requests in flight are capped too
(``--web-max-requests-inflight``: 429 with ``Retry-After`` beyond); an answer is ready-made bytes, so only basic
authentication (bcrypt, about 50 ms when its cache misses) takes time, and it runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.exposition import CONTENT_TYPE, Family
from exporter.serving.collector import Snapshot
from exporter.serving.web_config import WebGuard
from listener.limits import Limits
from listener.protocol import Guard
from listener.serving import GuardedServer, uvicorn_config

INDEX = b"""<html><head><title>GPU Exporter</title></head><body><h1>GPU Exporter</h1>
<p><a href="/metrics">Metrics</a> &middot; <a href="/health">Health</a></p></body></html>
"""
_TEXT = "text/plain; charset=utf-8"
# Without a read or write timeout (0), Go waits forever; here the adapter's defaults (kube-apiserver's) stand in.
_NO_READ_TIMEOUT = Limits()


class AddressError(ValueError):
    pass


def parse_address(address: str) -> tuple[str, int]:
    """dcgm-exporter's listen syntax: ``:9400`` (all interfaces), ``host:9400``, ``[::]:9400``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise AddressError(f"invalid listen address {address!r} (expected [host]:port, e.g. :9400)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


@dataclass(frozen=True)
class Serving:
    """How requests are served: dcgm-exporter's ``--web-config-file`` and ``--web-read/write-timeout``, and the
    caps on waiting connections and requests in flight."""

    web: WebGuard = field(default_factory=WebGuard)
    read_timeout_s: float | None = 10.0
    write_timeout_s: float | None = 30.0
    max_waiting_connections: int = 256
    max_requests_inflight: int = 32

    def limits(self) -> Limits:
        """The listener's limits, derived from the flags as Go's net/http derives them."""
        read = self.read_timeout_s or None
        return Limits(read_header_timeout_s=read or _NO_READ_TIMEOUT.read_header_timeout_s,
                      idle_timeout_s=read or _NO_READ_TIMEOUT.idle_timeout_s,
                      write_timeout_s=self.write_timeout_s or _NO_READ_TIMEOUT.write_timeout_s,
                      max_waiting_connections=self.max_waiting_connections)


def listening_socket(address: str) -> socket.socket:
    """The listening socket for ``address``; ``:9400`` is every interface, dual-stack where IPv6 exists."""
    host, port = parse_address(address)
    family = socket.AF_INET6 if (":" in host or (host == "" and socket.has_ipv6)) else socket.AF_INET
    if host == "":
        host = "::" if family == socket.AF_INET6 else "0.0.0.0"
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class MetricsApp:
    """The ASGI app: ``/metrics``, ``/health``, ``/``; 404 elsewhere, 405 for methods other than GET and HEAD."""

    def __init__(self, snapshot: Callable[[], Snapshot], health: Callable[[], tuple[bool, str]],
                 on_gzip: Callable[[], None], serving: Serving) -> None:
        self.snapshot, self.health, self.on_gzip = snapshot, health, on_gzip
        self.serving = serving
        self.in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable[..., Awaitable[None]]) -> None:
        if scope["type"] != "http":
            return
        if self.in_flight >= self.serving.max_requests_inflight:
            await _answer(send, 429, _TEXT, b"429 Too Many Requests\n", self.serving.web,
                          extra=[(b"retry-after", b"1")])
            return
        self.in_flight += 1
        try:
            await self._serve(scope, send)
        finally:
            self.in_flight -= 1

    async def _serve(self, scope: dict[str, Any], send: Callable[..., Awaitable[None]]) -> None:
        web = self.serving.web
        headers = {name: value for name, value in scope["headers"]}
        if scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, _TEXT, b"405 Method Not Allowed\n", web, extra=[(b"allow", b"GET, HEAD")])
            return
        refused = await self._refusal(headers.get(b"authorization"))
        if refused is not None:  # exporter-toolkit's answers: http.Error with the status text
            text = {401: b"401 Unauthorized\n", 429: b"429 Too Many Requests\n"}[refused]
            await _answer(send, refused, _TEXT, text, web,
                          extra=[(b"www-authenticate", b"Basic")] if refused == 401 else [])
            return
        head = scope["method"] == "HEAD"
        path = scope["path"]
        if path == "/metrics":
            snap = self.snapshot()
            gzip_ok = b"gzip" in headers.get(b"accept-encoding", b"")
            if gzip_ok:
                self.on_gzip()
            body = snap.gzipped() if gzip_ok else snap.body
            await _answer(send, 200, CONTENT_TYPE, body, web, head=head,
                          extra=[(b"content-encoding", b"gzip")] if gzip_ok else [])
        elif path == "/health":
            ok, reason = self.health()
            await _answer(send, 200 if ok else 503, _TEXT, (reason + "\n").encode(), web, head=head)
        elif path == "/":
            await _answer(send, 200, "text/html; charset=utf-8", INDEX, web, head=head)
        else:
            await _answer(send, 404, _TEXT, b"404 page not found\n", web, head=head)

    async def _refusal(self, authorization: bytes | None) -> int | None:
        web = self.serving.web
        if not web.checks_requests:
            return None
        text = authorization.decode("latin-1") if authorization is not None else None
        # bcrypt takes tens of milliseconds on a cache miss: a worker thread, not the loop every client shares.
        return await asyncio.get_running_loop().run_in_executor(None, web.refusal, text)


async def _answer(send: Callable[..., Awaitable[None]], status: int, content_type: str, body: bytes, web: WebGuard,
                  *, head: bool = False, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
               *web.header_pairs, *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


class MetricsServer:
    """The listening socket is bound here (a bad address or a port in use is an error now); ``start`` serves it
    from a thread, ``stop`` ends that."""

    def __init__(self, address: str, snapshot: Callable[[], Snapshot], health: Callable[[], tuple[bool, str]],
                 on_gzip: Callable[[], None] = lambda: None, serving: Serving | None = None) -> None:
        serving = serving or Serving()
        web = serving.web
        self.guard = Guard(serving.limits(), tls=web.current_tls if web.tls_enabled else None,
                           name="exporter.listener")
        self._sock = listening_socket(address)
        app = MetricsApp(snapshot, health, on_gzip, serving)
        self._server = GuardedServer(uvicorn_config(app, "", self.port, self.guard, lifespan="off"), self.guard)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def self_metrics(self) -> list[Family]:
        """The listener's own series: connections by state, and those it closed by reason (docs/exporter.md)."""
        guard = self.guard
        waiting = len(guard.room) - guard.handshaking
        connections = Family("gpu_exporter_connections", "gauge",
                             "Connections to /metrics by state: handshake, waiting (no request in progress), busy.")
        for state, count in (("handshake", guard.handshaking), ("waiting", waiting), ("busy", guard.open - waiting)):
            connections.add((("state", state),), max(0, count))
        closed = Family("gpu_exporter_connections_closed_total", "counter",
                        "Connections the exporter closed, by reason (header_timeout, idle_timeout, write_timeout, "
                        "handshake_timeout, evicted, refused_413/414/431, handshake_failed).")
        for reason, count in sorted(guard.closed.items()):
            closed.add((("reason", reason),), count)
        return [connections, closed]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, name="http",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self._sock.close()
