"""Flag values turned into settings, each refusal one ``UsageError`` line naming the flag."""

from __future__ import annotations

import logging
import ssl
from typing import Literal

from yarl import URL

from adapter.cli import goflag
from adapter.cli.flags import UsageError
from adapter.presets.gpu import gpu_presets
from adapter.prometheus import credentials
from adapter.prometheus.client import PrometheusConfig, header_name_ok, header_value_ok
from adapter.prometheus.credentials import PrometheusCredentials
from adapter.rules import RulesConfig
from adapter.rulesfile.loader import load_rules
from adapter.server.inflight import RequestLimits
from adapter.server.lifecycle import ShutdownSettings
from adapter.server.serving import TLSSettings, TLSSettingsError
from clikit.flags import Options
from listener.limits import Limits

log = logging.getLogger("adapter")


def duration(text: str, flag: str) -> float:
    """A Go duration, as prometheus-adapter takes them (``1m``, ``30s``, ``1m30s``, ``1.5h``, ``500ms``); above 0."""
    try:
        seconds = goflag.parse_duration(text)
    except goflag.FlagValueError as exc:
        raise UsageError(f"{flag} {exc}") from None
    if seconds <= 0:
        raise UsageError(f"{flag} {text!r}: expected a duration like 30s, 1m or 1m30s")
    return seconds


def duration_or_zero(text: str, flag: str) -> float:
    """A duration, or zero (``0``, ``0s``) to turn the feature off; never negative."""
    try:
        seconds = goflag.parse_duration(text)
    except goflag.FlagValueError as exc:
        raise UsageError(f"{flag} {exc}") from None
    return seconds if seconds > 0 else 0.0


def shutdown_settings(delay: str, send_retry_after: bool, drain_timeout: str) -> ShutdownSettings:
    """The ``--shutdown-*`` flags; upstream refuses a negative delay, and a Retry-After window needs a delay to follow
    (without one, new requests would be turned away while the endpoint still receives them)."""
    delay_s = duration_or_zero(delay, "--shutdown-delay-duration")
    if send_retry_after and delay_s == 0:
        raise UsageError("--shutdown-send-retry-after needs --shutdown-delay-duration (e.g. 15s): without a delay, "
                         "new requests would get 429 while the Service still sends them here")
    return ShutdownSettings(delay_s, duration_or_zero(drain_timeout, "--shutdown-drain-timeout"), send_retry_after)


# The adapter drops a connection whose answer is still unwritten this long after --request-timeout.
WRITE_GRACE_S = 10.0

_VERBS: dict[str, Literal["GET", "POST"]] = {"GET": "GET", "POST": "POST"}  # --prometheus-verb, upper-cased


def listener_limits(o: Options) -> tuple[Limits, RequestLimits]:
    """The ``LIMITS`` flags: what a connection gets before it is authenticated, and requests at once."""
    timeout = duration(o.request_timeout, "--request-timeout")
    limits = Limits(read_header_timeout_s=duration(o.read_header_timeout, "--read-header-timeout"),
                    idle_timeout_s=duration(o.idle_timeout, "--idle-timeout"),
                    write_timeout_s=timeout + WRITE_GRACE_S, max_header_bytes=o.max_header_bytes,
                    max_request_line_bytes=min(Limits.max_request_line_bytes, o.max_header_bytes),
                    max_waiting_connections=o.max_waiting_connections)
    return limits, RequestLimits(max_in_flight=o.max_requests_inflight, timeout_s=timeout)


def csv(text: str, flag: str) -> list[str]:
    """A string-slice flag, read as pflag does (one CSV record); like the apiserver's options, an entry of only
    spaces is refused."""
    try:
        values = goflag.split_slice(text)
    except goflag.FlagValueError as exc:
        raise UsageError(f"{flag} {exc}") from None
    if any(not value.strip() for value in values):
        raise UsageError(f"{flag} {text!r}: empty value")
    return [value.strip() for value in values]


def rules(config: str | None) -> RulesConfig:
    return load_rules(config) if config else gpu_presets()


def serving_tls(min_version: str, cipher_suites: str) -> TLSSettings:
    try:
        return TLSSettings.parse(min_version, csv(cipher_suites, "--tls-cipher-suites"))
    except TLSSettingsError as exc:
        raise UsageError(str(exc)) from None


def prometheus_headers(values: list[str]) -> list[tuple[str, str]]:
    """``--prometheus-header`` as prometheus-adapter reads it (cmd/adapter/adapter.go, parseHeaderArgs): split at
    the first ``=``; no ``=`` sends the header empty; a repeated name sends every value, in order."""
    headers = []
    for item in values:
        key, _, value = item.partition("=")
        if not header_name_ok(key):
            raise UsageError(f"--prometheus-header {item!r}: {key!r} is not a valid header name (expected key=value)")
        if any(c in value for c in "\r\n\0"):
            raise UsageError(f"--prometheus-header {item!r}: a header value cannot hold a line break")
        if not header_value_ok(value):
            raise UsageError(f"--prometheus-header {key}: the value must be printable ASCII (it is not shown here)")
        headers.append((key, value))
    return headers


def prometheus_config(options: Options) -> PrometheusConfig:
    """The Prometheus flags (``flags.PROMETHEUS``) as a client configuration, credentials loaded and checked."""
    return prometheus_settings(
        options.prometheus_url, options.prometheus_verb, options.prometheus_timeout, options.prometheus_token_file,
        options.prometheus_ca_file, getattr(options, "prometheus_client_tls_cert_file", None),
        getattr(options, "prometheus_client_tls_key_file", None), options.prometheus_header,
        options.prometheus_auth_config, options.prometheus_auth_incluster)


def prometheus_settings(url: str, verb: str, timeout: str, token_file: str | None, ca_file: str | None,
                        cert_file: str | None, key_file: str | None, headers: list[str] | None,
                        auth_config: str | None = None, auth_incluster: bool = False) -> PrometheusConfig:
    if auth_config and auth_incluster:
        raise UsageError("--prometheus-auth-config and --prometheus-auth-incluster: may not use both in-cluster auth "
                         "and an explicit kubeconfig at the same time")
    method = _VERBS.get(verb.upper())
    if method is None:
        raise UsageError(f"--prometheus-verb {verb!r}: expected GET or POST")
    if bool(cert_file) != bool(key_file):
        raise UsageError("--prometheus-client-tls-cert-file and --prometheus-client-tls-key-file go together")
    try:
        parsed = URL(url)
    except ValueError:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"--prometheus-url {url!r}: expected an http:// or https:// URL with a host")
    extra = prometheus_headers(headers or [])
    found = PrometheusCredentials()
    if ca_file and (auth_config or auth_incluster):
        log.warning("--prometheus-ca-file is set, so %s is not read (as in prometheus-adapter); put the CA in the "
                    "kubeconfig instead to use its credentials",
                    "--prometheus-auth-config" if auth_config else "--prometheus-auth-incluster")
    if not ca_file and (auth_config or auth_incluster):  # upstream reads neither when a CA file is given
        found = credentials.from_kubeconfig(auth_config) if auth_config else credentials.in_cluster()
    source = "--prometheus-auth-config" if auth_config else "--prometheus-auth-incluster"
    pair = (cert_file, key_file) if cert_file else (found.client_cert_file, found.client_key_file)
    _check_tls_files(ca_file or found.ca_file, "--prometheus-ca-file" if ca_file else source,
                     pair, "--prometheus-client-tls-cert-file" if cert_file else source)
    if found.authorization and not token_file and not any(k.lower() == "authorization" for k, _ in extra):
        if not header_value_ok(found.authorization):
            raise UsageError(f"{source}: the credentials hold a line break, a control or a non-ASCII character")
        extra.append(("Authorization", found.authorization))
    return PrometheusConfig(url=url, method=method, timeout_s=duration(timeout, "--prometheus-timeout"),
                            bearer_token_file=token_file or found.bearer_token_file,
                            ca_file=ca_file or found.ca_file,
                            client_cert_file=cert_file or found.client_cert_file,
                            client_key_file=key_file or found.client_key_file,
                            insecure_skip_verify=found.insecure_skip_verify and not ca_file, headers=extra)


def check_ca_file(path: str, flag: str) -> None:
    """A PEM CA bundle that loads, or a one-line usage error naming ``flag``."""
    _check_tls_files(path, flag, (None, None), flag)


def check_key_pair(cert_file: str, key_file: str, flag: str) -> None:
    """A PEM certificate and key that load together, or a one-line usage error naming ``flag``."""
    _check_tls_files(None, flag, (cert_file, key_file), flag)


def _check_tls_files(ca_file: str | None, ca_source: str, pair: tuple[str | None, str | None],
                     pair_source: str) -> None:
    """Load the CA bundle and client key pair once, so a bad file is a one-line usage error at start."""
    try:
        if ca_file:
            ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError) as exc:
        raise UsageError(f"{ca_source} {ca_file}: not a readable PEM CA bundle ({_reason(exc)})") from None
    try:
        if pair[0]:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(pair[0], pair[1])
    except (ssl.SSLError, OSError) as exc:
        raise UsageError(f"{pair_source} {pair[0]}: not a readable PEM certificate and key ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
