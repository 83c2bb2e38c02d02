"""Front-proxy (request-header) authentication: which client certificates may assert an identity in headers.

Pure: parsing the ``extension-apiserver-authentication`` ConfigMap, checking a presented client certificate
against the CA bundles, and reading ``X-Remote-*`` headers once the certificate has been trusted, as
k8s.io/apiserver's pkg/authentication/request/headerrequest does.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from adapter.auth.identity import User

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"

# What the Go library uses when the CA comes from flags instead of the ConfigMap.
DEFAULT_USERNAME_HEADERS = ("x-remote-user",)
DEFAULT_GROUP_HEADERS = ("x-remote-group",)
DEFAULT_EXTRA_PREFIXES = ("x-remote-extra-",)


class ConfigError(ValueError):
    """The ConfigMap or a flag holds something unusable; the message names the key."""


@dataclass(frozen=True)
class RequestHeaderConfig:
    """Who may proxy (CA + allowed CNs) and which headers carry the identity."""

    ca_pem: bytes
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = DEFAULT_USERNAME_HEADERS
    group_headers: tuple[str, ...] = DEFAULT_GROUP_HEADERS
    extra_prefixes: tuple[str, ...] = DEFAULT_EXTRA_PREFIXES
    uid_headers: tuple[str, ...] = ()

    cas: tuple[x509.Certificate, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Header names compare case-insensitively; ASGI hands them over lowercased.
        for name in ("username_headers", "group_headers", "extra_prefixes", "uid_headers"):
            object.__setattr__(self, name, tuple(h.strip().lower() for h in getattr(self, name) if h.strip()))
        object.__setattr__(self, "cas", load_pem_bundle(self.ca_pem, "requestheader-client-ca-file"))


@dataclass(frozen=True)
class ClientCAs:
    """Everything the TLS layer should accept client certificates from, and what each CA means."""

    requestheader: RequestHeaderConfig | None = None
    client_ca_pem: bytes | None = None  # ordinary x509 client auth: CN = user, O = groups
    client_cas: tuple[x509.Certificate, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cas = load_pem_bundle(self.client_ca_pem, "client-ca-file") if self.client_ca_pem else ()
        object.__setattr__(self, "client_cas", cas)

    def bundle(self) -> bytes:
        parts = [p for p in (self.requestheader.ca_pem if self.requestheader else None, self.client_ca_pem) if p]
        return b"\n".join(parts)


def load_pem_bundle(pem: bytes, what: str) -> tuple[x509.Certificate, ...]:
    try:
        return tuple(x509.load_pem_x509_certificates(pem))
    except ValueError as exc:
        raise ConfigError(f"{what}: not a PEM certificate bundle ({exc})") from None


def _string_list(data: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    """The ConfigMap stores lists as JSON-encoded string arrays; absent means 'not configured'."""
    raw = data.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        raise ConfigError(f"{CONFIGMAP_NAME} key {key}: expected a JSON array of strings, got {raw[:60]!r}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{CONFIGMAP_NAME} key {key}: expected a JSON array of strings, got {raw[:60]!r}")
    return tuple(value)


def from_configmap(data: Mapping[str, str]) -> ClientCAs:
    """Read kube-apiserver's published front-proxy settings (kube-system/extension-apiserver-authentication)."""
    client_ca = data.get("client-ca-file", "").encode().strip() or None
    ca = data.get("requestheader-client-ca-file", "").encode().strip()
    if not ca:
        return ClientCAs(None, client_ca)
    config = RequestHeaderConfig(
        ca_pem=ca,
        allowed_names=_string_list(data, "requestheader-allowed-names") or (),
        username_headers=_string_list(data, "requestheader-username-headers") or DEFAULT_USERNAME_HEADERS,
        group_headers=_string_list(data, "requestheader-group-headers") or DEFAULT_GROUP_HEADERS,
        extra_prefixes=_string_list(data, "requestheader-extra-headers-prefix") or DEFAULT_EXTRA_PREFIXES,
        uid_headers=_string_list(data, "requestheader-uid-headers") or (),
    )
    return ClientCAs(config, client_ca)


# -- certificates --------------------------------------------------------------------------------------------
class CertificateRejected(Exception):
    """A presented client certificate that no current CA vouches for (or that is expired, or not for clients)."""


def issuing_ca(cert: x509.Certificate, cas: Iterable[x509.Certificate], now: dt.datetime | None = None) -> bool:
    """True when one of ``cas`` signed ``cert`` directly and ``cert`` is valid now and usable for client auth.

    The TLS handshake already verified the full chain against every CA ever loaded; this re-check binds the
    certificate to the *current* bundle of one purpose (front-proxy vs ordinary client CA), which survives CA
    rotation: a CA removed from the ConfigMap stops vouching here even though OpenSSL's store still holds it.
    """
    now = now or dt.datetime.now(dt.UTC)
    if not (cert.not_valid_before_utc <= now <= cert.not_valid_after_utc):
        return False
    if not _client_auth_allowed(cert):
        return False
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


def _client_auth_allowed(cert: x509.Certificate) -> bool:
    """Go's verifier with KeyUsages=[ClientAuth]: no EKU extension means any usage."""
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return ExtendedKeyUsageOID.CLIENT_AUTH in usages or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in usages


def common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def organisations(cert: x509.Certificate) -> tuple[str, ...]:
    return tuple(str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))


def front_proxy_allowed(cert: x509.Certificate, config: RequestHeaderConfig, now: dt.datetime | None = None) -> bool:
    """Signed by the requestheader CA, and CN in the allowed names unless that list is empty."""
    if not issuing_ca(cert, config.cas, now):
        return False
    return not config.allowed_names or common_name(cert) in config.allowed_names


# -- headers -------------------------------------------------------------------------------------------------
Headers = Sequence[tuple[bytes, bytes]]


def identity_from_headers(headers: Headers, config: RequestHeaderConfig) -> User | None:
    """The identity a trusted proxy asserted; None when no username header is present."""
    decoded = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in headers]
    username = _first(decoded, config.username_headers)
    if not username:
        return None
    groups = tuple(v for k, v in decoded if k in config.group_headers and v)
    extra: dict[str, list[str]] = {}
    for key, value in decoded:
        for prefix in config.extra_prefixes:
            if key.startswith(prefix) and len(key) > len(prefix):
                extra.setdefault(unquote(key[len(prefix):]).lower(), []).append(value)
                break
    uid = _first(decoded, config.uid_headers)
    return User(username, uid, groups, {k: tuple(v) for k, v in extra.items()})


def _first(headers: list[tuple[str, str]], names: tuple[str, ...]) -> str:
    for name in names:
        for key, value in headers:
            if key == name and value:
                return value
    return ""


def identity_header_names(config: RequestHeaderConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(exact names, prefixes) of every header that carries identity, to strip before the app sees them."""
    return (config.username_headers + config.group_headers + config.uid_headers, config.extra_prefixes)
