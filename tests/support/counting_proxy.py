"""A loopback proxy in front of a real Prometheus that counts what the adapter asks.

Instant queries (``/api/v1/query``) are counted per PromQL and can be held until ``release()``; the targets API
can be made to fail, as it does behind a Thanos Querier that does not serve it. It also works as a forward proxy
(HTTP_PROXY): a request in absolute form goes to the same upstream, whatever host it names.
"""

from __future__ import annotations

import collections
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx


class CountingProxy:
    def __init__(self, upstream: str, *, hold_queries: bool = False, targets_status: int | None = None) -> None:
        self.queries: collections.Counter[str] = collections.Counter()
        self.paths: collections.Counter[str] = collections.Counter()
        self._gate = threading.Event()
        if not hold_queries:
            self._gate.set()
        self._lock = threading.Lock()
        proxy = self
        client = httpx.Client(base_url=upstream, timeout=30.0, trust_env=False)
        self._client = client

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._forward(b"")

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _forward(self, body: bytes) -> None:
                target = urlsplit(self.path)
                path = target.path
                with proxy._lock:
                    proxy.paths[path] += 1
                if path == "/api/v1/targets" and targets_status is not None:
                    self._reply(targets_status, b'{"status":"error","error":"not served here"}')
                    return
                if path == "/api/v1/query":
                    form = parse_qs(body.decode()) if body else parse_qs(urlsplit(self.path).query)
                    with proxy._lock:
                        proxy.queries[form.get("query", [""])[0]] += 1
                    proxy._gate.wait(timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
                upstream_path = path + (f"?{target.query}" if target.query else "")
                reply = client.request(self.command, upstream_path, content=body or None, headers=headers)
                self._reply(reply.status_code, reply.content)

            def _reply(self, status: int, content: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def instant_queries(self) -> int:
        with self._lock:
            return sum(self.queries.values())

    def hold(self) -> None:
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._client.close()
