"""Run the real exporter (``python -m exporter``) as a subprocess on a free loopback port, for tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence

import httpx

from tests.support.processes import terminate
from tests.support.prometheus import free_port


class ExporterProcess:
    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None, startup_timeout: float = 20.0) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "-a", self.address, *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **(env or {})}, start_new_session=True)
        self.client = httpx.Client(base_url=self.url, timeout=5.0)
        deadline = time.monotonic() + startup_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exporter exited with {self.proc.returncode}: {self.proc.stdout.read()}")  # type: ignore[union-attr]
            try:
                self.client.get("/health")
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("exporter did not start listening") from None
                time.sleep(0.05)

    def metrics(self) -> str:
        response = self.client.get("/metrics", headers={"Accept-Encoding": "identity"})
        response.raise_for_status()
        return response.text

    def stop(self) -> str:
        """Stop with SIGTERM (as the kubelet does) and return what the process logged."""
        self.client.close()
        return terminate(self.proc)
