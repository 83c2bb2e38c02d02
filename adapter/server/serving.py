"""HTTPS serving with client certificates handed to the app.

Stock uvicorn does not expose the peer certificate to ASGI apps. We request (not require) a client
certificate at the TLS layer and add the ASGI TLS extension — ``scope["extensions"]["tls"]`` with
``client_cert_chain`` as PEM strings — from the connection's SSL object, in the guarded protocol every listener of
the project uses (listener.protocol: it starts each connection's TLS itself, within the limits a client gets before
it is authenticated). The app reads only the standard extension, so any server that implements it would do.
uvloop runs the event loop: the loop's own cost per request is a visible part of a cache hit.

Python's ssl module has no "request but do not verify" mode: a certificate that is presented must chain to a
loaded CA, so a client presenting a certificate from another CA is refused at the handshake (Go would fall
through to other authenticators). Clients without a certificate connect normally.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from adapter.api.status import ApiError
from listener.head import Refusal
from listener.limits import Limits
from listener.protocol import Guard, GuardedProtocol
from listener.serving import GuardedServer
from listener.serving import uvicorn_config as serving_config

ASGIApp = Callable[..., Any]


class TLSSettingsError(ValueError):
    """A --tls-min-version or --tls-cipher-suites value this server does not serve; one line."""


# Go's TLS 1.2 cipher suite names (the apiserver's --tls-cipher-suites) and OpenSSL's names for the same suites.
_TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    # Go calls these insecure but accepts them; prometheus-adapter's own deployment manifest lists one.
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
}
# TLS 1.3 suites: Go accepts the names and, like OpenSSL here, does not let them be chosen.
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
_MIN_VERSIONS = {"": ssl.TLSVersion.TLSv1_2, "VersionTLS12": ssl.TLSVersion.TLSv1_2,
                 "VersionTLS13": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class TLSSettings:
    minimum_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    openssl_ciphers: str | None = None  # None: OpenSSL's default secure set

    @classmethod
    def parse(cls, min_version: str, cipher_suites: list[str]) -> TLSSettings:
        """From the apiserver's --tls-min-version and --tls-cipher-suites values (Go's names)."""
        if min_version not in _MIN_VERSIONS:
            raise TLSSettingsError(f"--tls-min-version {min_version!r}: expected VersionTLS12 or VersionTLS13 (never "
                                   "served below TLS 1.2)")
        unknown = [name for name in cipher_suites if name not in _TLS12_SUITES and name not in _TLS13_SUITES]
        if unknown:
            raise TLSSettingsError(f"--tls-cipher-suites: {', '.join(unknown)} not served (RC4, 3DES or unknown); "
                                   f"known TLS 1.2 suites: {', '.join(sorted(_TLS12_SUITES))}")
        tls12 = list(dict.fromkeys(_TLS12_SUITES[n] for n in cipher_suites if n in _TLS12_SUITES))
        if cipher_suites and not tls12 and _MIN_VERSIONS[min_version] < ssl.TLSVersion.TLSv1_3:
            raise TLSSettingsError("--tls-cipher-suites names only TLS 1.3 suites: TLS 1.2 clients would find no "
                                   "suite; add TLS 1.2 suites or pass --tls-min-version=VersionTLS13")
        return cls(_MIN_VERSIONS[min_version], ":".join(tls12) if tls12 else None)

    def apply(self, ctx: ssl.SSLContext) -> None:
        ctx.minimum_version = self.minimum_version
        if self.openssl_ciphers:
            ctx.set_ciphers(self.openssl_ciphers)


def server_context(cert_file: str, key_file: str, client_ca_pem: bytes | None, *,
                   request_client_certs: bool, tls: TLSSettings | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    (tls or TLSSettings()).apply(ctx)
    ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols(["http/1.1"])
    if request_client_certs:
        ctx.verify_mode = ssl.CERT_OPTIONAL
        if client_ca_pem:
            ctx.load_verify_locations(cadata=client_ca_pem.decode())
    return ctx


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


class TLSExtensionProtocol(GuardedProtocol):
    """The guarded protocol (listener.protocol), plus the ASGI TLS extension for every request on a TLS
    connection."""

    def connection_made(self, transport: Any) -> None:
        # Called once the handshake is done, so the peer certificate is known here.
        tls = _tls_scope(transport.get_extra_info("ssl_object"))
        if tls is not None:
            self.app = _WithTLSExtension(self.app, tls)
        super().connection_made(transport)


def status_refusal(refusal: Refusal) -> tuple[bytes, bytes]:
    """A refused connection's answer as the API's other errors are: a Kubernetes Status."""
    return b"application/json", orjson.dumps(ApiError(refusal.status, refusal.reason).body())


def guard(ctx: ssl.SSLContext | None, limits: Limits | None = None) -> Guard:
    """The HTTPS listener's guard: ``ctx`` for every handshake (its certificate follows the files through its SNI
    callback, adapter.server.certreload), refusals as Status."""
    return Guard(limits or Limits(), tls=(lambda: ctx) if ctx is not None else None, refusal_body=status_refusal,
                 name="adapter.listener", protocol_class=TLSExtensionProtocol)


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """The server's socket: SO_REUSEADDR always (as Go's listeners), SO_REUSEPORT with --permit-port-sharing."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def uvicorn_config(app: ASGIApp, host: str, port: int, ctx: ssl.SSLContext | None, *,
                   limits: Limits | None = None, listener: Guard | None = None, **kwargs: Any) -> Any:
    """A uvicorn Config serving ``app`` over ``ctx`` through the guarded TLS-extension protocol (``listener``, or
    one made with ``limits``)."""
    return serving_config(app, host, port, listener or guard(ctx, limits), **kwargs)


def guarded_server(app: ASGIApp, host: str, port: int, ctx: ssl.SSLContext | None, *,
                   limits: Limits | None = None, **kwargs: Any) -> GuardedServer:
    """A server for ``app`` over ``ctx`` with the adapter's guard (``limits``; kube-apiserver's by default)."""
    listener = guard(ctx, limits)
    return GuardedServer(uvicorn_config(app, host, port, ctx, listener=listener, **kwargs), listener)
