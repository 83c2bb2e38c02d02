"""A tiny HTTP server: ``/metrics`` serves the collector's latest snapshot, ``/health`` its health."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from exporter.collector import Snapshot
from exporter.exposition import CONTENT_TYPE

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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
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


def make_handler(snapshot: Callable[[], Snapshot], health: Callable[[], tuple[bool, str]],
                 on_gzip: Callable[[], None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
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

        def _send(self, code: int, content_type: str, body: bytes, gzipped: bool = False) -> None:
            # Status line, headers and body leave in one write: split writes on a keep-alive connection hit
            # Nagle + delayed ACK and cost ~40 ms per scrape.
            head = [f"HTTP/1.1 {code} {self.responses[code][0]}", f"Content-Type: {content_type}",
                    f"Content-Length: {len(body)}", "X-Content-Type-Options: nosniff"]
            if gzipped:
                head.append("Content-Encoding: gzip")
            payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
            self.wfile.write(payload if self.command == "HEAD" else payload + body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape would drown the log

    return Handler


class MetricsServer:
    def __init__(self, address: str, snapshot: Callable[[], Snapshot], health: Callable[[], tuple[bool, str]],
                 on_gzip: Callable[[], None] = lambda: None) -> None:
        self._httpd = _Server(parse_address(address), make_handler(snapshot, health, on_gzip))
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
