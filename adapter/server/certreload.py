"""The HTTPS serving certificate, read again when its files change (a cert-manager renewal, a rotated Secret).

The listening ``SSLContext`` keeps the pair read at start; its ``sni_callback``, which OpenSSL calls for every
ClientHello (with or without a server name), hands the connection the context built from the current files. So
every new handshake presents the current certificate, connections already open keep theirs, and nothing is
restarted. The files are checked (``os.stat``) at each handshake, as the KEDA scaler's port checks its own
(``adapter.filewatch``, the one mechanism for both).

Every context built later gets what the first one got after it was made (``configure``: the client CAs the
authenticator trusts), so client certificates verify the same on both sides of a renewal.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from cryptography import x509

from adapter.filewatch import WatchedFiles

log = logging.getLogger("adapter.tls")


class ServingCertificate:
    """``make(cert_file, key_file)`` builds a server context; :attr:`listening` is the one to listen with."""

    def __init__(self, cert_file: str, key_file: str, make: Callable[[str, str], ssl.SSLContext]) -> None:
        self.cert_file = cert_file
        self._make = make
        self._configure: list[Callable[[ssl.SSLContext], None]] = []
        self.files = WatchedFiles((cert_file, key_file), lambda: make(cert_file, key_file),
                                  f"serving certificate {cert_file}", log)
        self.listening = self.files.current
        self.not_after = self._not_after()
        self.listening.sni_callback = self._choose

    def configure(self, step: Callable[[ssl.SSLContext], None]) -> None:
        """Apply ``step`` to the current context now and to every context built after a change."""
        self._configure.append(step)
        step(self.files.current)

    def current(self) -> ssl.SSLContext:
        """The context of the current files (built now if they changed)."""
        built = self.files.refresh()
        if built is not None:
            for step in self._configure:
                step(built)
            self.not_after = self._not_after()
        return self.files.current

    def _choose(self, connection: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None,
                _context: ssl.SSLContext) -> None:
        context = self.current()
        if context is not connection.context:
            connection.context = context  # allowed in this callback: the handshake has not chosen a certificate
        return None

    def _not_after(self) -> float | None:
        """When the certificate in force expires (a self-metric), as a Unix time; None when it cannot be read."""
        try:
            cert = x509.load_pem_x509_certificate(Path(self.cert_file).read_bytes())
        except (OSError, ValueError):
            return None
        return cert.not_valid_after_utc.timestamp()
