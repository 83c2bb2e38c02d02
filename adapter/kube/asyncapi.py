"""kube-apiserver calls made on the serving loop (the delegated reviews, the front-proxy ConfigMap), over aiohttp.

Built from a ``KubeClient``: its ``Configuration``'s host, ``tls_server_name`` and proxy settings make the
connection; its ``Credentials`` (adapter.kube.credentials) give the token and the TLS context (CA, client
certificate) of each request. Reading them never blocks the loop: an exec plugin or a file re-read runs in a worker
thread, and a request that has to wait for it awaits that thread. A changed client certificate comes with a new
TLS context, so new connections present it. Errors are those of the synchronous layer (``adapter.kube.api``):
``KubeApiError`` when the server answered with an error, ``KubeTransportError`` when no usable answer came,
``KubeCredentialError`` when there were no credentials to send.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from adapter.aiosession import LoopSession
from adapter.kube.api import KubeApiError, KubeTransportError, request_headers

if TYPE_CHECKING:
    from kubernetes.client import Configuration

    from adapter.kube.api import KubeClient

_MAX_CONNECTIONS = 16  # reviews are small and quick; the Go library's webhook client keeps its own pool too


def proxy_for(configuration: Configuration) -> str | None:
    """``Configuration.proxy`` unless its ``no_proxy`` exempts the host (the REST layer's rule)."""
    if not configuration.proxy:
        return None
    from kubernetes.client.rest import should_bypass_proxies

    return None if should_bypass_proxies(configuration.host, configuration.no_proxy or "") else configuration.proxy


class AsyncKubeApi:
    def __init__(self, client: KubeClient, timeout_s: float) -> None:
        configuration = client.configuration
        self.credentials = client.credentials
        self.timeout_s = timeout_s
        self._host = str(configuration.host).rstrip("/")
        self._http = LoopSession(limit=_MAX_CONNECTIONS)  # the TLS context comes with each request's credential
        self._proxy = proxy_for(configuration)
        self._server_hostname = configuration.tls_server_name or None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def post_json(self, path: str, body: bytes) -> dict[str, Any]:
        """POST an encoded JSON document (a review) and return the JSON answer."""
        return await self._call("POST", path, body)

    async def get_json(self, path: str) -> dict[str, Any]:
        return await self._call("GET", path, None)

    async def _call(self, method: str, path: str, body: bytes | None) -> dict[str, Any]:
        credential = await self.credentials.aget(self.timeout_s)
        headers = request_headers(credential.authorization, body=body is not None)
        what = f"{method} {self._host}{path}"
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._http.get().request(method, self._host + path, data=body, headers=headers,
                                                    proxy=self._proxy, server_hostname=self._server_hostname,
                                                    ssl=credential.tls or True) as response:
                    status, raw = response.status, await response.read()
        except TimeoutError:
            raise KubeTransportError(f"{what}: no answer within {self.timeout_s:g}s") from None
        except (aiohttp.ClientError, OSError) as exc:
            text = " ".join(str(exc).split())
            raise KubeTransportError(f"{what}: {type(exc).__name__}: {text}".rstrip(": ")) from None
        if status == 401:
            self.credentials.invalidate(credential)
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError:
            document = None
        if not 200 <= status < 300:
            fallback = raw.decode("utf-8", "replace").strip()[:200] or f"{what} answered HTTP {status}"
            raise KubeApiError.from_status(status, document, fallback)
        if not isinstance(document, dict):
            raise KubeTransportError(f"{what}: the answer is not a JSON object ({len(raw)} bytes)")
        return document
