"""Run the real adapter (``python -m adapter serve``) over HTTPS on a free loopback port, for tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

import httpx

from tests.support.processes import Output, terminate
from tests.support.prometheus import free_port
from tests.support.waiting import wait_until


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
        self.output = Output(self.proc)
        self.client = httpx.Client(base_url=self.url, verify=False, timeout=10.0)
        try:
            wait_until(lambda: (status := self._readyz()) is not None and (status == 200 or not wait_ready),
                       ready_timeout, "/readyz answering 200" if wait_ready else "/readyz answering", interval=0.1)
        except AssertionError as exc:
            raise RuntimeError(f"adapter: {exc}: {self.stop()}") from None

    def _readyz(self) -> int | None:
        """``GET /readyz``'s status; None while nothing listens."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"adapter exited with {self.proc.returncode}: {self.output.finish()}")
        try:
            return self.client.get("/readyz").status_code
        except httpx.TransportError:
            return None

    def get(self, path: str, **params: str) -> httpx.Response:
        return self.client.get(path, params=params or None)

    def stop(self) -> str:
        self.client.close()
        return terminate(self.proc, output=self.output)

    def __enter__(self) -> AdapterProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
