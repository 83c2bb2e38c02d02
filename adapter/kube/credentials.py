"""The credentials the adapter sends to the Kubernetes API, kept current without ever stalling the serving loop.

Whatever produces them (a kubeconfig exec plugin, a token or certificate file, the pod's service-account token)
runs in a worker thread; a request on the loop only reads the current ``Credential`` and waits (without
blocking the loop) only when there is none it may send. When, as client-go does it:

- an exec plugin's answer is kept until its ``expirationTimestamp`` passes (none: until the API server answers
  401 to it), then the plugin runs again; callers arriving meanwhile share that one run
  (plugin/pkg/client/auth/exec/exec.go: getCreds, maybeRefreshCreds);
- credentials read from files (a kubeconfig's token, ``tokenFile`` or client certificate, the service-account
  token) are read again every minute (client-go re-reads a token file every minute,
  transport/token_source.go NewCachedFileTokenSource) in the background while the ones in hand are used, and at
  once after a 401; a failed re-read keeps the ones in hand (as cachingTokenSource does) and is retried;
- a changed client certificate or key (or CA) makes new connections use it: the TLS material is rebuilt and the
  HTTP layers open new connections with it (transport/cert_rotation.go closes the old ones).

A failure is one log line here and a ``KubeCredentialError`` (a ``KubeError``) for the callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import logging
import math
import os
import shutil
import ssl
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from adapter.kube import execplugin
from adapter.kube.errors import KubeConfigError, KubeCredentialError, one_line

if TYPE_CHECKING:
    from kubernetes.client import Configuration

log = logging.getLogger("adapter.kube.credentials")

RELOAD_PERIOD_S = 60.0  # client-go's NewCachedFileTokenSource period
RETRY_S = 10.0  # after a failed background re-read, while the credentials in hand still serve


@dataclass(frozen=True, eq=False)
class Credential:
    authorization: str | None  # the Authorization header's value ("Bearer ...", "Basic ..."), if any
    configuration: Configuration  # for the REST layer: host, CA, client certificate and key files, proxy
    tls: ssl.SSLContext | None  # the same TLS settings for aiohttp (None: plain HTTP)
    identity: bytes  # digest of what TLS uses (CA, certificate, key): another value needs other connections
    expires_at: float | None = None  # seconds since the epoch; after it the credential is never sent
    reload_at: float = math.inf  # monotonic; after it the source is read again in the background


class CredentialSource(Protocol):
    description: str  # where the credentials come from, for messages: "kubeconfig /etc/kube/config"

    def load(self, previous: Credential | None) -> Credential:
        """Fresh credentials (blocking: runs in a worker thread); ``KubeCredentialError`` when there are none."""
        ...

    def close(self) -> None: ...


class Credentials:
    """The current ``Credential`` of one source; one load at a time, shared by every caller that waits for it."""

    def __init__(self, source: CredentialSource) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._current: Credential | None = None
        self._refused: Credential | None = None  # the API server answered 401 to it
        self._reload_at = 0.0
        self._loading: Future[Credential] | None = None
        self.loads_total = 0
        self.failures_total = 0

    @property
    def description(self) -> str:
        return self.source.description

    def get(self, timeout_s: float) -> Credential:
        """For threads: the credential to send, waiting up to ``timeout_s`` for a load when there is none."""
        taken = self._take()
        if isinstance(taken, Credential):
            return taken
        try:
            return taken.result(timeout_s)
        except TimeoutError:
            raise self._still_loading(timeout_s) from None
        except KubeCredentialError as exc:
            raise KubeCredentialError(str(exc)) from None

    async def aget(self, timeout_s: float) -> Credential:
        """For the serving loop: the same, awaiting the load's worker thread without blocking the loop."""
        taken = self._take()
        if isinstance(taken, Credential):
            return taken
        waiting = asyncio.wrap_future(taken)
        waiting.add_done_callback(_retrieve)
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(waiting)
        except TimeoutError:
            raise self._still_loading(timeout_s) from None
        except KubeCredentialError as exc:
            raise KubeCredentialError(str(exc)) from None

    def invalidate(self, used: Credential) -> None:
        """The API server answered 401 to ``used``: load again now, unless that happened already."""
        with self._lock:
            if used is self._current and self._refused is not used:
                self._refused = used
                self._start()

    def close(self) -> None:
        self.source.close()

    def _error(self, exc: Exception) -> KubeCredentialError:
        text = one_line(exc) if isinstance(exc, KubeCredentialError | KubeConfigError) else (
            f"{type(exc).__name__}: {one_line(exc)}")
        return KubeCredentialError(text if text.startswith(self.description) else f"{self.description}: {text}")

    def _still_loading(self, timeout_s: float) -> KubeCredentialError:
        return KubeCredentialError(f"{self.description}: no credentials within {timeout_s:g}s (still loading)")

    def _take(self) -> Credential | Future[Credential]:
        with self._lock:
            current = self._current
            usable = current is not None and current is not self._refused and (
                current.expires_at is None or time.time() <= current.expires_at)
            if not usable:
                return self._start()
            assert current is not None
            if time.monotonic() >= self._reload_at:
                self._start()  # in the background: ``current`` serves meanwhile
            return current

    def _start(self) -> Future[Credential]:
        """The load in flight, started when there is none (called with the lock held)."""
        if self._loading is None:
            future: Future[Credential] = Future()
            future.set_running_or_notify_cancel()
            self._loading = future
            threading.Thread(target=self._load, args=(future, self._current), name="kube-credentials",
                             daemon=True).start()
        return self._loading

    def _load(self, future: Future[Credential], previous: Credential | None) -> None:
        try:
            fresh = self.source.load(previous)
        except Exception as exc:  # the source's own errors are KubeCredentialError; anything else is one line too
            error = self._error(exc)
            log.warning("%s", error)
            with self._lock:
                self._loading = None
                self.failures_total += 1
                self._reload_at = time.monotonic() + RETRY_S
            future.set_exception(error)
            return
        with self._lock:
            self._current, self._refused, self._loading = fresh, None, None
            self._reload_at = fresh.reload_at
            self.loads_total += 1
        if previous is not None and fresh.identity != previous.identity:
            log.info("%s: the client certificate, key or CA changed; new connections use them", self.description)
        future.set_result(fresh)


def _retrieve(future: asyncio.Future[Credential]) -> None:
    """Mark a load's failure as seen, for a waiter that gave up (no "exception was never retrieved" noise)."""
    if not future.cancelled():
        future.exception()


# -- TLS material ------------------------------------------------------------------------------------------------

def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise KubeCredentialError(f"reading the {what} {path}: {exc.strerror or exc}") from None


def credential_for(configuration: Configuration, authorization: str | None, previous: Credential | None, *,
                   cert_file: str | None = None, key_file: str | None = None, expires_at: float | None = None,
                   reload_at: float = math.inf) -> Credential:
    """A ``Credential`` over ``configuration`` (its client certificate replaced by ``cert_file``/``key_file`` when
    given): its TLS material read now, the previous one's TLS context kept when nothing in it changed."""
    if cert_file is not None:
        configuration = copy.deepcopy(configuration)
        configuration.cert_file, configuration.key_file = cert_file, key_file
    if not str(configuration.host).startswith("https:"):
        return Credential(authorization, configuration, None, b"", expires_at, reload_at)
    parts = [b"verify" if configuration.verify_ssl else b"insecure",
             _read(configuration.ssl_ca_cert, "CA certificate") if configuration.ssl_ca_cert else b"",
             (configuration.ca_cert_data or "").encode() if isinstance(configuration.ca_cert_data, str)
             else configuration.ca_cert_data or b""]
    if configuration.cert_file:
        parts += [_read(configuration.cert_file, "client certificate"),
                  _read(configuration.key_file, "client key") if configuration.key_file else b""]
    identity = hashlib.sha256(b"\0".join(parts)).digest()
    if previous is not None and previous.identity == identity:
        return Credential(authorization, configuration, previous.tls, identity, expires_at, reload_at)
    return Credential(authorization, configuration, tls_context(configuration), identity, expires_at, reload_at)


def tls_context(configuration: Configuration) -> ssl.SSLContext:
    """TLS from the official client's ``Configuration``: its CA (file or PEM data), client certificate and key, and
    ``verify_ssl``; not its ``assert_hostname`` (``tls_server_name`` is passed per request instead)."""
    try:
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    except (ssl.SSLError, OSError, ValueError) as exc:
        files = ", ".join(f for f in (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file) if f)
        raise KubeCredentialError(f"TLS material ({files or 'CA data'}) cannot be used: {one_line(exc)}") from None
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class PrivateFiles:
    """An exec plugin's client certificate and key as files (what both TLS layers load): in a directory only
    this user can read, removed on ``close`` or at exit; the two newest pairs are kept, as a connection being
    opened may still name the previous pair."""

    def __init__(self) -> None:
        self._dir: str | None = None
        self._pairs: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._cleanup: weakref.finalize | None = None

    def write(self, cert_pem: bytes, key_pem: bytes) -> tuple[str, str]:
        with self._lock:
            if self._dir is None:
                self._dir = tempfile.mkdtemp(prefix="gpu-adapter-kube-")
                self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
            stem = os.path.join(self._dir, hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()[:16])
            pair = (stem + ".crt", stem + ".key")
            if pair not in self._pairs:
                for path, data in zip(pair, (cert_pem, key_pem), strict=True):
                    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    with os.fdopen(descriptor, "wb") as file:
                        file.write(data)
            else:
                self._pairs.remove(pair)
            self._pairs.append(pair)
            for old in self._pairs[:-2]:
                for path in old:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
            del self._pairs[:-2]
            return pair

    def close(self) -> None:
        if self._cleanup is not None:
            self._cleanup()


# -- sources -----------------------------------------------------------------------------------------------------

class ReloadedConfiguration:
    """What a loader puts in a ``Configuration`` (a kubeconfig's token, ``tokenFile``, basic auth or client
    certificate files; the service-account token): ``load`` gives a fresh ``Configuration`` and runs again every
    ``period_s`` and after a 401. The token is read through ``get_api_key_with_prefix``, so a loader's refresh
    hook (an auth-provider's) runs there, in the worker thread."""

    def __init__(self, load: Callable[[], Configuration], description: str,
                 period_s: float = RELOAD_PERIOD_S) -> None:
        self._load = load
        self.description = description
        self.period_s = period_s

    def load(self, previous: Credential | None) -> Credential:
        configuration = self._load()
        authorization = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        return credential_for(configuration, authorization or None, previous,
                              reload_at=time.monotonic() + self.period_s)

    def close(self) -> None:
        pass


class ExecPluginCredentials:
    """A kubeconfig's exec plugin: its token and client certificate over the kubeconfig's cluster settings."""

    def __init__(self, settings: execplugin.ExecSettings, cluster: Configuration, description: str) -> None:
        self.settings = settings
        self._cluster = cluster
        self.description = description
        self._files = PrivateFiles()

    def load(self, previous: Credential | None) -> Credential:
        result = execplugin.run(self.settings)
        cert_file = key_file = None
        if result.cert_pem is not None and result.key_pem is not None:
            cert_file, key_file = self._files.write(result.cert_pem, result.key_pem)
        return credential_for(self._cluster, f"Bearer {result.token}" if result.token else None, previous,
                              cert_file=cert_file, key_file=key_file, expires_at=result.expires_at)

    def close(self) -> None:
        self._files.close()
