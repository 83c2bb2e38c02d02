"""A tiny HTTP server: ``/metrics`` serves the collector's latest snapshot, ``/health`` its health."""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from exporter.exposition import CONTENT_TYPE
from exporter.serving.collector import Snapshot
from exporter.serving.web_config import WebGuard

log = logging.getLogger("exporter.server")

INDEX = b"""<html><head><title>GPU Exporter</title></head><body><h1>GPU Exporter</h1>
<p><a href="/metrics">Metrics</a> &middot; <a href="/health">Health</a></p></body></html>
"""


class AddressError(ValueError):
    pass


def parse_address(address: str) -> tuple[str, int]:
    """dcgm-exporter's listen syntax: ``:9400`` (all interfaces), ``host:9400``, ``[::]:9400``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise AddressError(f"invalid listen address {address!r} (expected [host]:port, e.g. :9400)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


@dataclass(frozen=True)
class Serving:
    """How requests are served: dcgm-exporter's ``--web-config-file`` and ``--web-read/write-timeout``."""

    web: WebGuard = field(default_factory=WebGuard)
    read_timeout_s: float | None = 10.0
    write_timeout_s: float | None = 30.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 web: WebGuard | None = None) -> None:
        self.web = web or WebGuard()
        host, port = address
        if host == "":
            # ':9400' means every interface: listen dual-stack when IPv6 exists, else on 0.0.0.0.
            self.address_family = socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET
            host = "::" if socket.has_ipv6 else "0.0.0.0"
        elif ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        if self.web.tls_enabled:  # the handshake runs in the request's thread (finish_request), not here
            self.web.refresh()
            tls = self.web.config.tls
            assert tls is not None
            sock = tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(self.RequestHandlerClass.timeout)  # type: ignore[attr-defined]
            try:
                request.do_handshake()
            except (OSError, ssl.SSLError) as exc:
                log.debug("TLS handshake with %s failed: %s", client_address, exc)
                return
        super().finish_request(request, client_address)


def make_handler(snapshot: Callable[[], Snapshot], health: Callable[[], tuple[bool, str]],
                 on_gzip: Callable[[], None], serving: Serving | None = None) -> type[BaseHTTPRequestHandler]:
    serving = serving or Serving()
    web = serving.web
    read_timeout, write_timeout = serving.read_timeout_s or None, serving.write_timeout_s or None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        timeout = read_timeout

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            refused = web.refusal(self.headers.get("Authorization"))
            if refused is not None:  # exporter-toolkit's answers: http.Error with the status text
                self._send(refused, "text/plain; charset=utf-8", f"{self.responses[refused][0]}\n".encode(),
                           www_authenticate=refused == 401)
            elif path == "/metrics":
                snap = snapshot()
                gzip_ok = "gzip" in self.headers.get("Accept-Encoding", "")
                if gzip_ok:
                    on_gzip()
                body = snap.gzipped() if gzip_ok else snap.body
                self._send(200, CONTENT_TYPE, body, gzip_ok)
            elif path == "/health":
                ok, reason = health()
                self._send(200 if ok else 503, "text/plain; charset=utf-8", (reason + "\n").encode())
            elif path == "/":
                self._send(200, "text/html; charset=utf-8", INDEX)
            else:
                self._send(404, "text/plain; charset=utf-8", b"404 page not found\n")

        def do_HEAD(self) -> None:
            self.do_GET()

        def _send(self, code: int, content_type: str, body: bytes, gzipped: bool = False,
                  www_authenticate: bool = False) -> None:
            # Status line, headers and body leave in one write: split writes on a keep-alive connection hit
            # Nagle + delayed ACK and cost ~40 ms per scrape.
            head = [f"HTTP/1.1 {code} {self.responses[code][0]}", f"Content-Type: {content_type}",
                    f"Content-Length: {len(body)}"]
            head += web.header_lines
            if www_authenticate:
                head.append("WWW-Authenticate: Basic")
            if gzipped:
                head.append("Content-Encoding: gzip")
            payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
            self.connection.settimeout(write_timeout)
            self.wfile.write(payload if self.command == "HEAD" else payload + body)
            self.connection.settimeout(read_timeout)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape would drown the log

    return Handler


class MetricsServer:
    def __init__(self, address: str, snapshot: Callable[[], Snapshot], health: Callable[[], tuple[bool, str]],
                 on_gzip: Callable[[], None] = lambda: None, serving: Serving | None = None) -> None:
        serving = serving or Serving()
        self._httpd = _Server(parse_address(address), make_handler(snapshot, health, on_gzip, serving),
                              serving.web)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.5)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
