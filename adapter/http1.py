"""A keep-alive HTTP/1.1 transport for httpx on asyncio protocols, with httptools (llhttp) reading the answers.

Why it exists: every query the HPA waits for passes through the Prometheus client in series. With httpx's own
transport (httpcore's pool, h11's pure-Python HTTP/1.1 state machine, anyio's locks and cancel scopes) the client
spent 668 us of CPU per one-object instant query on the 2-core bench machine, with this one 255 us, and ~160 us
when the client hands it the request's bytes (``exchange``) instead of an ``httpx.Request`` (bench/adapter_steps.py;
README "Performance", round 3, fourth and fifth passes). httpx stays the interface for everything else: the
transport takes an ``httpx.Request`` and returns an ``httpx.Response``, and its errors are httpx's exceptions on
either path.

What it does: http and https (the given ``SSLContext``, SNI and hostname check from the URL's host); per origin, a
last-in-first-out list of idle connections kept ``keepalive_expiry`` seconds; at most ``max_connections`` requests
at once; answers framed by Content-Length, chunked, or read until the server closes; 1xx answers skipped;
``Connection: close`` and HTTP/1.0 honoured. A request whose kept-alive connection turns out closed before any byte
of the answer came back is sent again on another connection (the server may close an idle connection just as
it is reused; a new connection's failure is final), so use it for read-only APIs such as Prometheus'.

What it does not do, by design: proxies (the Prometheus client keeps httpx's transport when one is configured),
HTTP/2, HEAD and CONNECT, upgrades, and request bodies that are not in memory (``httpx.Request(content=bytes)``).
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from typing import NamedTuple, cast

import httptools
import httpx

Origin = tuple[str, str, int]  # scheme, host, port


class Answer(NamedTuple):
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    keep_alive: bool


_TOKEN_PATTERN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # an RFC 9110 token: a method or a header name
_TOKEN = re.compile(_TOKEN_PATTERN.encode())
_FIELD_VALUE = re.compile(rb"[^\x00\r\n]*")  # what request_bytes lets through: nothing that ends a line
_TARGET = re.compile(rb"[\x21-\x7e]+")
_NAME = re.compile(_TOKEN_PATTERN)
_PRINTABLE_VALUE = re.compile(r"[\t\x20-\x7e]*")


def header_name_ok(name: str) -> bool:
    """A header name as configured (``--prometheus-header``): an RFC 9110 token."""
    return _NAME.fullmatch(name) is not None


def header_value_ok(value: str) -> bool:
    """A configured header value or token this project sends: printable ASCII, spaces and tabs (no line break, no
    control character, nothing that needs an encoding)."""
    return _PRINTABLE_VALUE.fullmatch(value) is not None


def request_bytes(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """The request as sent, head and body; a method, target or header that could split the request is refused."""
    if not _TOKEN.fullmatch(method):
        raise ValueError(f"method {method!r} is not an HTTP token")
    if not _TARGET.fullmatch(target):
        raise ValueError("the request target holds a space or control character")
    lines = [b"%s %s HTTP/1.1" % (method, target)]
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"header name {name!r} is not an HTTP token")
        if not _FIELD_VALUE.fullmatch(value):  # the value itself is not shown: it may be a credential
            raise ValueError(f"the value of header {name.decode('latin-1')} holds a line break or NUL")
        lines.append(b"%s: %s" % (name, value))
    lines.append(b"\r\n")
    return b"\r\n".join(lines) + body


def origin_of(url: httpx.URL) -> Origin:
    """Scheme, host and port to connect to; an international host name as IDNA, as DNS and SNI want it."""
    return url.scheme, url.raw_host.decode("ascii"), url.port or (443 if url.scheme == "https" else 80)


class ConnectionClosed(Exception):
    """The server closed the connection before the answer was complete."""

    def __init__(self, message: str, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered  # whether any byte of the answer had arrived


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection, one exchange at a time; httptools calls the ``on_*`` methods while parsing."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._answer: asyncio.Future[Answer] | None = None
        self.lost = False
        self.exchanges = 0
        self.idle_since = 0.0
        self._begin()

    def _begin(self) -> None:
        self._received = False
        self._headers_done = False
        self._framed = False  # Content-Length or chunked: the answer ends without the close
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self._fail(ConnectionClosed("the server sent bytes while no request was waiting", answered=True))
            return
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("the server switched protocols, which was not asked for"))
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed HTTP answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._answer is None or self._answer.done():
            return
        if self._headers_done and not self._framed:  # (an answer with no body, 204 or 304, completed at its head)
            self._finish(keep_alive=False)  # an answer that ends with the connection
            return
        reason = f": {exc}" if exc else ""
        self._answer.set_exception(ConnectionClosed(
            f"the server closed the connection before the answer was complete{reason}", answered=self._received))

    # -- httptools callbacks --
    def on_message_begin(self) -> None:
        if self._answer is None or self._answer.done():  # a second answer to one request: never reuse this
            self.lost = True

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-length" or (lowered == b"transfer-encoding" and b"chunked" in value.lower()):
            self._framed = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # informational (100 Continue, 103 Early Hints): the real answer follows
            self._begin()
            self._received = True
            return
        self._finish(keep_alive=self._parser.should_keep_alive())

    # -- used by the transport --
    async def exchange(self, data: bytes) -> Answer:
        assert self._transport is not None
        self.exchanges += 1
        if self.lost:
            raise ConnectionClosed("the server had closed the connection", answered=False)
        self._begin()
        self._answer = asyncio.get_running_loop().create_future()
        self._transport.write(data)
        return await self._answer

    def close(self) -> None:
        self.lost = True
        if self._transport is not None:
            self._transport.close()

    def _finish(self, keep_alive: bool) -> None:
        assert self._answer is not None
        answer = Answer(self._parser.get_status_code(), self._reason, self._headers, b"".join(self._body), keep_alive)
        waiting, self._answer = self._answer, None
        self._begin()  # an idle connection holds no answer: a series list is megabytes
        waiting.set_result(answer)

    def _fail(self, error: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(error)
        self.close()


class Http1Transport(httpx.AsyncBaseTransport):
    """httpx transport: HTTP/1.1 keep-alive connections on asyncio, answers parsed by httptools (see the module)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None, *, max_connections: int = 64,
                 max_keepalive_connections: int = 32, keepalive_expiry: float = 5.0) -> None:
        self._ssl = ssl_context
        self._slots = asyncio.Semaphore(max_connections)
        self._max_idle = max_keepalive_connections
        self._expiry = keepalive_expiry
        self._idle: dict[Origin, list[_Connection]] = {}
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"this transport speaks http and https, not {url.scheme!r}",
                                            request=request)
        if request.method in ("HEAD", "CONNECT"):
            raise httpx.LocalProtocolError(f"this transport does not send {request.method}", request=request)
        try:
            body = request.content
        except httpx.RequestNotRead:
            raise httpx.LocalProtocolError("this transport needs the request body in memory", request=request) from None
        try:
            data = request_bytes(request.method.encode("ascii"), url.raw_path, request.headers.raw, body)
        except ValueError as exc:
            raise httpx.LocalProtocolError(str(exc), request=request) from None
        timeout = (request.extensions.get("timeout") or {}).get("connect")
        answer = await self.exchange(origin_of(url), data, connect_timeout=timeout, request=request)
        return httpx.Response(answer.status, headers=answer.headers, stream=httpx.ByteStream(answer.body),
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": answer.reason},
                              request=request)

    async def exchange(self, origin: Origin, data: bytes, *, connect_timeout: float | None = None,
                       request: httpx.Request | None = None) -> Answer:
        """Send ``data``, a whole GET or POST request as ``request_bytes`` writes it (not HEAD: the parser cannot
        know that its answer has no body), to ``origin`` and return the answer: the pool, limits and resend of
        ``handle_async_request`` without building httpx's request and response objects (about 100 us of CPU per
        query). Errors are httpx's; ``request``, if given, is attached to them."""
        if self._closed:
            raise httpx.LocalProtocolError("the transport is closed", request=request)
        async with self._slots:
            return await self._send(origin, data, connect_timeout, request)

    async def _send(self, origin: Origin, data: bytes, connect_timeout: float | None,
                    request: httpx.Request | None) -> Answer:
        while True:
            connection = self._reuse(origin) or await self._connect(origin, connect_timeout, request)
            reused = connection.exchanges > 0
            done = False
            try:
                answer = await connection.exchange(data)
                done = True
            except ConnectionClosed as exc:
                if reused and not exc.answered:
                    continue  # closed while idle, unseen until now: again on another connection
                raise httpx.RemoteProtocolError(str(exc), request=request) from None
            except httpx.HTTPError as exc:
                if request is not None:
                    exc.request = request
                raise
            finally:
                if not done:  # failed or cancelled (a timeout) mid-exchange: the connection's state is unknown
                    connection.close()
            self._release(origin, connection, answer.keep_alive)
            return answer

    def _reuse(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if not connection.lost and now - connection.idle_since < self._expiry:
                return connection
            connection.close()
        return None

    async def _connect(self, origin: Origin, timeout: float | None, request: httpx.Request | None) -> _Connection:
        scheme, host, port = origin
        tls = (self._ssl or ssl.create_default_context()) if scheme == "https" else None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    _Connection, host, port, ssl=tls, server_hostname=host if tls else None)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out", request=request) from None
        except OSError as exc:  # ssl's errors, a failed certificate check included, are OSErrors
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}", request=request) from None
        return connection

    def _release(self, origin: Origin, connection: _Connection, keep_alive: bool) -> None:
        idle = self._idle.setdefault(origin, [])
        if keep_alive and not connection.lost and not self._closed and len(idle) < self._max_idle:
            connection.idle_since = time.monotonic()
            idle.append(connection)
        else:
            connection.close()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
