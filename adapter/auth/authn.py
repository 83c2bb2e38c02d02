"""Who is calling: front-proxy certificate + X-Remote-* headers, an x509 client certificate, or a bearer token.

Order and meaning follow the Go delegating authenticator (k8s.io/apiserver
pkg/authentication/authenticatorfactory/delegating.go, request/headerrequest): identity headers are read only
after the connection's client certificate verified against the *current* requestheader CA with an allowed CN.
"""

from __future__ import annotations

import datetime as dt
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


@dataclass(frozen=True)
class _CertificateVerdict:
    """What a client certificate proves against one CA bundle, until ``expires`` (its own not-after)."""

    kind: str  # frontproxy | x509 | rejected
    expires: dt.datetime
    user: User | None = None  # x509: the certificate's user
    problem: str = ""  # rejected: why


class Authenticator:
    """Every aggregated request arrives over the aggregator's connections with the same front-proxy certificate:
    what a certificate proves (a signature check) is worked out once per CA bundle and kept until the certificate
    expires; a rotated bundle starts over."""

    _VERDICTS_KEPT = 256

    def __init__(self, client_cas: Callable[[], ClientCAs], tokens: TokenReviewer | None, *,
                 allow_anonymous: bool = False, token_ttl_s: float = TOKEN_CACHE_TTL_S,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self._clock = clock
        self._client_cas = client_cas
        self._tokens = tokens
        self._allow_anonymous = allow_anonymous
        self._token_cache: CoalescingCache[TokenResult] = CoalescingCache(lambda _: token_ttl_s)
        self._verdicts: dict[str, _CertificateVerdict] = {}
        self._verdicts_for: ClientCAs | None = None

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
        cas = self._client_cas()
        verdict = self._verdict(pem, cas)
        if verdict.kind == "frontproxy":
            assert cas.requestheader is not None
            user = identity_from_headers(headers, cas.requestheader)
            if user is not None:
                return Authentication(user.with_authenticated_group(), "frontproxy")
            # A trusted proxy that asserted nobody: this authenticator does not apply; try the others.
            return None
        if verdict.kind == "x509" and verdict.user is not None:
            return Authentication(verdict.user, "x509")
        if verdict.problem:
            problems.append(verdict.problem)
        return None

    def _verdict(self, pem: str, cas: ClientCAs) -> _CertificateVerdict:
        now = self._clock()
        if cas is not self._verdicts_for:
            self._verdicts, self._verdicts_for = {}, cas
        found = self._verdicts.get(pem)
        if found is not None and now <= found.expires:
            return found
        verdict = _judge(pem, cas, now)
        if len(self._verdicts) >= self._VERDICTS_KEPT:
            self._verdicts.clear()
        self._verdicts[pem] = verdict
        return verdict


def _judge(pem: str, cas: ClientCAs, now: dt.datetime) -> _CertificateVerdict:
    """What ``pem`` proves against ``cas`` now (an expired or not-yet-valid certificate proves nothing)."""
    try:
        cert = x509.load_pem_x509_certificate(pem.encode())
    except ValueError:
        return _CertificateVerdict("rejected", now, problem="unreadable client certificate")
    expires = cert.not_valid_after_utc
    proxy = cas.requestheader
    if proxy is not None and front_proxy_allowed(cert, proxy, now):
        return _CertificateVerdict("frontproxy", expires)
    if proxy is not None and issuing_ca(cert, proxy.cas, now):
        return _CertificateVerdict("rejected", expires,
                                   problem=f"x509: subject with cn={common_name(cert)} is not in the allowed list")
    if cas.client_cas and issuing_ca(cert, cas.client_cas, now):
        name = common_name(cert)
        if name:
            user = User(name, groups=organisations(cert)).with_authenticated_group()
            return _CertificateVerdict("x509", expires, user=user)
    # Not vouched for now; looked at again on the next request (it may become valid, a CA may arrive).
    return _CertificateVerdict("rejected", now, problem="x509: certificate signed by an authority that is not "
                                                        "trusted (now)")


def _bearer(headers: Headers) -> str | None:
    """The first Authorization header only, as Go's ``Header.Get`` reads it."""
    value = next((v for k, v in headers if k.lower() == b"authorization"), None)
    if value is None:
        return None
    scheme, _, token = value.decode("latin-1").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
