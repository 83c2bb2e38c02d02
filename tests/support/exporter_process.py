"""Run the real exporter (``python -m exporter``) as a subprocess on a free loopback port, for tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import httpx

from tests.support.processes import Output, terminate
from tests.support.prometheus import free_port
from tests.support.waiting import wait_until


class ExporterProcess:
    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None, startup_timeout: float = 20.0, *,
                 listen_by_env: bool = False, scheme: str = "http", client: dict[str, Any] | None = None,
                 cwd: str | os.PathLike[str] | None = None) -> None:
        """``listen_by_env``: give the address as ``DCGM_EXPORTER_LISTEN`` (as the GPU Operator does) instead of
        ``-a``; ``scheme``/``client``: for TLS, the URL scheme and httpx.Client arguments (verify, cert, auth);
        ``cwd``: run the exporter of another checkout (benchmarks compare two commits)."""
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"{scheme}://{self.address}"
        listen = [] if listen_by_env else ["-a", self.address]
        env = {**(env or {}), **({"DCGM_EXPORTER_LISTEN": self.address} if listen_by_env else {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", *listen, *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **env}, start_new_session=True, cwd=cwd)
        self.output = Output(self.proc)
        self.client = httpx.Client(base_url=self.url, timeout=5.0, **(client or {}))
        try:
            wait_until(self._answering, startup_timeout, "the exporter answering /health")
        except AssertionError as exc:
            raise RuntimeError(f"{exc}: {self.stop()}") from None

    def _answering(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"exporter exited with {self.proc.returncode}: {self.output.finish()}")
        try:
            self.client.get("/health")
            return True
        except httpx.TransportError:
            return False

    def metrics(self) -> str:
        """One scrape on the kept-alive client. A reset or close of that connection is retried once on a new one, as
        Go's http.Transport (Prometheus') retries an idempotent request on a reused connection: the exporter ends an
        idle connection at its read timeout, and a request sent at that moment meets the close (seen once under load
        in the listener tests, whose waits are as long as the timeout)."""
        try:
            response = self.client.get("/metrics", headers={"Accept-Encoding": "identity"})
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
            response = self.client.get("/metrics", headers={"Accept-Encoding": "identity"})
        response.raise_for_status()
        return response.text

    def stop(self) -> str:
        """Stop with SIGTERM (as the kubelet does) and return what the process logged."""
        self.client.close()
        return terminate(self.proc, output=self.output)
