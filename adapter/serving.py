"""HTTPS serving with client certificates handed to the app.

Stock uvicorn does not expose the peer certificate to ASGI apps (spec §4.8). We request (not require) a client
certificate at the TLS layer and add the ASGI TLS extension — ``scope["extensions"]["tls"]`` with
``client_cert_chain`` as PEM strings — from the connection's SSL object, by giving uvicorn a subclass of its
httptools protocol (its fastest parser). The app reads only the standard extension, so any server that implements
it would do. uvicorn picks uvloop, a dependency, for the event loop: the loop's own cost per request is a visible
part of a cache hit.

Python's ssl module has no "request but do not verify" mode: a certificate that is presented must chain to a
loaded CA, so a client presenting a certificate from another CA is refused at the handshake (Go would fall
through to other authenticators). Clients without a certificate connect normally.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

ASGIApp = Callable[..., Any]


def server_context(cert_file: str, key_file: str, client_ca_pem: bytes | None, *,
                   request_client_certs: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols(["http/1.1"])
    if request_client_certs:
        ctx.verify_mode = ssl.CERT_OPTIONAL
        if client_ca_pem:
            ctx.load_verify_locations(cadata=client_ca_pem.decode())
    return ctx


def add_client_cas(ctx: ssl.SSLContext, pem: bytes) -> None:
    """New CAs (rotation) for new connections. OpenSSL cannot forget a CA; the app re-checks against the current
    bundle (adapter.auth.requestheader.issuing_ca), so a removed CA no longer vouches for anyone."""
    if pem:
        ctx.load_verify_locations(cadata=pem.decode())


def _tls_scope(ssl_object: ssl.SSLObject | None) -> dict[str, Any] | None:
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    chain = [ssl.DER_cert_to_PEM_cert(der)] if der else []  # Python 3.11 exposes only the leaf
    cipher = ssl_object.cipher()
    return {"server_cert": None, "client_cert_chain": chain, "client_cert_name": None,
            "client_cert_error": None, "tls_version": None, "cipher_suite": None,
            "cipher_name": cipher[0] if cipher else None}


class _WithTLSExtension:
    def __init__(self, app: ASGIApp, tls: dict[str, Any]) -> None:
        self.app = app
        self.tls = tls

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        scope["extensions"] = {**(scope.get("extensions") or {}), "tls": self.tls}
        await self.app(scope, receive, send)


class TLSExtensionHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, plus the ASGI TLS extension for every request on a TLS connection."""

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # asyncio calls connection_made after the handshake, so the peer certificate is known here.
        tls = _tls_scope(transport.get_extra_info("ssl_object"))
        if tls is not None:
            self.app = _WithTLSExtension(self.app, tls)


def uvicorn_config(app: ASGIApp, host: str, port: int, ctx: ssl.SSLContext, **kwargs: Any) -> Any:
    """A uvicorn Config serving ``app`` over ``ctx`` with the TLS extension protocol."""
    import uvicorn

    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "on"}
    settings.update(kwargs)
    return uvicorn.Config(app, host=host, port=port, http=TLSExtensionHttpToolsProtocol,
                          ssl_context_factory=lambda _config, _default: ctx, **settings)
