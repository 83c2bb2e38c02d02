"""ASGI middleware: authenticate, authorise, then hand the request on without its identity headers.

The client certificate comes from the ASGI TLS extension (``scope["extensions"]["tls"]["client_cert_chain"]``),
which adapter.server.serving adds to uvicorn; any server implementing that extension works the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from adapter.api.status import ApiError
from adapter.auth.attributes import forbidden_message, request_attributes
from adapter.auth.authn import Authentication, Authenticator, Unauthenticated
from adapter.auth.authz import Authorizer
from adapter.auth.delegated import DelegationUnavailable
from adapter.auth.requestheader import ClientCAs, identity_header_names

log = logging.getLogger("adapter.auth")

ASGIApp = Callable[..., Any]
DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/livez", "/readyz", "/metrics")


@dataclass(frozen=True)
class AuthOutcome:
    """What the self-metrics want to know about one request."""

    method: str  # frontproxy | x509 | token | anonymous | failed | exempt
    decision: str  # allowed | denied | error | exempt
    cached: bool = False


class PathMatcher:
    """Exact paths, or prefixes written with a trailing ``*`` (the Go flag's syntax)."""

    def __init__(self, paths: Iterable[str]) -> None:
        cleaned = [p.strip() for p in paths if p.strip()]
        self._exact = frozenset(p for p in cleaned if not p.endswith("*"))
        self._prefixes = tuple(p[:-1] for p in cleaned if p.endswith("*"))

    def __call__(self, path: str) -> bool:
        return path in self._exact or path.startswith(self._prefixes) if self._prefixes else path in self._exact


class AuthMiddleware:
    def __init__(self, app: ASGIApp, authenticator: Authenticator, authorizer: Authorizer,
                 client_cas: Callable[[], ClientCAs], *, always_allow: PathMatcher,
                 observe: Callable[[AuthOutcome], None] | None = None) -> None:
        self.app = app
        self._authn = authenticator
        self._authz = authorizer
        self._client_cas = client_cas
        self._always_allow = always_allow
        self._observe = observe or (lambda _: None)

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if self._always_allow(path):
            self._observe(AuthOutcome("exempt", "exempt"))
            await self.app(scope, receive, send)
            return
        chain = ((scope.get("extensions") or {}).get("tls") or {}).get("client_cert_chain") or ()
        try:
            authn = await self._authn.authenticate(chain[0] if chain else None, scope["headers"])
        except Unauthenticated as exc:
            log.info("unauthenticated request", extra={"path": path, "why": str(exc)})
            self._observe(AuthOutcome("failed", "denied"))
            await _status(send, ApiError(401, "Unauthorized"))
            return
        except DelegationUnavailable as exc:  # no TokenReview answer: fail closed, as an authorisation check does
            log.warning("authentication check failed", extra={"path": path, "error": str(exc)})
            self._observe(AuthOutcome("failed", "error"))
            await _status(send, ApiError(503, f"authentication check failed: {exc}"))
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        attrs = request_attributes(scope["method"], path, watch=query.get("watch", [""])[0] in ("true", "1"))
        try:
            decision, cached = await self._authz.authorize(authn.user, attrs)
        except DelegationUnavailable as exc:
            log.warning("authorization check failed", extra={"path": path, "error": str(exc)})
            self._observe(AuthOutcome(authn.method, "error"))
            await _status(send, ApiError(503, f"authorization check failed: {exc}"))
            return
        if not decision.allowed:
            message, details = forbidden_message(authn.user, attrs, decision.reason)
            self._observe(AuthOutcome(authn.method, "denied", cached))
            await _status(send, ApiError(403, message, details))
            return
        self._observe(AuthOutcome(authn.method, "allowed", cached))
        scope.setdefault("state", {})["user"] = authn.user.name
        await self.app(self._without_identity_headers(scope, authn), receive, send)

    def _without_identity_headers(self, scope: dict[str, Any], authn: Authentication) -> dict[str, Any]:
        """Go removes the identity headers once read; nothing downstream may mistake them for trusted input."""
        proxy = self._client_cas().requestheader
        if proxy is None:
            return scope
        exact, prefixes = identity_header_names(proxy)
        kept = [(k, v) for k, v in scope["headers"]
                if not ((name := k.decode("latin-1").lower()) in exact or name.startswith(prefixes))]
        return {**scope, "headers": kept}


async def _status(send: Callable, error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    await send({"type": "http.response.start", "status": error.code,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
