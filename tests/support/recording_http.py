"""An HTTP/1.1 server on loopback, in a thread of its own, that records what arrived: each request's method, path,
headers, body, connection, and when it arrived and was answered. For load-generator tests that run the generator in
the test's own thread (its event loop) while this one answers.

Every answer waits ``delay_s`` (a service time, so that concurrency is visible). Paths with a meaning:
``/fail`` answers 503; ``/redirect`` answers 302 to ``/target``; ``/login`` sets a cookie ``session=N`` (N counts
the logins); ``/cached`` says it may be cached for a minute (``Cache-Control: max-age=60``); ``/etag`` says
``ETag: "v1"`` and ``Cache-Control: no-cache`` and answers 304 to ``If-None-Match: "v1"``; anything else answers
200 ``ok``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field

from loadtest.standins.http1 import read_request

__all__ = ["Arrival", "RecordingServer"]


@dataclass(frozen=True)
class Arrival:
    at: float  # time.monotonic() when the request had arrived
    done: float  # when its answer was written
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    connection: int


@dataclass
class RecordingServer:
    delay_s: float = 0.0
    arrivals: list[Arrival] = field(default_factory=list)
    connections: int = 0
    logins: int = 0

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    def __enter__(self) -> RecordingServer:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop)
        self._server = started.result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def seen(self, path: str) -> list[Arrival]:
        return [a for a in self.arrivals if a.path.split("?")[0] == path]

    def in_flight(self, start: float, end: float) -> int:
        """The most requests in flight at once between ``start`` and ``end`` (monotonic times)."""
        events = sorted([(a.at, 1) for a in self.arrivals] + [(a.done, -1) for a in self.arrivals])
        now = most = 0
        for at, change in events:
            now += change
            if start <= at <= end:
                most = max(most, now)
        return most

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        try:
            while True:
                try:
                    request = await read_request(reader)
                except (ValueError, ConnectionError):
                    return
                if request is None:
                    return
                arrived = time.monotonic()
                await asyncio.sleep(self.delay_s)
                writer.write(self._answer(request.path, request.keep_alive, request.headers))
                await writer.drain()
                self.arrivals.append(Arrival(arrived, time.monotonic(), request.method, request.path,
                                             request.headers, request.body, connection))
                if not request.keep_alive:
                    return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _answer(self, path: str, keep_alive: bool, headers: dict[str, str]) -> bytes:
        status, extra = "200 OK", ""
        route = path.split("?")[0]
        if route == "/cached":
            extra = "Cache-Control: max-age=60\r\n"
        elif route == "/etag":
            extra = 'ETag: "v1"\r\nCache-Control: no-cache\r\n'
            if headers.get("if-none-match") == '"v1"':
                status = "304 Not Modified"
        elif route == "/fail":
            status = "503 Service Unavailable"
        elif route == "/redirect":
            status, extra = "302 Found", "Location: /target\r\n"
        elif route == "/login":
            self.logins += 1
            extra = f"Set-Cookie: session={self.logins}; Path=/\r\n"
        body = "" if status.startswith("304") else "ok"  # a 304 has no body
        return (f"HTTP/1.1 {status}\r\n{extra}Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n{body}").encode()
