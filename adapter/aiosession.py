"""The adapter's one async HTTP client stack (aiohttp): a session per event loop, for Prometheus and kube-apiserver.

What an HPA request makes the adapter send (Prometheus queries, TokenReviews, SubjectAccessReviews) goes through
aiohttp on the serving loop: no worker thread, no second HTTP library. A session belongs to the loop it was made
in (the adapter's start-up reads the front-proxy ConfigMap in a short loop of its own before serving), so it is made
on first use in the running loop, and made again when the loop is another.
"""

from __future__ import annotations

import asyncio
import ssl

import aiohttp


class LoopSession:
    """``limit`` connections at most; ``tls`` for HTTPS (None: the default verification); ``resolver`` decides
    where host names resolve (tests point every host at a local server)."""

    def __init__(self, *, limit: int, tls: ssl.SSLContext | None = None,
                 resolver: aiohttp.abc.AbstractResolver | None = None) -> None:
        self._limit = limit
        self._tls = tls
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._loop = loop
            connector = aiohttp.TCPConnector(limit=self._limit, ssl=self._tls if self._tls else True,
                                             resolver=self._resolver)
            # trust_env off: the callers decide about proxies. auto_decompress: an answer compressed although
            # identity was asked for is still decoded.
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=True)
        return self._session

    async def aclose(self) -> None:
        """Close the session (one made in a loop that is gone is only dropped: it cannot be closed from here)."""
        session, self._session = self._session, None
        if session is not None and not session.closed and self._loop is asyncio.get_running_loop():
            await session.close()
