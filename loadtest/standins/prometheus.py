"""Run a real Prometheus server (the ``prometheus`` binary on PATH) with its config and TSDB in a temp directory.

Prometheus 2.42 (Debian 12) hands new targets to its scrape manager only every 5 s, so the first sample appears
about 5-6 s after start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

__all__ = ["PrometheusError", "PrometheusServer", "Target", "free_port", "prometheus_config"]

Target = str | tuple[str, Mapping[str, str]]
"""A scrape target: ``"host:port"`` or ``("host:port", {"label": "value"})``."""


class PrometheusError(RuntimeError):
    """Prometheus failed to start or answered an API call with an error."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _static_configs(targets: Sequence[Target]) -> list[dict[str, Any]]:
    """Group plain targets together; give each labelled target its own static config."""
    plain = [t for t in targets if isinstance(t, str)]
    configs: list[dict[str, Any]] = [{"targets": plain}] if plain else []
    for target in targets:
        if not isinstance(target, str):
            address, labels = target
            configs.append({"targets": [address], "labels": dict(labels)})
    return configs


def prometheus_config(
    targets: Sequence[Target],
    *,
    job: str,
    scrape_interval: str = "1s",
    honor_labels: bool = False,
    metrics_path: str = "/metrics",
    rule_files: Sequence[str | Path] = (),
    evaluation_interval: str | None = None,
    extra_scrape_configs: Sequence[Mapping[str, Any]] = (),
    scrape_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``prometheus.yml`` document for one scrape job over ``targets`` (``scrape_options`` adds keys to its
    scrape config: ``scheme``, ``tls_config``, ``basic_auth``), then ``extra_scrape_configs``."""
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": evaluation_interval or scrape_interval,
        },
        "rule_files": [str(Path(f).resolve()) for f in rule_files],
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": honor_labels,
                "metrics_path": metrics_path,
                "static_configs": _static_configs(targets),
                **(scrape_options or {}),
            },
            *(dict(c) for c in extra_scrape_configs),
        ],
    }


class PrometheusServer:
    """A Prometheus process scraping ``targets``, with its config and TSDB in a temporary directory.

    Constructing one only settles its configuration and port; :meth:`start` (or entering it as a context manager)
    writes the config, starts the process (in a session of its own, so a terminal's Ctrl-C reaches only its parent,
    which stops it) and returns once ``/-/ready`` answers 200. :meth:`stop` ends the process and removes the
    directory, at any point and as often as it is called.
    """

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        job: str = "prometheus",
        scrape_interval: str = "1s",
        honor_labels: bool = False,
        metrics_path: str = "/metrics",
        rule_files: Sequence[str | Path] = (),
        evaluation_interval: str | None = None,
        extra_scrape_configs: Sequence[Mapping[str, Any]] = (),
        extra_args: Sequence[str] = (),
        binary: str = "prometheus",
        startup_timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        tmp_prefix: str = "prometheus-",
        scrape_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = prometheus_config(
            targets,
            job=job,
            scrape_interval=scrape_interval,
            honor_labels=honor_labels,
            metrics_path=metrics_path,
            rule_files=rule_files,
            evaluation_interval=evaluation_interval,
            extra_scrape_configs=extra_scrape_configs,
            scrape_options=scrape_options,
        )
        self.extra_args = tuple(extra_args)
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.env = env
        self.tmp_prefix = tmp_prefix
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._tmpdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._client = httpx.Client(base_url=self.url, timeout=5.0, trust_env=False)

    def start(self) -> PrometheusServer:
        """Start the process and wait until it is ready; on any failure it is stopped again. Returns the server, so
        that ``PrometheusServer(...).start()`` reads as one step."""
        if self._process is not None:
            raise PrometheusError("prometheus was started already")
        exe = shutil.which(self.binary)
        if exe is None:
            raise PrometheusError(f"{self.binary!r} not found on PATH; run scripts/install-tools.sh")
        self._tmpdir = Path(tempfile.mkdtemp(prefix=self.tmp_prefix))
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        try:
            with self.log_path.open("wb") as log:
                self._process = subprocess.Popen(
                    [exe, *self._arguments()],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, **self.env} if self.env else None,
                )
        except OSError:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            raise
        try:
            self._wait_ready(self.startup_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _arguments(self) -> list[str]:
        return [
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.tmpdir / 'data'}",
            "--storage.tsdb.retention.time=1h",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
            *self.extra_args,
        ]

    @property
    def process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise PrometheusError("prometheus is not started: call start(), or enter it with `with`")
        return self._process

    @property
    def tmpdir(self) -> Path:
        """The directory of its config, log and TSDB (removed by :meth:`stop`)."""
        if self._tmpdir is None:
            raise PrometheusError("prometheus is not started: call start(), or enter it with `with`")
        return self._tmpdir

    @property
    def config_path(self) -> Path:
        return self.tmpdir / "prometheus.yml"

    @property
    def log_path(self) -> Path:
        return self.tmpdir / "prometheus.log"

    @property
    def pid(self) -> int:
        """Process id (and process group id) of the Prometheus process."""
        return self.process.pid

    def log_tail(self, lines: int = 20) -> str:
        """Return the last ``lines`` lines of Prometheus's combined stdout/stderr."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            code = self.process.poll()
            if code is not None:
                raise PrometheusError(f"prometheus exited with code {code} at startup:\n{self.log_tail()}")
            with contextlib.suppress(httpx.TransportError):
                if self._client.get("/-/ready").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise PrometheusError(f"prometheus not ready after {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.1)

    def _api(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        resp = self._client.get(f"/api/v1/{path}", params=params)
        try:
            body = resp.json()
        except ValueError:
            raise PrometheusError(f"GET {path}: HTTP {resp.status_code}: {resp.text[:500]}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"GET {path} {params or ''}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[Any]:
        """Run an instant query; return ``data.result`` (a list of ``{"metric", "value"}`` for vectors)."""
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = at
        return list(self._api("query", params)["result"])

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[list[Any]], bool] = bool,
        timeout: float = 30.0,
        interval: float = 0.25,
    ) -> list[Any]:
        """Poll ``query(promql)`` until ``predicate(result)`` holds; return that result.

        Raises :class:`TimeoutError` (with the last result) after ``timeout`` seconds. Query errors
        (e.g. bad PromQL) are raised at once.
        """
        deadline = time.monotonic() + timeout
        result: list[Any] = []
        while True:
            with contextlib.suppress(httpx.TransportError):
                result = self.query(promql)
                if predicate(result):
                    return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"{promql!r} did not satisfy the predicate in {timeout}s; last: {result}")
            time.sleep(interval)

    def targets(self) -> list[dict[str, Any]]:
        """Return the active scrape targets (``/api/v1/targets`` ``activeTargets``)."""
        return list(self._api("targets", {"state": "active"})["activeTargets"])

    def wait_targets_up(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Wait until every active target has been scraped successfully; return the targets."""
        deadline = time.monotonic() + timeout
        while True:
            targets = self.targets()
            if targets and all(t.get("health") == "up" for t in targets):
                return targets
            if time.monotonic() > deadline:
                raise TimeoutError(f"targets not all up after {timeout}s: {targets}")
            time.sleep(0.2)

    def reload(self) -> None:
        """Ask Prometheus to re-read its config file (edit ``config_path`` first)."""
        self._client.post("/-/reload").raise_for_status()

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the process group (SIGKILL after ``timeout``), then remove the temporary directory."""
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._client.close()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self if self._process is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
