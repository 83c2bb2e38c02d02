"""kube-apiserver calls made on the serving loop (the delegated reviews, the front-proxy ConfigMap), over aiohttp.

Built from the official client's ``Configuration``, which keeps what it does well (kubeconfig and in-cluster
loading, token refresh): its host, CA, client certificate and key, ``verify_ssl``, ``tls_server_name`` and proxy
settings make the connection, and the bearer token is read through ``Configuration.get_api_key_with_prefix`` on
every request, so the loaders' refresh hooks (a rotated service-account token, an exec plugin) keep working.
Errors are those of the synchronous layer (``adapter.kube.api``): ``KubeApiError`` when the server answered with
an error, ``KubeTransportError`` when no usable answer came.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from adapter.aiosession import LoopSession
from adapter.kube.api import KubeApiError, KubeTransportError, request_headers

if TYPE_CHECKING:
    from kubernetes.client import Configuration

_MAX_CONNECTIONS = 16  # reviews are small and quick; the Go library's webhook client keeps its own pool too


def tls_context(configuration: Configuration) -> ssl.SSLContext:
    """TLS from the official client's ``Configuration``: its CA (file or PEM data), client certificate and key, and
    ``verify_ssl``; not its ``assert_hostname`` (``tls_server_name`` is passed per request instead)."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def proxy_for(configuration: Configuration) -> str | None:
    """``Configuration.proxy`` unless its ``no_proxy`` exempts the host (the REST layer's rule)."""
    if not configuration.proxy:
        return None
    from kubernetes.client.rest import should_bypass_proxies

    return None if should_bypass_proxies(configuration.host, configuration.no_proxy or "") else configuration.proxy


class AsyncKubeApi:
    def __init__(self, configuration: Configuration, timeout_s: float) -> None:
        self.configuration = configuration
        self.timeout_s = timeout_s
        self._host = str(configuration.host).rstrip("/")
        https = self._host.startswith("https:")
        self._http = LoopSession(limit=_MAX_CONNECTIONS, tls=tls_context(configuration) if https else None)
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
        headers = request_headers(self.configuration, body=body is not None)
        what = f"{method} {self._host}{path}"
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._http.get().request(method, self._host + path, data=body, headers=headers,
                                                    proxy=self._proxy, server_hostname=self._server_hostname,
                                                    ) as response:
                    status, raw = response.status, await response.read()
        except TimeoutError:
            raise KubeTransportError(f"{what}: no answer within {self.timeout_s:g}s") from None
        except (aiohttp.ClientError, OSError) as exc:
            text = " ".join(str(exc).split())
            raise KubeTransportError(f"{what}: {type(exc).__name__}: {text}".rstrip(": ")) from None
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
