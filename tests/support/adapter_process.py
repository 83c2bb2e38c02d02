"""Run the real adapter (``python -m adapter serve``) over HTTPS on a free loopback port, for tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence

import httpx

from tests.support.processes import terminate
from tests.support.prometheus import free_port


class AdapterProcess:
    def __init__(self, prometheus_url: str, cert_dir: str, args: Sequence[str] = (), ready_timeout: float = 30.0,
                 wait_ready: bool = True, disable_auth: bool = True, cwd: str | os.PathLike[str] | None = None,
                 ) -> None:
        """``disable_auth``: most tests are about metrics, not auth; the auth tests pass False and a kubeconfig.
        ``cwd``: run the adapter of another checkout (benchmarks compare two commits)."""
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "adapter", "serve", "--prometheus-url", prometheus_url, "--bind-address",
             "127.0.0.1", "--secure-port", str(self.port), "--cert-dir", cert_dir,
             *(["--disable-auth"] if disable_auth else []), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=cwd)
        self.client = httpx.Client(base_url=self.url, verify=False, timeout=10.0)
        deadline = time.monotonic() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"adapter exited with {self.proc.returncode}: {self.proc.stdout.read()}")  # type: ignore[union-attr]
            try:
                if self.client.get("/readyz").status_code == 200 or not wait_ready:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                log = self.stop()
                raise RuntimeError(f"adapter not ready in {ready_timeout}s: {log}")
            time.sleep(0.1)

    def get(self, path: str, **params: str) -> httpx.Response:
        return self.client.get(path, params=params or None)

    def stop(self) -> str:
        self.client.close()
        return terminate(self.proc)
