"""adapter/http1.py: the keep-alive HTTP/1.1 transport the Prometheus client sends its queries through.

Each case runs a scripted HTTP server on loopback (asyncio streams, bytes written by hand so that malformed and cut
answers are possible) and the transport on the adapter's event loop (uvloop) and on asyncio's own.
"""

from __future__ import annotations

import asyncio
import gzip
import re
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import httpx
import pytest
import uvloop

from adapter.http1 import Http1Transport, request_bytes
from tests.support.certs import issue, make_ca
from tests.support.scripted_http import Request, Server, answer

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\": true}"


LOOPS = {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    def runner(main: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as loop_runner:
            return loop_runner.run(main)

    return runner


async def serving(server: Server, use: Callable[[str, Http1Transport], Awaitable[Any]],
                  ssl_server: ssl.SSLContext | None = None, transport: Http1Transport | None = None,
                  host: str = "127.0.0.1") -> Any:
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=ssl_server)
    port = listening.sockets[0].getsockname()[1]
    transport = transport or Http1Transport()
    try:
        return await use(f"{'https' if ssl_server else 'http'}://{host}:{port}", transport)
    finally:
        await transport.aclose()
        listening.close()


async def get(transport: Http1Transport, url: str, **kw: Any) -> tuple[int, bytes]:
    response = await transport.handle_async_request(httpx.Request(kw.pop("method", "GET"), url, **kw))
    try:
        return response.status_code, await response.aread()
    finally:
        await response.aclose()


async def outcomes(transport: Http1Transport, url: str, times: int, pause: float = 0.0) -> list[Any]:
    """``times`` requests one after another: (status, body) or the exception's class name and message."""
    results: list[Any] = []
    for _ in range(times):
        try:
            results.append(await get(transport, url + "/api/v1/query"))
        except httpx.HTTPError as exc:
            results.append((type(exc).__name__, str(exc)))
        await asyncio.sleep(pause)
    return results


def sequence(server: Server, times: int, pause: float = 0.05, **kw: Any) -> Callable[[Any], Any]:
    """What the run fixture runs: ``times`` requests through a new transport (``kw`` for it), ``pause`` apart."""
    return lambda run: run(serving(server, lambda url, t: outcomes(t, url, times, pause),
                                   transport=Http1Transport(**kw) if kw else None))


# -- the request on the wire (pure) ---------------------------------------------------------------------------------
def test_request_bytes_is_the_head_then_the_body() -> None:
    data = request_bytes(b"POST", b"/api/v1/query?extra_label=x", [(b"Host", b"p:9090"), (b"Content-Length", b"7")],
                         b"query=1")
    assert data == (b"POST /api/v1/query?extra_label=x HTTP/1.1\r\nHost: p:9090\r\nContent-Length: 7\r\n\r\n"
                    b"query=1")


@pytest.mark.parametrize(("method", "target", "headers", "message"), [
    (b"GET", b"/", [(b"Authorization", b"Bearer a\r\nX-Evil: 1")], "value of header Authorization holds a line"),
    (b"GET", b"/", [(b"X-Token", b"a\nb")], "value of header X-Token"),
    (b"GET", b"/", [(b"X-Nul", b"a\x00b")], "value of header X-Nul"),
    (b"GET", b"/", [(b"Bad Name", b"v")], "header name b'Bad Name' is not an HTTP token"),
    (b"GET", b"/", [(b"X:Y", b"v")], "header name"),
    (b"GET", b"/a b", [], "request target holds a space"),
    (b"GET", b"/a\r\nHost: x", [], "request target"),
    (b"GE T", b"/", [], "method b'GE T' is not an HTTP token"),
])
def test_request_bytes_refuses_what_could_split_the_request(method: bytes, target: bytes,
                                                            headers: list[tuple[bytes, bytes]], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        request_bytes(method, target, headers, b"")


def test_a_header_value_is_never_shown_in_the_error() -> None:
    with pytest.raises(ValueError) as caught:
        request_bytes(b"GET", b"/", [(b"Authorization", b"Bearer s3cret\r\n")], b"")
    assert "s3cret" not in str(caught.value)


# -- exchanges --------------------------------------------------------------------------------------------------------
def test_requests_reuse_one_connection_and_arrive_as_sent(run: Callable[..., Any]) -> None:
    server = Server(answer(OK))

    async def use(url: str, transport: Http1Transport) -> list[Any]:
        results = [await get(transport, url + "/api/v1/query?x=1", method="POST", content=b"query=up",
                             headers={"Content-Type": "application/x-www-form-urlencoded"}) for _ in range(3)]
        results.append(await get(transport, url + "/api/v1/targets"))
        return results

    results = run(serving(server, use))
    assert results == [(200, b'{"a": true}')] * 4
    assert server.connections == 1 and [r.number for r in server.requests] == [1, 2, 3, 4]
    first = server.requests[0]
    assert first.head.startswith(b"POST /api/v1/query?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nContent-Length: 8\r\n" in first.head and first.body == b"query=up"
    assert server.requests[3].head.startswith(b"GET /api/v1/targets HTTP/1.1\r\n")


@pytest.mark.parametrize(("name", "data", "body"), [
    ("chunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n7\r\n: true}\r\n0\r\n\r\n",
     b'{"a": true}'),
    ("100 Continue first", b"HTTP/1.1 100 Continue\r\n\r\n" + OK, b'{"a": true}'),
    ("gzip", b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (
        len(gzip.compress(b'{"a": true}')), gzip.compress(b'{"a": true}')), b'{"a": true}'),
    ("empty", b"HTTP/1.1 204 No Content\r\n\r\n", b""),
    ("in pieces", OK, b'{"a": true}'),
])
def test_answers_however_framed_arrive_whole(run: Callable[..., Any], name: str, data: bytes, body: bytes) -> None:
    server = Server(answer(data), byte_by_byte=name == "in pieces")
    results = run(serving(server, lambda url, t: outcomes(t, url, 1)))
    assert results == [(204 if name == "empty" else 200, body)]


def test_an_answer_read_until_the_close_is_whole_and_the_connection_not_reused(run: Callable[..., Any]) -> None:
    server = Server(answer(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\": true}", close=True))
    assert sequence(server, 2)(run) == [(200, b'{"a": true}')] * 2
    assert server.connections == 2


@pytest.mark.parametrize(("data", "connections"), [
    (OK.replace(b"OK\r\n", b"OK\r\nConnection: close\r\n", 1), 3),  # told, and the server closes
    (OK.replace(b"HTTP/1.1", b"HTTP/1.0"), 3),  # HTTP/1.0 without keep-alive
    (OK.replace(b"HTTP/1.1", b"HTTP/1.0").replace(b"OK\r\n", b"OK\r\nConnection: keep-alive\r\n", 1), 1),
])
def test_connection_close_and_http_1_0_are_honoured(run: Callable[..., Any], data: bytes, connections: int) -> None:
    server = Server(answer(data, close=connections > 1))
    assert sequence(server, 3, pause=0)(run) == [(200, b'{"a": true}')] * 3
    assert server.connections == connections


def test_a_connection_closed_while_idle_is_not_used_again(run: Callable[..., Any]) -> None:
    server = Server(answer(OK, close=True))  # silently, without Connection: close
    assert sequence(server, 3)(run) == [(200, b'{"a": true}')] * 3
    assert server.connections == 3


def test_a_reused_connection_found_closed_sends_the_request_again_once(run: Callable[..., Any]) -> None:
    """The server closes an idle connection as the next request goes out on it (no pause to notice): the request
    goes once more on a new connection, and nothing fails."""
    server = Server(lambda r: (OK, False) if r.number == 1 else (None, True))
    assert sequence(server, 3, pause=0)(run) == [(200, b'{"a": true}')] * 3
    assert [(r.connection, r.number) for r in server.requests] == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1)]


def test_a_new_connection_closed_without_an_answer_fails_and_is_not_sent_again(run: Callable[..., Any]) -> None:
    server = Server(answer(b"", close=True))
    results = sequence(server, 2, pause=0)(run)
    assert results == [("RemoteProtocolError",
                        "the server closed the connection before the answer was complete")] * 2
    assert server.connections == 2 and len(server.requests) == 2


@pytest.mark.parametrize(("data", "message"), [
    (OK[: len(OK) - 4], "the server closed the connection before the answer was complete"),  # cut in the body
    (OK[:20], "the server closed the connection before the answer was complete"),  # cut in the head
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed HTTP answer"),
    (b"SMTP ready\r\n\r\n", "malformed HTTP answer"),
    (b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n", "switched protocols"),
])
def test_a_broken_answer_is_a_protocol_error_and_its_connection_is_dropped(run: Callable[..., Any], data: bytes,
                                                                           message: str) -> None:
    broken = [True]

    def script(request: Request) -> tuple[bytes | None, bool]:
        if broken[0]:
            broken[0] = False
            return data, True
        return OK, False

    server = Server(script)
    results = sequence(server, 2)(run)
    assert results[0][0] == "RemoteProtocolError" and message in results[0][1]
    assert results[1] == (200, b'{"a": true}') and server.connections == 2


def test_bytes_the_server_sends_while_idle_drop_the_connection(run: Callable[..., Any]) -> None:
    server = Server(answer(OK + b"HTTP/1.1 200 OK\r\n"))  # one answer and the start of another nobody asked for
    assert sequence(server, 2)(run) == [(200, b'{"a": true}')] * 2
    assert server.connections == 2


def test_a_request_given_up_mid_exchange_closes_its_connection(run: Callable[..., Any]) -> None:
    server = Server(lambda r: (None, False) if r.connection == 1 else (OK, False))  # first connection: no answer

    async def use(url: str, transport: Http1Transport) -> tuple[list[Any], int]:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await get(transport, url)
        return [await get(transport, url), await get(transport, url)], server.eofs

    results, closed_by_client = run(serving(server, use))
    assert results == [(200, b'{"a": true}')] * 2 and server.connections == 2
    assert closed_by_client == 1  # the first connection, as soon as its request was given up


def test_idle_connections_expire_and_the_number_kept_is_bounded(run: Callable[..., Any]) -> None:
    server = Server(answer(OK))

    async def use(url: str, transport: Http1Transport) -> tuple[int, int]:
        server.hold = asyncio.Event()
        three = [asyncio.create_task(get(transport, url)) for _ in range(3)]
        while len(server.requests) < 3:
            await asyncio.sleep(0.01)
        server.hold.set()
        assert [await t for t in three] == [(200, b'{"a": true}')] * 3
        server.hold = None
        await asyncio.sleep(0.05)
        kept = server.open_now  # 3 opened, 1 kept idle
        await asyncio.sleep(0.3)  # past keepalive_expiry: the next request opens a new connection
        await get(transport, url)
        return kept, server.connections

    transport = Http1Transport(max_keepalive_connections=1, keepalive_expiry=0.2)
    assert run(serving(server, use, transport=transport)) == (1, 4)


def test_requests_beyond_max_connections_wait_for_one(run: Callable[..., Any]) -> None:
    server = Server(answer(OK))

    async def use(url: str, transport: Http1Transport) -> list[Any]:
        return await asyncio.gather(*(get(transport, url) for _ in range(6)))

    results = run(serving(server, use, transport=Http1Transport(max_connections=2)))
    assert results == [(200, b'{"a": true}')] * 6
    assert server.most_open == 2 and server.connections == 2


def _bytes_held(value: Any, seen: set[int] | None = None) -> int:
    """Bytes of answer data reachable from ``value`` through containers, futures and plain objects' attributes."""
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, type):
        return 0
    seen.add(id(value))
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, asyncio.Future):
        return _bytes_held(value.result(), seen) if value.done() and not value.cancelled() else 0
    if isinstance(value, dict):
        return sum(_bytes_held(v, seen) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_bytes_held(v, seen) for v in value)
    if hasattr(value, "__dict__") and type(value).__module__.startswith(("adapter.", "asyncio")):
        return _bytes_held(vars(value), seen)
    return 0


def test_an_idle_connection_holds_nothing_of_the_last_answer(run: Callable[..., Any]) -> None:
    """A relist's series answers are megabytes: once read, nothing of them stays with the pooled connection."""
    body = b"x" * 4_000_000
    server = Server(answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)))

    async def use(url: str, transport: Http1Transport) -> tuple[int, int]:
        status, received = await get(transport, url)
        assert status == 200 and len(received) == len(body)
        del received
        return server.open_now, _bytes_held(transport)  # the connection is kept open, idle

    idle, held = run(serving(server, use))
    assert idle == 1 and held < 4096


def test_aclose_closes_the_idle_connections(run: Callable[..., Any]) -> None:
    server = Server(answer(OK))

    async def use(url: str, transport: Http1Transport) -> Any:
        await get(transport, url)
        await transport.aclose()
        await asyncio.sleep(0.05)
        with pytest.raises(httpx.LocalProtocolError, match="closed"):
            await get(transport, url)
        return server.eofs

    assert run(serving(server, use)) == 1


# -- refused before anything is sent ------------------------------------------------------------------------------
@pytest.mark.parametrize(("request_args", "error", "message"), [
    ({"method": "GET", "headers": {"Authorization": "Bearer a\nb"}}, httpx.LocalProtocolError,
     "value of header Authorization holds a line break"),
    ({"method": "HEAD"}, httpx.LocalProtocolError, "does not send HEAD"),
    ({"method": "POST", "content": iter([b"streamed"])}, httpx.LocalProtocolError, "request body in memory"),
])
def test_requests_it_cannot_send_are_refused_with_nothing_sent(run: Callable[..., Any], request_args: dict[str, Any],
                                                               error: type[Exception], message: str) -> None:
    server = Server(answer(OK))

    async def use(url: str, transport: Http1Transport) -> None:
        args = dict(request_args)
        request = httpx.Request(args.pop("method"), url, **args)
        with pytest.raises(error, match=message) as caught:
            await transport.handle_async_request(request)
        assert caught.value.request is request  # type: ignore[attr-defined]

    run(serving(server, use))
    assert server.connections == 0


def test_other_schemes_are_unsupported(run: Callable[..., Any]) -> None:
    with pytest.raises(httpx.UnsupportedProtocol, match="'ftp'"):
        run(get(Http1Transport(), "ftp://127.0.0.1/x"))


def test_a_refused_connection_is_a_connect_error(run: Callable[..., Any]) -> None:
    async def refused() -> None:
        listening = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        listening.close()
        await listening.wait_closed()
        await get(Http1Transport(), f"http://127.0.0.1:{port}/")

    with pytest.raises(httpx.ConnectError, match=r"cannot connect to 127\.0\.0\.1:"):
        run(refused())


def test_the_connect_timeout_of_a_request_covers_the_tls_handshake(run: Callable[..., Any]) -> None:
    async def silent() -> None:  # accepts the connection, never answers the handshake
        listening = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        request = httpx.Request("GET", f"https://127.0.0.1:{port}/", extensions={"timeout": {"connect": 0.2}})
        try:
            await Http1Transport().handle_async_request(request)
        finally:
            listening.close()

    with pytest.raises(httpx.ConnectTimeout, match=r"connecting to 127\.0\.0\.1:\d+ timed out"):
        run(silent())


# -- TLS --------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for a certificate naming ``localhost`` only, and a client context trusting its CA."""
    directory = tmp_path_factory.mktemp("tls")
    ca = make_ca("test-ca")
    cert, key = issue(ca, "prometheus", client=False, server_names=("localhost",)).write(directory, "server")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    return server, client


def test_https_checks_the_certificate_against_the_host_in_the_url(
        run: Callable[..., Any], tls_pair: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ctx, client_ctx = tls_pair
    server = Server(answer(OK))

    async def use(url: str, transport: Http1Transport) -> Any:
        return await outcomes(transport, url, 2, pause=0)

    names: list[str | None] = []
    server_ctx.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment]
    named = run(serving(server, use, ssl_server=server_ctx, transport=Http1Transport(client_ctx), host="localhost"))
    assert named == [(200, b'{"a": true}')] * 2 and server.connections == 1
    assert names == ["localhost"]  # SNI: the name in the URL
    by_address = run(serving(server, use, ssl_server=server_ctx, transport=Http1Transport(client_ctx)))
    assert by_address[0][0] == "ConnectError" and "127.0.0.1" in by_address[0][1]
    assert "CERTIFICATE_VERIFY_FAILED" in by_address[0][1] or "mismatch" in by_address[0][1]
