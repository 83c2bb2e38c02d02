"""Assemble authentication and authorisation from the serve flags (the only place that knows them all)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from adapter.auth.authn import TOKEN_CACHE_TTL_S, Authenticator
from adapter.auth.authz import DECISION_CACHE_TTL_S, Authorizer
from adapter.auth.delegated import KubeDelegate
from adapter.auth.middleware import DEFAULT_ALWAYS_ALLOW_PATHS, AuthMiddleware, AuthOutcome, PathMatcher
from adapter.auth.requestheader import (
    DEFAULT_EXTRA_PREFIXES,
    DEFAULT_GROUP_HEADERS,
    DEFAULT_USERNAME_HEADERS,
    ClientCAs,
    ConfigError,
    RequestHeaderConfig,
)
from adapter.auth.source import ClientCASource

log = logging.getLogger("adapter.auth")


class AuthSetupError(Exception):
    """The flags cannot give a working auth setup; one line for the CLI."""


@dataclass(frozen=True)
class AuthOptions:
    disabled: bool = False
    requestheader_client_ca_file: str | None = None
    requestheader_allowed_names: Sequence[str] = ()
    requestheader_username_headers: Sequence[str] = DEFAULT_USERNAME_HEADERS
    requestheader_group_headers: Sequence[str] = DEFAULT_GROUP_HEADERS
    requestheader_extra_headers_prefix: Sequence[str] = DEFAULT_EXTRA_PREFIXES
    requestheader_uid_headers: Sequence[str] = ()
    client_ca_file: str | None = None
    skip_lookup: bool = False
    tolerate_lookup_failure: bool = False
    always_allow_paths: Sequence[str] = DEFAULT_ALWAYS_ALLOW_PATHS
    anonymous: bool = False
    token_cache_ttl_s: float = TOKEN_CACHE_TTL_S  # --authentication-token-webhook-cache-ttl
    allowed_cache_ttl_s: float = DECISION_CACHE_TTL_S  # --authorization-webhook-cache-authorized-ttl
    denied_cache_ttl_s: float = DECISION_CACHE_TTL_S  # --authorization-webhook-cache-unauthorized-ttl


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise AuthSetupError(f"{flag} {path}: {exc.strerror}") from None


def fixed_client_cas(options: AuthOptions) -> ClientCAs | None:
    """The CAs given by flags, or None when they come from kube-apiserver's ConfigMap."""
    if not options.requestheader_client_ca_file and not options.client_ca_file:
        return None
    try:
        proxy = None
        if options.requestheader_client_ca_file:
            proxy = RequestHeaderConfig(
                ca_pem=_read(options.requestheader_client_ca_file, "--requestheader-client-ca-file"),
                allowed_names=tuple(options.requestheader_allowed_names),
                username_headers=tuple(options.requestheader_username_headers),
                group_headers=tuple(options.requestheader_group_headers),
                extra_prefixes=tuple(options.requestheader_extra_headers_prefix),
                uid_headers=tuple(options.requestheader_uid_headers))
        client = _read(options.client_ca_file, "--client-ca-file") if options.client_ca_file else None
        return ClientCAs(proxy, client)
    except ConfigError as exc:
        raise AuthSetupError(str(exc)) from None


class AuthStack:
    """The pieces of delegated auth, with the start/stop the app's lifespan runs."""

    def __init__(self, options: AuthOptions, api_client: Any | None) -> None:
        if api_client is None:
            raise AuthSetupError(
                "authentication and authorisation are delegated to kube-apiserver, and there is no Kubernetes API: "
                "run in a pod, pass --kubeconfig, or pass --disable-auth for local use")
        delegate = self.delegate = KubeDelegate(api_client)
        fixed = fixed_client_cas(options)
        self._ssl: ssl.SSLContext | None = None
        self.source = ClientCASource(fixed, None if options.skip_lookup else delegate,
                                     tolerate_lookup_failure=options.tolerate_lookup_failure,
                                     on_change=self._cas_changed)
        self.authenticator = Authenticator(self.source.current, delegate, allow_anonymous=options.anonymous,
                                           token_ttl_s=options.token_cache_ttl_s)
        self.authorizer = Authorizer(delegate, ttl_s=options.allowed_cache_ttl_s,
                                     denied_ttl_s=options.denied_cache_ttl_s)
        self.always_allow = PathMatcher(options.always_allow_paths)

    def attach_tls(self, ctx: ssl.SSLContext) -> None:
        """The server's context, so rotated CAs are accepted by new handshakes."""
        self._ssl = ctx
        add_client_cas(ctx, self.source.current().bundle())

    def _cas_changed(self, cas: ClientCAs) -> None:
        if self._ssl is not None:
            add_client_cas(self._ssl, cas.bundle())

    def middleware(self, observe: Callable[[AuthOutcome], None] | None = None) -> partial[AuthMiddleware]:
        """The middleware for ``app.add_middleware``: ``AuthMiddleware`` given everything but the app it wraps."""
        return partial(AuthMiddleware, authenticator=self.authenticator, authorizer=self.authorizer,
                       client_cas=self.source.current, always_allow=self.always_allow, observe=observe)

    async def load(self) -> None:
        """Before serving: read the front-proxy configuration (raises AuthSetupError when unusable)."""
        try:
            await self.source.load()
        except ConfigError as exc:
            raise AuthSetupError(str(exc)) from None
        finally:
            await self.delegate.aclose()  # its connections belong to this loop; serving opens its own

    async def start(self) -> None:
        self.source.start()

    async def stop(self) -> None:
        await self.source.stop()
        await self.delegate.aclose()


def add_client_cas(ctx: ssl.SSLContext, pem: bytes) -> None:
    """New CAs (rotation) for new connections. OpenSSL cannot forget a CA; the app re-checks against the current
    bundle (adapter.auth.requestheader.issuing_ca), so a removed CA no longer vouches for anyone."""
    if pem:
        ctx.load_verify_locations(cadata=pem.decode())
