"""Serving certificates: the given pair, or a self-signed one generated into --cert-dir (kept across restarts)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CERT_NAME, KEY_NAME = "apiserver.crt", "apiserver.key"


def self_signed(cert_dir: str, hosts: list[str], days: int = 365) -> tuple[str, str]:
    """Paths of a certificate/key pair for ``hosts`` in ``cert_dir``, creating it when missing or expiring."""
    directory = Path(cert_dir)
    cert_path, key_path = directory / CERT_NAME, directory / KEY_NAME
    if cert_path.exists() and key_path.exists() and _still_valid(cert_path, hosts):
        return str(cert_path), str(key_path)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else "gpu-adapter")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(subject_alt_names(hosts), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_bytes = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key_bytes)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


def subject_alt_names(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    """A certificate's names for ``hosts``: an IP address SAN for each that parses as one, a DNS SAN otherwise."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _still_valid(cert_path: Path, hosts: list[str]) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    present = {str(n) for n in sans.get_values_for_type(x509.DNSName)}
    present |= {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    fresh = cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=7)
    return fresh and set(hosts) <= present
