"""httpcore's network backend on asyncio's own streams, for the Prometheus client's connections.

httpx's default backend goes through anyio: each read and write of a query opens a cancel scope, asks sniffio
which event loop runs and passes through anyio's stream wrappers. The adapter only runs on asyncio and bounds
every Prometheus call with one ``asyncio.timeout``, so its connections use asyncio streams directly; httpcore's
pool, HTTP/1.1 and TLS handling stay as they are (README Performance, third pass: with this and nothing else
changed on the query path, the client's CPU per query in bench/adapter_steps.py went from 1,046 / 711 / 944 us to
891 / 583 / 775 us for the Object, 10-pod and 100-pod queries). Errors surface as httpcore's exceptions, which
httpx turns into its own, as with its default backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Iterable, Iterator
from typing import Any, TypeVar

import httpcore

_T = TypeVar("_T")
_READ_LIMIT = 2**20  # bytes the stream buffers before pausing the socket; httpcore reads 64 KiB at a time


@contextlib.contextmanager
def _mapped(error: type[Exception], timeout_error: type[Exception]) -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:
        raise timeout_error(str(exc) or "timed out") from exc
    except (OSError, EOFError) as exc:  # ssl.SSLError is an OSError
        raise error(str(exc) or type(exc).__name__) from exc


async def _within(timeout: float | None, operation: Awaitable[_T]) -> _T:
    if timeout is None:
        return await operation
    async with asyncio.timeout(timeout):
        return await operation


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _mapped(httpcore.ReadError, httpcore.ReadTimeout):
            return await _within(timeout, self._reader.read(max_bytes))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        with _mapped(httpcore.WriteError, httpcore.WriteTimeout):
            self._writer.write(buffer)
            await _within(timeout, self._writer.drain())

    async def aclose(self) -> None:
        self._writer.close()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectError, httpcore.ConnectTimeout):
            await _within(timeout, self._writer.start_tls(ssl_context, server_hostname=server_hostname))
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # httpcore's test for a pooled connection the server has closed meanwhile
            return self._reader.at_eof() or self._writer.is_closing()
        name = _EXTRA_INFO.get(info)
        return self._writer.get_extra_info(name) if name else None


# httpcore's names for what it asks a stream -> asyncio's transport names for them
_EXTRA_INFO = {"ssl_object": "ssl_object", "client_addr": "sockname", "server_addr": "peername", "socket": "socket"}


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectError, httpcore.ConnectTimeout):
            reader, writer = await _within(timeout, asyncio.open_connection(
                host, port, local_addr=(local_address, 0) if local_address else None, limit=_READ_LIMIT))
        _set_options(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectError, httpcore.ConnectTimeout):
            reader, writer = await _within(timeout, asyncio.open_unix_connection(path, limit=_READ_LIMIT))
        _set_options(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _set_options(writer: asyncio.StreamWriter, options: Iterable[Any] | None) -> None:
    sock: socket.socket | None = writer.get_extra_info("socket")
    if sock is not None:
        for option in options or ():
            sock.setsockopt(*option)


def use_asyncio_streams(pool: Any) -> bool:
    """Give ``pool`` (an ``httpcore.AsyncConnectionPool``, as httpx's transport holds it) this backend; False when
    it is not such a pool (a proxy's, a test's mock), which then keeps its own."""
    if type(pool) is not httpcore.AsyncConnectionPool or not hasattr(pool, "_network_backend"):
        return False
    pool._network_backend = AsyncioBackend()
    return True
