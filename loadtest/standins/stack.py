"""The metrics path of the demo, as real processes: the exporter (fake GPUs, Kubernetes mode), the inference
replicas' own ``/metrics`` (a file-based target list the deployment keeps) and, in front of the replicas, the
gateway's endpoint-picker metrics when there is one -> Prometheus -> the adapter serving custom.metrics.k8s.io and
external.metrics.k8s.io over HTTPS (GPU presets plus the vllm preset, and the inference-gateway preset with a
gateway). Every process is registered with the run's :class:`~loadtest.standins.processes.ChildProcesses`."""

from __future__ import annotations

import contextlib
import ssl
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from loadtest.standins.processes import Child, ChildProcesses
from loadtest.standins.prometheus import PrometheusServer, free_port
from loadtest.standins.statefiles import atomic_write_json

__all__ = ["GATEWAY_RULES", "RULES", "MetricsStack", "StackConfig", "StackError"]

RULES = "include: [gpu-presets, vllm]\n"
"""The adapter's rules: the GPU presets (the exporter's series) and the vllm preset (the replicas' own)."""
GATEWAY_RULES = "include: [gpu-presets, vllm, inference-gateway]\n"
"""With a gateway: its endpoint-picker series through the inference-gateway preset too."""


class StackError(RuntimeError):
    """One-line reason; ``log_tail`` holds the end of the failing process's log."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


@dataclass(frozen=True)
class StackConfig:
    gpu_count: int
    gpu_state: Path
    kubelet_socket: Path
    objects_file: Path
    cert_dir: Path
    inference_targets: Path
    rules_file: Path
    collect_interval_ms: int = 500
    pod_resources_refresh_ms: int = 1000
    scrape_interval_s: float = 1.0
    relist_interval_s: float = 5.0
    startup_timeout_s: float = 60.0
    gateway: tuple[str, Mapping[str, str]] | None = None  # (host:port, target labels) of the gateway's /metrics
    kube_state: str | None = None  # host:port of a kube-state-metrics stand-in
    extra_rules: str = ""  # rules appended to the rules file (its own rules and externalRules sections)
    recording_rules: Sequence[Mapping[str, str]] = ()  # Prometheus recording rules (one group)


class MetricsStack:
    """``start()`` blocks until the exporter answers, Prometheus is ready and the adapter's ``/readyz`` is 200."""

    def __init__(self, config: StackConfig, processes: ChildProcesses) -> None:
        self.config = config
        self.processes = processes
        self.exporter_address = f"127.0.0.1:{free_port()}"
        self.adapter_url = f"https://127.0.0.1:{free_port()}"
        self.prometheus: PrometheusServer | None = None
        self.exporter: Child | None = None
        self.adapter: Child | None = None
        self._abort = threading.Event()

    def abort(self) -> None:
        """Make a :meth:`start` running in another thread give up at its next step."""
        self._abort.set()

    @property
    def adapter_ca(self) -> Path:
        """The adapter's self-signed serving certificate (SAN 127.0.0.1), which clients trust."""
        return self.config.cert_dir / "apiserver.crt"

    def start(self) -> None:
        cfg = self.config
        self.exporter = self.processes.spawn("exporter", [
            sys.executable, "-m", "exporter", "--backend", "fake", "--fake-gpu-count", str(cfg.gpu_count),
            "--fake-state", str(cfg.gpu_state), "-k", "--pod-resources-kubelet-socket", str(cfg.kubelet_socket),
            "--pod-resources-refresh-interval", str(cfg.pod_resources_refresh_ms),
            "-a", self.exporter_address, "-c", str(cfg.collect_interval_ms)])
        if not cfg.inference_targets.exists():
            atomic_write_json(cfg.inference_targets, [])
        cfg.rules_file.write_text((RULES if cfg.gateway is None else GATEWAY_RULES) + cfg.extra_rules)
        rule_files = []
        if cfg.recording_rules:
            rule_files.append(cfg.rules_file.with_name("recording-rules.yaml"))
            rule_files[0].write_text(yaml.safe_dump({"groups": [{"name": "demo", "rules": list(cfg.recording_rules)}]}))
        # The replicas, as a PodMonitor would scrape them: their series get the target's namespace/pod labels.
        every = {"scrape_interval": f"{cfg.scrape_interval_s:g}s", "scrape_timeout": f"{cfg.scrape_interval_s:g}s"}
        jobs: list[dict[str, Any]] = [{"job_name": "inference", **every, "file_sd_configs": [
            {"files": [str(cfg.inference_targets)], "refresh_interval": "1s"}]}]
        if cfg.gateway is not None:  # as a ServiceMonitor on the endpoint picker would: its namespace and pod
            address, labels = cfg.gateway
            jobs.append({"job_name": "gateway", **every,
                         "static_configs": [{"targets": [address], "labels": dict(labels)}]})
        if cfg.kube_state is not None:  # kube-state-metrics keeps the namespace/pod labels of its series
            jobs.append({"job_name": "kube-state-metrics", "honor_labels": True, **every,
                         "static_configs": [{"targets": [cfg.kube_state]}]})
        self.prometheus = PrometheusServer([self.exporter_address], job="gpu-exporter",
                                           scrape_interval=f"{cfg.scrape_interval_s:g}s", honor_labels=True,
                                           extra_scrape_configs=jobs, rule_files=rule_files,
                                           env=self.processes.env, startup_timeout=cfg.startup_timeout_s,
                                           tmp_prefix="gpu-loadtest-prometheus-")
        self.prometheus.start()
        self.processes.adopt("prometheus", self.prometheus.process, self.prometheus.log_path)
        self._check_abort()
        port = self.adapter_url.rsplit(":", 1)[1]
        self.adapter = self.processes.spawn("adapter", [
            sys.executable, "-m", "adapter", "serve", "--prometheus-url", self.prometheus.url,
            "--bind-address", "127.0.0.1", "--secure-port", port, "--cert-dir", str(cfg.cert_dir),
            "--metrics-relist-interval", f"{cfg.relist_interval_s:g}s", "--disable-auth", "--config",
            str(cfg.rules_file),
            "--standalone-objects", str(cfg.objects_file)])
        deadline = time.monotonic() + cfg.startup_timeout_s
        self._wait("exporter", self.exporter, f"http://{self.exporter_address}/health", None, deadline)
        self._wait("adapter", self.adapter, f"{self.adapter_url}/readyz", self.adapter_ca, deadline)

    def _check_abort(self) -> None:
        if self._abort.is_set():
            raise StackError("start-up aborted")

    def _wait(self, what: str, child: Child, url: str, ca: Path | None, deadline: float) -> None:
        while True:
            self._check_abort()
            if not child.alive:
                raise StackError(f"{what} exited with code {child.process.returncode}", child.log_tail())
            verify: ssl.SSLContext | bool = False
            if ca is not None and ca.exists():
                verify = ssl.create_default_context(cafile=str(ca))
            if ca is None or verify is not False:
                with contextlib.suppress(httpx.TransportError, ssl.SSLError):
                    if httpx.get(url, verify=verify, timeout=2.0, trust_env=False).status_code == 200:
                        return
            if time.monotonic() > deadline:
                raise StackError(f"{what} not ready in time", child.log_tail())
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the three processes (the registry's cleanup is the backstop) and remove Prometheus' data."""
        children = [c for c in (self.adapter, self.exporter) if c is not None]
        self.processes.stop_many(children, grace_s=5.0)
        if self.prometheus is not None:
            self.prometheus.stop()
