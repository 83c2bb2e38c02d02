"""A real VictoriaMetrics (Debian's single-node ``victoria-metrics``) scraping test targets, and a loopback
gateway that puts it behind a multi-tenant, path-prefixed URL the way Mimir, Cortex, Thanos or VictoriaMetrics
cluster are reached (``/select/0/prometheus`` plus an ``X-Scope-OrgID`` tenant header)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

from loadtest.standins.prometheus import Target, free_port, prometheus_config
from tests.support.tools import require_tool


class VictoriaMetricsServer:
    """Single-node VictoriaMetrics with its data in a temporary directory, scraping ``targets`` every second.

    ``-search.latencyOffset`` is cut from its 30 s default, or a just-scraped sample would stay invisible."""

    def __init__(self, targets: Sequence[Target], *, job: str = "test", honor_labels: bool = True,
                 scrape_configs: Sequence[Mapping[str, Any]] | None = None) -> None:
        """``scrape_configs``: these jobs (Prometheus' format) instead of one job over ``targets``; Kubernetes
        discovery then re-reads its targets every second (VictoriaMetrics' default: 30 s)."""
        exe = require_tool("victoria-metrics")
        self.tmpdir = Path(tempfile.mkdtemp(prefix="victoria-metrics-test-"))
        if scrape_configs is None:
            scrape_configs = prometheus_config(targets, job=job, scrape_interval="1s",
                                               honor_labels=honor_labels)["scrape_configs"]
        config = {"global": {"scrape_interval": "1s"}, "scrape_configs": list(scrape_configs)}
        (self.tmpdir / "scrape.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = (self.tmpdir / "vm.log").open("wb")
        self.process = subprocess.Popen(
            [exe, f"-httpListenAddr=127.0.0.1:{self.port}", f"-storageDataPath={self.tmpdir / 'data'}",
             f"-promscrape.config={self.tmpdir / 'scrape.yml'}", "-search.latencyOffset=1s", "-retentionPeriod=1d",
             "-loggerLevel=ERROR", "-promscrape.kubernetesSDCheckInterval=1s"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        self._client = httpx.Client(base_url=self.url, timeout=5.0, trust_env=False)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"victoria-metrics exited: {(self.tmpdir / 'vm.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if self._client.get("/health").status_code == 200:
                    break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("victoria-metrics not healthy after 30 s")
            time.sleep(0.1)

    def wait_for(self, promql: str, timeout: float = 30.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        while True:
            result = self._client.get("/api/v1/query", params={"query": promql}).json()["data"]["result"]
            if result:
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"{promql!r} returned nothing from VictoriaMetrics in {timeout}s")
            time.sleep(0.25)

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets (``/api/v1/targets``): labels, discoveredLabels, scrapeUrl, health."""
        return self._client.get("/api/v1/targets").json()["data"]["activeTargets"]

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._client.close()
        self._log.close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


class TenantGateway:
    """Serves ``prefix`` + any Prometheus API path by forwarding it to ``upstream`` without the prefix, only for
    requests carrying ``X-Scope-OrgID: tenant``; others get 401, as a multi-tenant gateway answers. Records the
    paths it forwarded."""

    def __init__(self, upstream: str, prefix: str, tenant: str) -> None:
        self.forwarded: list[str] = []
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("X-Scope-OrgID") != tenant or not self.path.startswith(prefix + "/"):
                    self.send_response(401 if self.path.startswith(prefix + "/") else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path = self.path[len(prefix):]
                gateway.forwarded.append(path.split("?")[0])
                request = urllib.request.Request(upstream + path, data=body or None, method=self.command,
                                                 headers={"Content-Type": self.headers.get("Content-Type", "")})
                try:
                    with urllib.request.urlopen(request, timeout=10) as answer:
                        status, payload = answer.status, answer.read()
                except urllib.error.HTTPError as exc:
                    status, payload = exc.code, exc.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _relay
            do_POST = _relay

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{prefix}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
