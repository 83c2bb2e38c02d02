"""An HTTP server on loopback answering each request with what a handler returns, for the Prometheus client's tests.

The handler takes the request as an ``httpx.Request`` (method, the URL as the client addressed it, headers, body)
and returns an ``httpx.Response``, whose bytes are sent as they are (a body the test gzipped stays gzipped), or an
aiohttp ``web.Response`` for bytes httpx would not build (a body whose encoding is broken).
``resolver`` sends every host name to this server, so a client configured for ``http://prometheus.test:9090``
reaches it over a real connection.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp.abc
import httpx
from aiohttp import web

Handler = Callable[[httpx.Request], Awaitable[httpx.Response | web.StreamResponse]]


class _ToServer(aiohttp.abc.AbstractResolver):
    def __init__(self, port: int) -> None:
        self.port = port

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        return [{"hostname": host, "host": "127.0.0.1", "port": self.port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


class HandlerServer:
    """``async with HandlerServer(handler) as server``: ``server.resolver`` for the client under test."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self._runner: web.ServerRunner | None = None
        self.resolver: aiohttp.abc.AbstractResolver | None = None

    async def __aenter__(self) -> HandlerServer:
        # A handler still running when the test is done (one that hangs on purpose) is cancelled, not awaited.
        self._runner = web.ServerRunner(web.Server(self._answer, handler_cancellation=True), shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        _, port = self._runner.addresses[0][:2]
        self.resolver = _ToServer(port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _answer(self, request: web.BaseRequest) -> web.StreamResponse:
        asked = httpx.Request(request.method, str(request.url), headers=list(request.raw_headers),
                              content=await request.read())
        response = await self.handler(asked)
        if isinstance(response, web.StreamResponse):
            return response
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-length"]
        return web.Response(status=response.status_code, body=b"".join(response.stream), headers=headers)
