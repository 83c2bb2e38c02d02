"""Hostile clients of a gRPC port, and the KEDA-shaped client that must keep its answers meanwhile (for the tests
and ``bench/hostile_grpc.py``).

* :class:`StalledConnections`: TCP connections that never finish their handshake (nothing sent, or only part of the
  HTTP/2 preface), watched for the moment the server closes each.
* :func:`ping_flood`: a bare HTTP/2 client that sends PING frames and reads what the server answers (a GOAWAY).
* :func:`flood`: many concurrent calls over many connections (``grpc.aio``), counted by status code.
* :class:`KedaShaped`: KEDA's client, read from kedacore/keda ``pkg/scalers/external_scaler.go`` (commit 8b4f083ca):
  one pooled connection per scaler address and TLS settings (``getClientForConnectionPool``: ``grpc.NewClient``
  with a round-robin service config and no keepalive parameters, so no keepalive pings and no call deadline of its
  own), an ``IsActive`` on it every second (a ScaledObject's polling, here faster than KEDA's 30 s default), and one
  ``StreamIsActive`` opened again as ``runStreamIsActive`` does: 2 s after a clean end (io.EOF resets the back-off),
  the back-off doubling up to a minute after an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import socket
import statistics
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113 section 3.4
SETTINGS, PING, GOAWAY = 0x4, 0x6, 0x7
ENHANCE_YOUR_CALM = 0xB
SEPARATE_CONNECTION = ("grpc.use_local_subchannel_pool", 1)
"""gRPC shares one connection between channels to the same address with the same options; an attacker's channels
each get their own with this."""


def frame(kind: int, flags: int = 0, stream: int = 0, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host.strip("[]"), int(port)


# -- connections that stall ------------------------------------------------------------------------------------------
class StalledConnections:
    """``count`` connections to ``address`` that send ``first_bytes`` (default nothing) and then nothing more; a
    thread notes when the server closes each (its end of file or reset)."""

    def __init__(self, address: str, count: int, first_bytes: bytes = b"") -> None:
        self.opened_at: dict[int, float] = {}
        self.closed_after: list[float] = []  # seconds from open to the server's close, per closed connection
        self.refused = 0  # the dial itself failed
        self._sockets: dict[int, socket.socket] = {}
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stalled-connections", daemon=True)
        self._thread.start()
        where = host_port(address)
        for _ in range(count):
            try:
                sock = socket.create_connection(where, timeout=5)
                if first_bytes:
                    sock.sendall(first_bytes)
                sock.setblocking(False)
            except OSError:
                self.refused += 1
                continue
            with self._lock:
                self.opened_at[sock.fileno()] = time.monotonic()
                self._sockets[sock.fileno()] = sock
                self._selector.register(sock, selectors.EVENT_READ)

    def open(self) -> int:
        """Connections the server still holds."""
        with self._lock:
            return len(self._sockets)

    def _watch(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                registered = bool(self._sockets)
            if not registered:
                time.sleep(0.05)
                continue
            for key, _ in self._selector.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:  # closed by the server (what it sent before, e.g. a GOAWAY, is read and dropped)
                    self._forget(sock, closed_by_server=True)

    def _forget(self, sock: socket.socket, closed_by_server: bool) -> None:
        with self._lock:
            fd = sock.fileno()
            if fd not in self._sockets:
                return
            self._selector.unregister(sock)
            opened = self.opened_at.pop(fd)
            del self._sockets[fd]
            if closed_by_server:
                self.closed_after.append(time.monotonic() - opened)
        sock.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            sockets = list(self._sockets.values())
        for sock in sockets:
            self._forget(sock, closed_by_server=False)
        self._selector.close()


# -- pings ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Goaway:
    error_code: int
    debug: bytes
    after_pings: int


def ping_flood(address: str, pings: int, interval_s: float = 0.0, timeout_s: float = 10.0) -> Goaway | None:
    """Open an HTTP/2 connection (preface and SETTINGS, no call) and send ``pings`` PINGs ``interval_s`` apart;
    the GOAWAY the server sent before closing, or None when it answered them all and kept the connection."""
    sock = socket.create_connection(host_port(address), timeout=timeout_s)
    sent = 0
    try:
        sock.sendall(PREFACE + frame(SETTINGS))
        buffer = b""
        for sent in range(1, pings + 1):
            with contextlib.suppress(OSError):
                sock.sendall(frame(PING, payload=struct.pack(">Q", sent)))
            if interval_s:
                time.sleep(interval_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return None
            except OSError:
                chunk = b""
            buffer += chunk
            while len(buffer) >= 9:
                length = int.from_bytes(buffer[:3], "big")
                if len(buffer) < 9 + length:
                    break
                kind, flags, payload = buffer[3], buffer[4], buffer[9:9 + length]
                buffer = buffer[9 + length:]
                if kind == SETTINGS and not flags & 0x1:
                    with contextlib.suppress(OSError):
                        sock.sendall(frame(SETTINGS, flags=0x1))
                elif kind == GOAWAY:
                    return Goaway(int.from_bytes(payload[4:8], "big"), payload[8:], sent)
            if not chunk:
                return None
        return None
    finally:
        sock.close()


# -- many calls at once ------------------------------------------------------------------------------------------
async def flood(address: str, request: Callable[[int], pb.GetMetricsRequest], *, connections: int, callers: int,
                seconds: float, timeout_s: float = 30.0) -> dict[str, Any]:
    """``callers`` loops calling ``GetMetrics`` (caller i sends ``request(n)`` for its n-th call) over
    ``connections`` connections for ``seconds``: the count of each status code, and the answered calls' latency."""
    channels = [grpc.aio.insecure_channel(address, options=[SEPARATE_CONNECTION]) for _ in range(connections)]
    stubs = [pb_grpc.ExternalScalerStub(c) for c in channels]
    codes: Counter[str] = Counter()
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    sequence = iter(range(10**12))

    async def caller(i: int) -> None:
        stub = stubs[i % connections]
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                await stub.GetMetrics(request(next(sequence)), timeout=timeout_s)
            except grpc.aio.AioRpcError as exc:
                codes[exc.code().name] += 1
                if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                    await asyncio.sleep(0.01)  # a refused caller tries again at once, as a hostile one would
            else:
                codes["OK"] += 1
                latencies.append(time.perf_counter() - started)

    try:
        await asyncio.gather(*(caller(i) for i in range(callers)))
    finally:
        await asyncio.gather(*(c.close() for c in channels))
    return {"codes": dict(codes), "answered_p50_ms": _ms(latencies, 50), "answered_p99_ms": _ms(latencies, 99)}


def flood_in_process(address: str, request: Callable[[int], pb.GetMetricsRequest], **kw: Any) -> dict[str, Any]:
    """:func:`flood` on an event loop of its own (a benchmark runs it in a process of its own)."""
    return asyncio.run(flood(address, request, **kw))


def _ms(values: list[float], percentile: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0] * 1000
    return statistics.quantiles(values, n=100, method="inclusive")[percentile - 1] * 1000


# -- KEDA --------------------------------------------------------------------------------------------------------
@dataclass
class KedaFigures:
    latencies_s: list[float] = field(default_factory=list)  # answered IsActive calls
    failures: Counter[str] = field(default_factory=Counter)  # IsActive status codes other than OK
    failure_details: list[str] = field(default_factory=list)  # the first few
    stream_messages: int = 0
    stream_ends: Counter[str] = field(default_factory=Counter)  # how each StreamIsActive ended (OK: a clean end)
    stream_opened: int = 0

    def summary(self) -> dict[str, Any]:
        return {"calls": len(self.latencies_s) + sum(self.failures.values()), "failed": sum(self.failures.values()),
                "failures": dict(self.failures), "p50_ms": _ms(self.latencies_s, 50),
                "p99_ms": _ms(self.latencies_s, 99),
                "max_ms": max(self.latencies_s) * 1000 if self.latencies_s else None,
                "stream_opened": self.stream_opened, "stream_messages": self.stream_messages,
                "stream_ends": dict(self.stream_ends), "first_failures": self.failure_details[:5]}


class KedaShaped:
    """KEDA on one pooled channel (``stub``): an ``IsActive`` every ``interval_s`` (each waiting up to
    ``timeout_s``) and one ``StreamIsActive``, from ``start()`` until ``stop()``; threads, so a test or benchmark
    runs it beside what it measures."""

    def __init__(self, stub: pb_grpc.ExternalScalerStub, ref: pb.ScaledObjectRef, interval_s: float = 1.0,
                 timeout_s: float = 10.0, stream: bool = True) -> None:
        self.stub, self.ref, self.interval_s, self.timeout_s = stub, ref, interval_s, timeout_s
        self.figures = KedaFigures()
        self._stop = threading.Event()
        self._stream_call: Any = None
        self._threads = [threading.Thread(target=self._poll, name="keda-poll", daemon=True)]
        if stream:
            self._threads.append(threading.Thread(target=self._stream, name="keda-stream", daemon=True))

    def start(self) -> KedaShaped:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> KedaFigures:
        self._stop.set()
        if self._stream_call is not None:
            self._stream_call.cancel()
        for thread in self._threads:
            thread.join(self.timeout_s + 5)
        return self.figures

    def _poll(self) -> None:
        next_at = time.monotonic()
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self.interval_s
            started = time.perf_counter()
            try:
                self.stub.IsActive(self.ref, timeout=self.timeout_s)
            except grpc.RpcError as exc:
                self.figures.failures[exc.code().name] += 1
                if len(self.figures.failure_details) < 5:
                    self.figures.failure_details.append(f"{exc.code().name}: {exc.details()}")
            else:
                self.figures.latencies_s.append(time.perf_counter() - started)

    def _stream(self) -> None:
        """``runStreamIsActive``: run once; then wait the back-off, double it (at most a minute), run again; a
        clean end (status OK, io.EOF to KEDA) resets it to 2 s."""
        retry = 2.0
        while True:
            if self._stream_once():
                retry = 2.0
            if self._stop.wait(retry):
                return
            retry = min(retry * 2, 60.0)

    def _stream_once(self) -> bool:
        call = self.stub.StreamIsActive(self.ref)  # no deadline: KEDA's scaler context
        self._stream_call = call
        self.figures.stream_opened += 1
        try:
            for _ in call:
                self.figures.stream_messages += 1
            code = "OK"
        except grpc.RpcError as exc:
            code = exc.code().name
        if not self._stop.is_set():
            self.figures.stream_ends[code] += 1
        return code == "OK"
