"""Hostile clients and the client a server must keep serving meanwhile, for bench/hostile_clients.py.

Everything is asyncio on raw connections (no HTTP library): the attacks need bytes a library would not send, and
on a 2-core machine the attacking client's own CPU must stay small beside the server's.

- ``slow_heads``: connections that send a request line and then one header field every few seconds (the issue's
  12,000 TLS connections sending a header every 5 s).
- ``stalled_handshakes``: TCP connections that never start TLS.
- ``flood``: many kept-alive connections, each sending the same request again as soon as it is answered.
- ``oversized``: one request whose header line is 200 MB, sent as fast as the server reads it.
- ``Probe``: the HPA-shaped client, a request every second, on one kept-alive connection (the aggregator's) or a new
  one each time; a 429 is sent again after its ``Retry-After``, as client-go does for the HPA controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import statistics
import time
from dataclasses import dataclass, field

MIB = 1 << 20


@functools.cache
def client_tls() -> ssl.SSLContext:
    """One client context for every connection (building one loads the system's CA store: about 25 ms)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# The attacks connect from another loopback address than the probe, as a flooding pod's address differs from the
# API server's: the listeners count and queue per client address.
ATTACKER = "127.0.0.2"


async def open_conn(port: int, tls: bool, source: str | None = None) -> tuple[asyncio.StreamReader,
                                                                               asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, ssl=client_tls() if tls else None, limit=1 << 20,
                                         local_addr=(source, 0) if source else None)


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """One response's status and headers; its body read by Content-Length and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split()[1]), headers


def request_bytes(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: bench\r\nUser-Agent: hostile-bench\r\n\r\n".encode()


# -- attacks -------------------------------------------------------------------------------------------------------
@dataclass
class Held:
    """What an attack's connections did: how many opened, when the server closed each (seconds after it opened)."""

    opened: int = 0
    failed_to_open: int = 0
    open_now: int = 0
    most_open: int = 0
    closed_after_s: list[float] = field(default_factory=list)

    def opening(self) -> None:
        self.opened += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)

    def closed(self, seconds: float) -> None:
        self.open_now -= 1
        self.closed_after_s.append(seconds)


async def _until_closed(reader: asyncio.StreamReader, held: Held, started: float, stop: asyncio.Event) -> None:
    """Read (and drop) until the server ends the connection, or the attack stops."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while True:
            reading = asyncio.ensure_future(reader.read(1 << 16))
            done, _ = await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if reading not in done:
                reading.cancel()
                held.open_now -= 1  # still open when the attack stopped
                return
            try:
                data = reading.result()
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                data = b""
            if not data:
                held.closed(time.monotonic() - started)
                return
    finally:
        stopping.cancel()


async def slow_heads(port: int, tls: bool, count: int, stop: asyncio.Event, every_s: float = 5.0,
                     opening_at_once: int = 200) -> Held:
    """``count`` connections, each a request line and then one header field every ``every_s`` until ``stop``."""
    held = Held()
    gate = asyncio.Semaphore(opening_at_once)

    async def one() -> None:
        async with gate:
            if stop.is_set():
                return
            try:
                reader, writer = await open_conn(port, tls, ATTACKER)
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n")
            except OSError:
                held.failed_to_open += 1
                return
        started = time.monotonic()
        held.opening()

        async def trickle() -> None:
            with contextlib.suppress(OSError, RuntimeError):
                while not stop.is_set():
                    await asyncio.sleep(every_s)
                    writer.write(b"X-Slow: a\r\n")

        trickling = asyncio.ensure_future(trickle())
        await _until_closed(reader, held, started, stop)
        trickling.cancel()
        writer.transport.abort()

    await asyncio.gather(*(one() for _ in range(count)))
    return held


async def stalled_handshakes(port: int, count: int, stop: asyncio.Event) -> Held:
    """``count`` TCP connections to a TLS port that never send a ClientHello."""
    held = Held()

    async def one() -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER, 0))
        except OSError:
            held.failed_to_open += 1
            return
        held.opening()
        await _until_closed(reader, held, time.monotonic(), stop)
        writer.transport.abort()

    await asyncio.gather(*(one() for _ in range(count)))
    return held


@dataclass
class Flooded:
    answers: dict[int, int] = field(default_factory=dict)  # status -> count
    errors: dict[str, int] = field(default_factory=dict)  # exception type -> count

    def error(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1

    def count(self, status: int) -> None:
        self.answers[status] = self.answers.get(status, 0) + 1


async def flood(port: int, tls: bool, path: str, connections: int, stop: asyncio.Event) -> Flooded:
    """``connections`` kept-alive connections, each asking ``path`` again as soon as it is answered (a 429 too)."""
    out = Flooded()
    ask = request_bytes(path)

    async def one() -> None:
        while not stop.is_set():
            try:
                reader, writer = await open_conn(port, tls, ATTACKER)
                while not stop.is_set():
                    writer.write(ask)
                    status, headers = await read_answer(reader)
                    out.count(status)
                    if headers.get("connection") == "close":
                        break
                writer.transport.abort()
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                out.error(exc)
                await asyncio.sleep(0.1)

    await asyncio.gather(*(one() for _ in range(connections)))
    return out


@dataclass
class Oversized:
    sent_bytes: int = 0
    status: int | None = None
    seconds: float = 0.0


async def oversized(port: int, tls: bool, size: int = 200 * 1000 * 1000) -> Oversized:
    """One request with a ``size``-byte header line, sent as fast as the server takes it; what came back."""
    out = Oversized()
    started = time.monotonic()
    reader, writer = await open_conn(port, tls, ATTACKER)
    answer = asyncio.ensure_future(read_answer(reader))
    chunk = b"a" * (1 << 20)
    with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nX-Big: ")
        while out.sent_bytes < size and not answer.done():
            writer.write(chunk)
            await writer.drain()
            out.sent_bytes += len(chunk)
        writer.write(b"\r\n\r\n")
        await writer.drain()
    with contextlib.suppress(Exception):
        out.status = (await asyncio.wait_for(answer, 60))[0]
    out.seconds = time.monotonic() - started
    writer.transport.abort()
    return out


# -- the client that must keep being served ------------------------------------------------------------------------
@dataclass
class Probe:
    """A request every ``every_s`` from the moment ``run`` starts: on one kept-alive connection (``fresh=False``, the
    aggregator's) or on a new connection each time. A 429 is asked again after its Retry-After (client-go), and the
    whole wait is the request's latency; an answer other than ``ok`` or a broken connection is a failure."""

    port: int
    tls: bool
    path: str
    fresh: bool = False
    every_s: float = 1.0
    ok: int = 200
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (when, seconds)
    failures: list[tuple[float, str]] = field(default_factory=list)
    retries_429: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        ask = request_bytes(self.path)
        next_at = time.monotonic()
        while not stop.is_set():
            started = time.monotonic()
            try:
                while True:
                    if conn is None:
                        conn = await open_conn(self.port, self.tls)
                    conn[1].write(ask)
                    status, headers = await asyncio.wait_for(read_answer(conn[0]), 60)
                    if self.fresh or headers.get("connection") == "close":
                        conn[1].transport.abort()
                        conn = None
                    if status != 429:
                        break
                    self.retries_429 += 1
                    await asyncio.sleep(float(headers.get("retry-after", "1")))
                if status == self.ok:
                    self.latencies.append((started, time.monotonic() - started))
                else:
                    self.failures.append((started, f"status {status}"))
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError) as exc:
                self.failures.append((started, type(exc).__name__))
                if conn is not None:
                    conn[1].transport.abort()
                conn = None
            next_at += self.every_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
        if conn is not None:
            conn[1].transport.abort()

    def summary(self, since: float = 0.0, until: float = float("inf")) -> dict[str, float | int]:
        seconds = sorted(s for at, s in self.latencies if since <= at < until)
        failed = [f for f in self.failures if since <= f[0] < until]
        if not seconds:
            return {"requests": len(failed), "failed": len(failed)}
        return {"requests": len(seconds) + len(failed), "failed": len(failed),
                "p50_ms": round(statistics.median(seconds) * 1000, 1),
                "p99_ms": round(seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))] * 1000, 1),
                "max_ms": round(seconds[-1] * 1000, 1)}
