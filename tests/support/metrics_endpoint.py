"""A loopback /metrics endpoint whose exposition a test (or a benchmark) sets, for Prometheus to scrape."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class MetricsEndpoint:
    """``render``, when given, makes each scrape's body (counters that grow with time); otherwise ``text`` is served."""

    def __init__(self, text: str | bytes = "", render: Callable[[], str] | None = None) -> None:
        self.text = text
        self.render = render
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = endpoint._body if endpoint.render is None else endpoint.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def text(self) -> str:
        return self._body.decode()

    @text.setter
    def text(self, value: str | bytes) -> None:
        """Encoded once here, not on every scrape (benchmarks serve tens of megabytes)."""
        self._body = value if isinstance(value, bytes) else value.encode()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> MetricsEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
