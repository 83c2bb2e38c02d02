"""``gpu-exporter``: dcgm-exporter's flags and environment variables, plus the backend choice."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

import clikit
from exporter.backends.base import Backend, BackendUnavailable
from exporter.collector import DEFAULT_EVENT_WINDOW_MS, Collector, CollectorOptions, PodAttribution
from exporter.counters import CountersError
from exporter.counters_source import CONFIGMAP_UNSET, CountersReloader
from exporter.kube_client import KubeClientError
from exporter.kube_features import KubeAccess, counters_source, pod_metadata
from exporter.pod_directory import KubeletLogDirectory, PodDirectory
from exporter.pod_metadata_labels import PodLabelPolicy, compile_allowlist, split_patterns
from exporter.process_attribution import ProcessAttribution
from exporter.procfs import ProcFs
from exporter.server import AddressError, MetricsServer

DCGM_DEFAULT_COUNTERS = "/etc/dcgm-exporter/default-counters.csv"
DEFAULT_KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

log = logging.getLogger("exporter")


class BackendName(StrEnum):
    nvml = "nvml"
    fake = "fake"


class GpuIdType(StrEnum):
    uid = "uid"
    device_name = "device-name"


class HostnameLabel(StrEnum):
    Hostname = "Hostname"
    hostname = "hostname"


class PodIdentitySource(StrEnum):
    kubelet_logs = "kubelet-logs"
    kubernetes_api = "kubernetes-api"


class LogFormat(StrEnum):
    text = "text"
    json = "json"


class StartupError(Exception):
    """A one-line reason the exporter cannot start."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


app = typer.Typer(add_completion=False, rich_markup_mode=None)


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def serve(
    address: Annotated[str, typer.Option("-a", "--address", envvar="DCGM_EXPORTER_LISTEN",
                                         help="Listen address, e.g. :9400 or [::]:9400.")] = ":9400",
    collect_interval: Annotated[int, typer.Option("-c", "--collect-interval", envvar="DCGM_EXPORTER_INTERVAL",
                                                  min=100, help="Sampling interval in milliseconds.")] = 1000,
    max_value_age: Annotated[int | None, typer.Option(
        "--max-value-age", envvar="GPU_EXPORTER_MAX_VALUE_AGE", min=1,
        help="Milliseconds a GPU's values may age (its NVML calls hang, collections stop) before /metrics leaves "
             "them out, so Prometheus marks the series stale. Default: max(3 collect intervals, 10000).")] = None,
    collectors: Annotated[str | None, typer.Option(
        "-f", "--collectors", envvar="DCGM_EXPORTER_COLLECTORS",
        help="dcgm-exporter counters CSV. Default: /etc/dcgm-exporter/default-counters.csv when present, "
             "else the built-in dcgm-exporter default set.")] = None,
    kubernetes: Annotated[bool, typer.Option("-k", "--kubernetes", envvar="DCGM_EXPORTER_KUBERNETES",
                                             help="Add pod/namespace/container labels from the kubelet.")] = False,
    pod_resources_kubelet_socket: Annotated[str, typer.Option(
        "--pod-resources-kubelet-socket", envvar="DCGM_POD_RESOURCES_KUBELET_SOCKET")] = DEFAULT_KUBELET_SOCKET,
    kubernetes_gpu_id_type: Annotated[GpuIdType, typer.Option(
        "--kubernetes-gpu-id-type", envvar="DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
        help="Match device-plugin IDs as GPU UUIDs (uid) or nvidiaN names (device-name, GKE).")] = GpuIdType.uid,
    nvidia_resource_names: Annotated[str, typer.Option(
        "--nvidia-resource-names", envvar="NVIDIA_RESOURCE_NAMES",
        help="Comma-separated extra GPU resource names, e.g. nvidia.com/gpu.shared.")] = "",
    pod_resources_refresh_interval: Annotated[int, typer.Option(
        "--pod-resources-refresh-interval", envvar="GPU_EXPORTER_POD_RESOURCES_REFRESH_INTERVAL", min=100,
        help="How often to ask the kubelet for GPU allocations, in milliseconds.")] = 2000,
    proc_root: Annotated[str, typer.Option(
        "--proc-root", envvar="GPU_EXPORTER_PROC_ROOT",
        help="proc filesystem that shows the host's processes (per-pod values on shared GPUs; needs hostPID).")
    ] = "/proc",
    pod_identity_source: Annotated[PodIdentitySource, typer.Option(
        "--pod-identity-source", envvar="GPU_EXPORTER_POD_IDENTITY_SOURCE",
        help="Where pod UIDs and container IDs of GPU processes get their pod names: kubelet-logs (the kubelet's "
             "/var/log/pods and /var/log/containers) or kubernetes-api (pods on $NODE_NAME, in-cluster).")
    ] = PodIdentitySource.kubelet_logs,
    kubelet_logs_dir: Annotated[str, typer.Option(
        "--kubelet-logs-dir", envvar="GPU_EXPORTER_KUBELET_LOGS_DIR",
        help="Directory holding the kubelet's pods/ and containers/ log directories.")] = "/var/log",
    devices: Annotated[str, typer.Option("-d", "--devices", envvar="DCGM_EXPORTER_DEVICES_STR",
                                         help="f (MIG instances where present, else GPUs), g, i or g+i.")] = "f",
    no_hostname: Annotated[bool, typer.Option("-n", "--no-hostname", envvar="DCGM_EXPORTER_NO_HOSTNAME")] = False,
    hostname_label: Annotated[HostnameLabel, typer.Option(
        "--hostname-label", envvar="GPU_EXPORTER_HOSTNAME_LABEL",
        help="Hostname (dcgm-exporter <= 4.5.x-4.8.2) or hostname (4.6.0-4.8.3 and later).")] = HostnameLabel.Hostname,
    replace_blanks_in_model_name: Annotated[bool, typer.Option(
        "--replace-blanks-in-model-name", envvar="DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME")] = False,
    backend: Annotated[BackendName, typer.Option("--backend", envvar="GPU_EXPORTER_BACKEND")] = BackendName.nvml,
    fake_gpus: Annotated[int, typer.Option("--fake-gpus", envvar="GPU_EXPORTER_FAKE_GPUS", min=1, max=1024,
                                           help="Number of simulated GPUs (fake backend).")] = 2,
    fake_state: Annotated[str | None, typer.Option(
        "--fake-state", envvar="GPU_EXPORTER_FAKE_STATE",
        help="JSON state file for the simulated GPUs, re-read at every collection.")] = None,
    fake_seed: Annotated[str, typer.Option("--fake-seed", envvar="GPU_EXPORTER_FAKE_SEED",
                                           help="Varies the simulated GPU UUIDs.")] = "",
    kubernetes_enable_pod_labels: Annotated[bool, typer.Option(
        "--kubernetes-enable-pod-labels", envvar="DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
        help="With -k: add the pod's labels (names sanitized) from the Kubernetes API.")] = False,
    kubernetes_enable_pod_uid: Annotated[bool, typer.Option(
        "--kubernetes-enable-pod-uid", envvar="DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
        help="With -k: add the pod's UID as pod_uid.")] = False,
    kubernetes_pod_label_allowlist_regex: Annotated[list[str] | None, typer.Option(
        "--kubernetes-pod-label-allowlist-regex", envvar="DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        help="Regexes (comma-separated or repeated) a pod label key must match to be exported; none: all.")
    ] = None,
    configmap_data: Annotated[str, typer.Option(
        "-m", "--configmap-data", envvar="DCGM_EXPORTER_CONFIGMAP_DATA",
        help="<namespace>:<name> of a ConfigMap whose 'metrics' key holds the counters; -f when unreadable.")
    ] = CONFIGMAP_UNSET,
    kubeconfig: Annotated[str | None, typer.Option(
        "--kubeconfig", envvar="GPU_EXPORTER_KUBECONFIG",
        help="Kubernetes API credentials from this kubeconfig instead of the pod's service account.")] = None,
    xid_count_window_size: Annotated[int, typer.Option(
        "-x", "--xid-count-window-size", envvar="DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", min=1,
        help="Window in milliseconds over which DCGM_EXP_XID_ERRORS_COUNT counts XIDs.")] = DEFAULT_EVENT_WINDOW_MS,
    clock_events_count_window_size: Annotated[int, typer.Option(
        "--clock-events-count-window-size", envvar="DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE", min=1,
        help="Window in milliseconds over which DCGM_EXP_CLOCK_EVENTS_COUNT counts clock events.")
    ] = DEFAULT_EVENT_WINDOW_MS,
    log_format: Annotated[LogFormat, typer.Option("--log-format", envvar="DCGM_EXPORTER_LOG_FORMAT")] = LogFormat.text,
    debug: Annotated[bool, typer.Option("--debug", envvar="DCGM_EXPORTER_DEBUG")] = False,
) -> None:
    """Export NVIDIA GPU metrics with dcgm-exporter's names and labels."""
    setup_logging(log_format.value, debug)
    if devices not in ("f", "g", "i", "g+i"):
        raise StartupError(f"--devices {devices!r}: expected f, g, i or g+i (device ranges are not supported)")
    if max_value_age is not None and max_value_age < 2 * collect_interval:
        raise StartupError(f"--max-value-age {max_value_age}: must be at least twice --collect-interval "
                           f"({collect_interval} ms), or values would vanish between collections")
    kube = KubeAccess(kubeconfig)
    source = counters_source(_counters_path(collectors), configmap_data, kube)
    counters = source.load()
    gpu_backend = open_backend(backend.value, fake_gpus, fake_state, fake_seed, collect_interval / 1000.0)
    pods = None
    watcher = None
    directory = None
    if kubernetes:
        from exporter.podresources.client import PodResourcesWatcher

        directory = pod_directory(pod_identity_source, kubelet_logs_dir, kube)
        watcher = PodResourcesWatcher(pod_resources_kubelet_socket, pod_resources_refresh_interval / 1000.0)
        watcher.refresh_once()
        watcher.start()
        extra = frozenset(n.strip() for n in nvidia_resource_names.split(",") if n.strip())
        processes = ProcessAttribution(ProcFs(proc_root), directory)
        policy = PodLabelPolicy(kubernetes_enable_pod_labels, kubernetes_enable_pod_uid,
                                compile_allowlist(split_patterns(kubernetes_pod_label_allowlist_regex or [])))
        pods = PodAttribution(watcher.snapshot, kubernetes_gpu_id_type.value, extra,  # type: ignore[arg-type]
                              processes, pod_metadata(policy, kube, os.environ.get("NODE_NAME")))
    elif kubernetes_enable_pod_labels or kubernetes_enable_pod_uid:
        log.warning("--kubernetes-enable-pod-labels and --kubernetes-enable-pod-uid have no effect without -k")
    options = CollectorOptions(
        interval_s=collect_interval / 1000.0,
        device_mode=devices,  # type: ignore[arg-type]
        hostname_label=None if no_hostname else hostname_label.value,
        hostname=os.environ.get("NODE_NAME") or socket.gethostname(),
        replace_blanks_in_model_name=replace_blanks_in_model_name,
        pods=pods,
        max_value_age_s=None if max_value_age is None else max_value_age / 1000.0,
        xid_count_window_ms=xid_count_window_size,
        clock_events_count_window_ms=clock_events_count_window_size,
    )
    try:
        server = MetricsServer(address, lambda: collector.snapshot, lambda: collector.health(),
                               lambda: setattr(collector, "gzip_wanted", True))
    except AddressError as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(f"cannot listen on {address}: {exc.strerror or exc}") from None
    collector = Collector(gpu_backend, counters, options)
    collector.start()
    server.start()
    reloader = None
    if source.path is not None:
        reloader = CountersReloader(source, collector.replace_counters, counters)
        reloader.start()
        signal.signal(signal.SIGHUP, lambda *_: reloader.request())
    log.info("serving %d fields from the %s backend on %s every %d ms%s", len(counters), gpu_backend.name,
             address, collect_interval, " with pod labels" if kubernetes else "")
    _wait_for_signal()
    log.info("shutting down")
    server.stop()
    if reloader is not None:
        reloader.stop()
    collector.stop()
    if watcher is not None:
        watcher.stop()
    kube.stop()
    gpu_backend.close()


def _counters_path(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    return DCGM_DEFAULT_COUNTERS if Path(DCGM_DEFAULT_COUNTERS).is_file() else None


def pod_directory(source: PodIdentitySource, kubelet_logs_dir: str, kube: KubeAccess) -> PodDirectory:
    if source is PodIdentitySource.kubelet_logs:
        return KubeletLogDirectory(kubelet_logs_dir)
    node = os.environ.get("NODE_NAME")
    if not node:
        raise StartupError("--pod-identity-source kubernetes-api needs NODE_NAME (set it from spec.nodeName)")
    try:
        return kube.pod_directory(node)
    except KubeClientError as exc:
        raise StartupError(f"--pod-identity-source kubernetes-api: {exc}") from None


def open_backend(name: str, fake_gpus: int, fake_state: str | None, fake_seed: str,
                 interval_s: float = 1.0) -> Backend:
    if name == "fake":
        from exporter.backends.fake import FakeBackend, FakeStateError

        fake = FakeBackend(fake_gpus, fake_state, seed=fake_seed)
        try:
            fake.open()
        except FakeStateError as exc:
            raise StartupError(str(exc)) from None
        return fake
    from exporter.backends.nvml import NvmlBackend, NvmlMissing

    nvml = NvmlBackend(gpm_min_gap_s=interval_s)
    try:
        nvml.open()
    except NvmlMissing as exc:
        raise StartupError(str(exc), code=1) from None
    except BackendUnavailable as exc:
        log.error("%s; serving /health 503 and retrying every collection", exc)
    return nvml


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(3600):
        pass


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"time": self.formatTime(record), "level": record.levelname.lower(),
                           "logger": record.name, "msg": record.getMessage()})


def setup_logging(fmt: str, debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)


def main(argv: list[str] | None = None) -> None:
    """Entry point: every usage or configuration error is one line on stderr, never a traceback."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["doctor"]:  # a subcommand beside the flag-only serve command dcgm-exporter users run
        from exporter.doctor import app as doctor_app

        clikit.run(doctor_app, "gpu-exporter doctor", args[1:], (StartupError, CountersError))
        return
    clikit.run(app, "gpu-exporter", args, (StartupError, CountersError))
