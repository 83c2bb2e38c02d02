"""``--web-config-file``: the Prometheus exporter-toolkit web configuration, as dcgm-exporter serves it.

Keys and meanings follow exporter-toolkit's ``docs/web-configuration.md`` and ``web/tls_config.go``: unknown
keys are an error (it decodes strictly), relative file names are relative to the config file's directory,
``client_auth_type`` defaults to ``NoClientCert``, a client CA without a client-auth policy is an error, TLS
versions default to TLS12..TLS13, and ``basic_auth_users`` maps user names to bcrypt hashes. A wrong or missing
password gets 401 with ``WWW-Authenticate: Basic`` (``web/handler.go``).

Differences, each refused at start-up with a one-line reason rather than served differently:
``RequireAnyClientCert``/``RequestClientCert`` (Python's TLS cannot ask for a certificate without verifying it
against a CA), ``cipher_suites`` and ``curve_preferences`` (Go names), ``http2: true`` is accepted (HTTP/1.1 is
served). Like exporter-toolkit, which re-reads the file on every request, a changed file (or certificate, key or
CA it names) applies to the next request, checked at most once a second; whether TLS is on is fixed at
start-up (as there). A change that does not load is logged and the last good configuration kept.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt

from clikit.yaml_file import load_yaml, strict_mapping

_TLS_KEYS = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
             "client_allowed_sans", "min_version", "max_version", "cipher_suites", "prefer_server_cipher_suites",
             "curve_preferences"}
_TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
_HTTP_KEYS = {"http2", "headers"}
# exporter-toolkit's extraHTTPHeaders: the headers that may be set, and their allowed values (None: any).
_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None, "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": None, "Content-Security-Policy": None,
}
_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
             "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"": ssl.CERT_NONE, "NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_UNVERIFIED = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
log = logging.getLogger("exporter.web")
# exporter-toolkit checks unknown users against a fixed hash so timing does not reveal which users exist.
_DUMMY_HASH = bcrypt.hashpw(b"fakepassword", bcrypt.gensalt(10))


class WebConfigError(ValueError):
    """A web config the exporter cannot serve with; the message names the file and the field."""


@dataclass
class WebConfig:
    tls: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    rate_interval_s: float = 0.0
    rate_burst: int = 0
    files: tuple[str, ...] = ()  # the config file and the files it names, watched for changes


class WebGuard:
    """The web config in force: TLS context, basic-auth check, rate limit and extra headers, reloaded when the
    file or a file it names changes."""

    def __init__(self, path: str | None = None, *, recheck_s: float = 1.0) -> None:
        self.path = path
        self._recheck_s = recheck_s
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        self._apply(load_web_config(path) if path else WebConfig())
        self.tls_enabled = self.config.tls is not None

    def _apply(self, config: WebConfig) -> None:
        self.config = config
        self.authorizer = Authorizer(config.users) if config.users else None
        self.limiter = RateLimiter(config.rate_interval_s, config.rate_burst) if config.rate_interval_s else None
        headers = {"X-Content-Type-Options": "nosniff", **config.headers}
        self.header_pairs = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self._stamps = _stamps(config.files)

    def refresh(self) -> None:
        if self.path is None or time.monotonic() - self._checked < self._recheck_s:
            return
        with self._lock:
            self._checked = time.monotonic()
            stamps = _stamps(self.config.files)
            if stamps == self._stamps:
                return
            self._stamps = stamps  # one error line per change, not per request
            try:
                config = load_web_config(self.path)
                if (config.tls is not None) != self.tls_enabled:
                    raise WebConfigError(f"{self.path}: TLS cannot be switched on or off while running; restart")
            except (WebConfigError, ValueError) as exc:
                log.error("web config not reloaded, the previous one stays in force: %s", exc)
                return
            self._apply(config)
            log.info("web config %s reloaded", self.path)

    @property
    def checks_requests(self) -> bool:
        """Whether requests are checked at all (basic-auth users or a rate limit), as configured now."""
        self.refresh()
        return self.authorizer is not None or self.limiter is not None

    def current_tls(self) -> ssl.SSLContext:
        """The TLS context for the next handshake (the file is checked for changes first)."""
        self.refresh()
        assert self.config.tls is not None
        return self.config.tls

    def refusal(self, authorization: str | None) -> int | None:
        """429 or 401 when the request may not be served, else None."""
        self.refresh()
        if self.limiter is not None and not self.limiter.allow():
            return 429
        if self.authorizer is not None and not self.authorizer.allowed(authorization):
            return 401
        return None


def _stamps(files: tuple[str, ...]) -> tuple[tuple[int, int] | None, ...]:
    out: list[tuple[int, int] | None] = []
    for name in files:
        try:
            st = os.stat(name)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class Authorizer:
    """Basic-auth check with a cache of (user, hash, password) outcomes: bcrypt costs ~50 ms per check, and
    Prometheus sends the same credentials every scrape (exporter-toolkit caches likewise)."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self._users = users
        self._cache: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()

    def allowed(self, authorization: str | None) -> bool:
        if not authorization or not authorization.startswith("Basic "):
            return False
        try:
            user, sep, password = base64.b64decode(authorization[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        key = (user, password)
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                hashed = self._users.get(user)
                ok = bcrypt.checkpw(password.encode(), hashed or _DUMMY_HASH) and hashed is not None
                self._cache[key] = hit = ok
                if len(self._cache) > 1024:
                    self._cache.pop(next(iter(self._cache)))
        return hit


class RateLimiter:
    """exporter-toolkit's ``rate_limit``: a token bucket refilled every ``interval``, ``burst`` deep."""

    def __init__(self, interval_s: float, burst: int) -> None:
        self._interval, self._burst = interval_s, max(burst, 1)
        self._tokens, self._at = float(self._burst), time.monotonic()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._at) / self._interval)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


def _mapping(value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    return strict_mapping(value, where, allowed, WebConfigError)


def _file(base: Path, value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise WebConfigError(f"{where}: expected a file name")
    return str(base / value)


def load_web_config(path: str) -> WebConfig:
    top = _mapping(load_yaml(path, "web config", WebConfigError), path, _TOP_KEYS)
    base = Path(path).resolve().parent
    tls = _mapping(top.get("tls_server_config"), f"{path}: tls_server_config", _TLS_KEYS)
    config = WebConfig(files=(path, *(str(base / str(tls[k])) for k in ("cert_file", "key_file", "client_ca_file")
                                      if tls.get(k))))
    if any(tls.get(k) for k in ("cert_file", "cert", "key_file", "key", "client_ca_file", "client_ca",
                                "client_auth_type")):
        config.tls = _tls_context(tls, base, f"{path}: tls_server_config")
    http = _mapping(top.get("http_server_config"), f"{path}: http_server_config", _HTTP_KEYS)
    for name, value in _mapping(http.get("headers"), f"{path}: http_server_config.headers", set(_HEADERS)).items():
        allowed = _HEADERS[name]
        if allowed is not None and value not in allowed:
            raise WebConfigError(f"{path}: http_server_config.headers.{name}: expected one of {', '.join(allowed)}, "
                                 f"got {value!r}")
        config.headers[name] = str(value)
    users = top.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise WebConfigError(f"{path}: basic_auth_users: expected a mapping of user names to bcrypt hashes")
    for user, hashed in users.items():
        try:
            bcrypt.checkpw(b"", str(hashed).encode())
        except ValueError:
            raise WebConfigError(f"{path}: basic_auth_users.{user}: not a bcrypt hash") from None
        config.users[str(user)] = str(hashed).encode()
    rate = _mapping(top.get("rate_limit"), f"{path}: rate_limit", {"interval", "burst"})
    if rate.get("interval"):
        from clikit.durations import parse_go_duration as parse_duration

        config.rate_interval_s = parse_duration(str(rate["interval"]), f"{path}: rate_limit.interval")
        config.rate_burst = int(rate.get("burst") or 0)
    return config


def _tls_context(tls: dict[str, Any], base: Path, where: str) -> ssl.SSLContext:
    for key in ("cipher_suites", "curve_preferences"):
        if tls.get(key):
            raise WebConfigError(f"{where}.{key}: Go cipher/curve names are not supported here; remove it "
                                 "(the Python TLS defaults are used)")
    auth = str(tls.get("client_auth_type") or "")
    if auth in _UNVERIFIED:
        raise WebConfigError(f"{where}.client_auth_type: {auth} (a client certificate not verified against a CA) "
                             "is not supported; use RequireAndVerifyClientCert or VerifyClientCertIfGiven with "
                             "client_ca_file")
    if auth not in _CLIENT_AUTH:
        raise WebConfigError(f"{where}.client_auth_type: invalid {auth!r} (expected NoClientCert, "
                             "VerifyClientCertIfGiven or RequireAndVerifyClientCert)")
    has_ca = bool(tls.get("client_ca_file") or tls.get("client_ca"))
    if has_ca and _CLIENT_AUTH[auth] == ssl.CERT_NONE:
        raise WebConfigError(f"{where}: client CA's have been configured without a Client Auth Policy "
                             "(client_auth_type)")
    if _CLIENT_AUTH[auth] != ssl.CERT_NONE and not has_ca:
        raise WebConfigError(f"{where}.client_auth_type: {auth} needs client_ca_file or client_ca")
    if not (tls.get("cert_file") or tls.get("cert")):
        raise WebConfigError(f"{where}: missing one of cert or cert_file")
    if not (tls.get("key_file") or tls.get("key")):
        raise WebConfigError(f"{where}: missing one of key or key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for key, attribute, default in (("min_version", "minimum_version", "TLS12"),
                                    ("max_version", "maximum_version", "TLS13")):
        name = str(tls.get(key) or default)
        if name not in _VERSIONS:
            raise WebConfigError(f"{where}.{key}: unknown TLS version {name!r} (expected {', '.join(_VERSIONS)})")
        setattr(ctx, attribute, _VERSIONS[name])
    cert = _file(base, tls["cert_file"], f"{where}.cert_file") if tls.get("cert_file") else None
    key_file = _file(base, tls["key_file"], f"{where}.key_file") if tls.get("key_file") else None
    cert_path, key_path, temporary = _inline_pair(cert, key_file, tls)
    try:
        ctx.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError(f"{where}: cannot load cert_file/key_file: {exc}") from None
    finally:
        for tmp in temporary:
            Path(tmp).unlink(missing_ok=True)
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if has_ca:
        try:
            if tls.get("client_ca_file"):
                ctx.load_verify_locations(cafile=_file(base, tls["client_ca_file"], f"{where}.client_ca_file"))
            else:
                ctx.load_verify_locations(cadata=str(tls["client_ca"]))
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"{where}: cannot load client CA: {exc}") from None
    if tls.get("client_allowed_sans"):
        raise WebConfigError(f"{where}.client_allowed_sans: not supported here; remove it")
    return ctx


def _inline_pair(cert: str | None, key: str | None, tls: dict[str, Any]) -> tuple[str, str, list[str]]:
    """``load_cert_chain`` takes files only: inline ``cert``/``key`` go to private temp files, removed once
    loaded (the third item lists them)."""
    paths: list[str] = []
    temporary: list[str] = []
    for path, inline in ((cert, tls.get("cert")), (key, tls.get("key"))):
        if path:
            paths.append(path)
            continue
        fd, tmp = tempfile.mkstemp(prefix="gpu-exporter-web-", suffix=".pem")
        with os.fdopen(fd, "w") as fh:
            fh.write(str(inline))
        paths.append(tmp)
        temporary.append(tmp)
    return paths[0], paths[1], temporary
