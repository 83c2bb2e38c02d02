"""Who is calling: front-proxy certificate + X-Remote-* headers, an x509 client certificate, or a bearer token.

Order and meaning follow the Go delegating authenticator (spec §4.2, §4.5): identity headers are read only
after the connection's client certificate verified against the *current* requestheader CA with an allowed CN.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cryptography import x509

from adapter.auth.delegated import TokenResult
from adapter.auth.identity import User, anonymous
from adapter.auth.requestheader import (
    ClientCAs,
    Headers,
    common_name,
    front_proxy_allowed,
    identity_from_headers,
    issuing_ca,
    organisations,
)
from adapter.prometheus.coalescing import CoalescingCache

TOKEN_CACHE_TTL_S = 10.0  # --authentication-token-webhook-cache-ttl default


class Unauthenticated(Exception):
    """Credentials were presented and none held (or none were presented and anonymous access is off)."""


class TokenReviewer(Protocol):
    async def review_token(self, token: str) -> TokenResult: ...


@dataclass(frozen=True)
class Authentication:
    user: User
    method: str  # frontproxy | x509 | token | anonymous


class Authenticator:
    def __init__(self, client_cas: Callable[[], ClientCAs], tokens: TokenReviewer | None, *,
                 allow_anonymous: bool = False, token_ttl_s: float = TOKEN_CACHE_TTL_S) -> None:
        self._client_cas = client_cas
        self._tokens = tokens
        self._allow_anonymous = allow_anonymous
        self._token_cache: CoalescingCache[TokenResult] = CoalescingCache(lambda _: token_ttl_s)

    async def authenticate(self, client_cert_pem: str | None, headers: Headers) -> Authentication:
        problems: list[str] = []
        if client_cert_pem:
            found = self._from_certificate(client_cert_pem, headers, problems)
            if found is not None:
                return found
        token = _bearer(headers)
        if token is not None:
            if self._tokens is None:
                problems.append("bearer tokens cannot be reviewed without the Kubernetes API")
            else:
                key = hashlib.sha256(token.encode()).digest()  # never keep raw tokens as dict keys
                tokens = self._tokens
                result = await self._token_cache.get(key, lambda: tokens.review_token(token))
                if result.user is not None:
                    return Authentication(result.user.with_authenticated_group(), "token")
                problems.append(f"token: {result.error}")
        if problems:
            raise Unauthenticated("; ".join(problems))
        if self._allow_anonymous:
            return Authentication(anonymous(), "anonymous")
        raise Unauthenticated("no credentials: a front-proxy client certificate or a bearer token is required")

    def _from_certificate(self, pem: str, headers: Headers, problems: list[str]) -> Authentication | None:
        try:
            cert = x509.load_pem_x509_certificate(pem.encode())
        except ValueError:
            problems.append("unreadable client certificate")
            return None
        cas = self._client_cas()
        proxy = cas.requestheader
        if proxy is not None and front_proxy_allowed(cert, proxy):
            user = identity_from_headers(headers, proxy)
            if user is not None:
                return Authentication(user.with_authenticated_group(), "frontproxy")
            # A trusted proxy that asserted nobody: this authenticator does not apply; try the others.
            return None
        if proxy is not None and issuing_ca(cert, proxy.cas):
            problems.append(f"x509: subject with cn={common_name(cert)} is not in the allowed list")
            return None
        if cas.client_cas and issuing_ca(cert, cas.client_cas):
            name = common_name(cert)
            if name:
                return Authentication(User(name, groups=organisations(cert)).with_authenticated_group(), "x509")
        problems.append("x509: certificate signed by an authority that is not trusted (now)")
        return None


def _bearer(headers: Headers) -> str | None:
    """The first Authorization header only, as Go's ``Header.Get`` reads it."""
    value = next((v for k, v in headers if k.lower() == b"authorization"), None)
    if value is None:
        return None
    scheme, _, token = value.decode("latin-1").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
