"""``gpu-exporter``: dcgm-exporter's flags and environment variables (``exporter/cli/flags.py``), plus ours."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

import clikit
from clikit.durations import DurationError
from clikit.durations import parse_go_duration as parse_duration
from exporter.cli.config_file import ConfigFile, ConfigFileError, load_config_file
from exporter.cli.flags import FlagError, Parsed, parse, usage
from exporter.cli.kube_features import KubeAccess, counters_source, pod_metadata
from exporter.cli.startup import StartupError, open_backend
from exporter.fields.counters import Counter, CountersError, parse_counters
from exporter.pods.directory import KubeletLogDirectory, PodDirectory
from exporter.pods.kube_client import KubeClientError
from exporter.pods.metadata_labels import PodLabelPolicy, compile_allowlist, split_patterns
from exporter.pods.process_attribution import ProcessAttribution
from exporter.pods.procfs import ProcFs
from exporter.serving.collector import Collector, CollectorOptions, PodAttribution
from exporter.serving.counters_source import CountersReloader, CountersSource
from exporter.serving.server import AddressError, MetricsServer, Serving
from exporter.serving.web_config import WebConfigError, WebGuard
from listener.limits import raise_open_files_limit

if TYPE_CHECKING:
    from exporter.pods.podresources.client import PodResourcesWatcher

log = logging.getLogger("exporter")


app = typer.Typer(add_completion=False, rich_markup_mode=None)
SIGNAL_POLL_S = 0.5  # the longest a SIGTERM taken by another thread waits for the main thread


# Flags are read by exporter.cli.flags (Go's flag syntax, from one table), so click passes the command line through.
@app.command(context_settings={"help_option_names": [], "ignore_unknown_options": True,
                               "allow_extra_args": True, "allow_interspersed_args": False})
def serve(ctx: typer.Context) -> None:
    """Export NVIDIA GPU metrics with dcgm-exporter's names and labels (flags: --help)."""
    run(list(ctx.args), os.environ)


def read_settings(args: list[str], environ: Mapping[str, str]) -> tuple[Parsed, ConfigFile | None]:
    """Flags over environment over ``--config-file`` over defaults, as dcgm-exporter 4.8.3."""
    parsed = parse(args, environ)
    path = parsed.settings.config_file
    if not path or parsed.action != "run":
        return parsed, None
    config = load_config_file(path)
    return parse(args, environ, config.values), config


def run(args: list[str], environ: Mapping[str, str]) -> None:
    parsed, config = read_settings(args, environ)
    if parsed.action == "help":
        sys.stdout.write(usage("gpu-exporter"))
        return
    if parsed.action == "version":
        print(f"gpu-exporter version {_version()}")
        return
    s = parsed.settings
    setup_logging(s.log_format, s.debug)
    _warn_accepted(parsed, config)
    check_settings(s)
    kube = KubeAccess(s.kubeconfig or None)
    source, counters = _counters(parsed, config, kube)
    serving = _serving(s)
    gpu_backend = open_backend(s.backend, s.fake_gpu_count, s.fake_state or None, s.fake_seed,
                               s.collect_interval / 1000.0, accept_fake_gpus=s.fake_gpus)
    watcher, pods = _pod_attribution(s, kube, environ)
    collector = Collector(gpu_backend, counters, _collector_options(s, pods, environ))
    # From the moment a client can connect, SIGTERM (the kubelet's) means a clean shutdown: handled before listening,
    # or one arriving between listening and the wait below would end the process at once, its log unwritten.
    stop = _stop_on_signal()
    server = _listen(s.address, collector, serving)
    collector.more_self_metrics.append(server.self_metrics)
    reloader = None
    if source is not None and source.path is not None:
        reloader = CountersReloader(source, collector.replace_counters, counters)
        collector.more_self_metrics.append(reloader.self_metrics)  # in every snapshot, the first included
    collector.start()
    server.start()
    if reloader is not None:
        reloader.start()
        signal.signal(signal.SIGHUP, lambda *_: reloader.request())
    log.info("serving %d fields from the %s backend on %s%s every %d ms%s", len(counters), gpu_backend.name,
             "https://" if serving.web.tls_enabled else "", s.address, s.collect_interval,
             " with pod labels" if s.kubernetes else "")
    # Short waits: a process-directed signal may land on one of the server's or collector's threads, and then its
    # Python handler runs only once the main thread runs bytecode again; one long wait would sleep through it.
    while not stop.wait(SIGNAL_POLL_S):
        pass
    log.info("shutting down")
    server.stop()
    if reloader is not None:
        reloader.stop()
    collector.stop()
    if watcher is not None:
        watcher.stop()
    kube.stop()
    gpu_backend.close()


def _warn_accepted(parsed: Parsed, config: ConfigFile | None) -> None:
    """One warning line for each setting that is accepted but changes nothing here."""
    s = parsed.settings
    for flag, how in parsed.ignored():
        log.warning("%s is accepted and ignored: %s", how, flag.note.replace("`", ""))
    if parsed.positional:
        log.warning("ignoring arguments that are not flags: %s", " ".join(parsed.positional))
    if config is not None and config.watch_groups:
        log.warning("%s: watch groups %s are accepted; every field is collected every %d ms here",
                    s.config_file, ", ".join(config.watch_groups), s.collect_interval)
    if not s.kubernetes and (s.kubernetes_enable_pod_labels or s.kubernetes_enable_pod_uid):
        log.warning("--kubernetes-enable-pod-labels and --kubernetes-enable-pod-uid have no effect without -k")


def _pod_attribution(s: Any, kube: KubeAccess,
                     environ: Mapping[str, str]) -> tuple[PodResourcesWatcher | None, PodAttribution | None]:
    """With ``-k``: the PodResources watcher (started) and what the collector labels GPUs with; else None, None."""
    if not s.kubernetes:
        return None, None
    from exporter.pods.podresources.client import PodResourcesWatcher

    directory = pod_directory(s.pod_identity_source, s.kubelet_logs_dir, kube)
    watcher = PodResourcesWatcher(s.pod_resources_kubelet_socket, s.pod_resources_refresh_interval / 1000.0)
    watcher.refresh_once()
    watcher.start()
    processes = ProcessAttribution(ProcFs(s.proc_root), directory)
    policy = PodLabelPolicy(s.kubernetes_enable_pod_labels, s.kubernetes_enable_pod_uid,
                            compile_allowlist(split_patterns(list(s.kubernetes_pod_label_allowlist_regex))))
    return watcher, PodAttribution(watcher.snapshot, s.kubernetes_gpu_id_type, frozenset(s.nvidia_resource_names),
                                   processes, pod_metadata(policy, kube, environ.get("NODE_NAME")))


def _collector_options(s: Any, pods: PodAttribution | None, environ: Mapping[str, str]) -> CollectorOptions:
    return CollectorOptions(
        interval_s=s.collect_interval / 1000.0,
        device_mode=s.devices,
        hostname_label=None if s.no_hostname else s.hostname_label,
        hostname=environ.get("NODE_NAME") or socket.gethostname(),
        replace_blanks_in_model_name=s.replace_blanks_in_model_name,
        pods=pods,
        old_namespace=s.use_old_namespace,
        max_value_age_s=s.max_value_age / 1000.0 if s.max_value_age else None,
        xid_count_window_ms=s.xid_count_window_size,
        clock_events_count_window_ms=s.clock_events_count_window_size,
    )


def _listen(address: str, collector: Collector, serving: Serving) -> MetricsServer:
    """The server, listening on ``address`` (serving starts with ``start()``); a bad or busy address is a startup
    error."""
    raise_open_files_limit()  # every connection is a descriptor: the limit must not be what refuses them
    try:
        return MetricsServer(address, lambda: collector.snapshot, collector.health,
                             lambda: setattr(collector, "gzip_wanted", True), serving)
    except AddressError as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(f"cannot listen on {address}: {exc.strerror or exc}") from None


def check_settings(s: Any) -> None:
    """Values the table's kinds and choices cannot check, each refused with the flag's name."""
    if s.devices not in ("f", "g", "i", "g+i"):
        raise StartupError(f"--devices {s.devices!r}: expected f, g, i or g+i (device ranges are not supported)")
    if s.configmap_data != "none":
        namespace, sep, name = s.configmap_data.partition(":")
        if not (sep and namespace and name):
            raise StartupError(f"--configmap-data {s.configmap_data!r}: expected <namespace>:<name> or none")
    # An allowlist pattern that does not compile is warned about and skipped, as dcgm-exporter does
    # (exporter.pods.metadata_labels.compile_allowlist).
    if s.max_value_age and s.max_value_age < 2 * s.collect_interval:
        raise StartupError(f"--max-value-age {s.max_value_age}: must be at least twice --collect-interval "
                           f"({s.collect_interval} ms), or values would vanish between collections")


def _counters(parsed: Parsed, config: ConfigFile | None,
              kube: KubeAccess) -> tuple[CountersSource | None, tuple[Counter, ...]]:
    """The counters and where they came from (a file or ConfigMap is watched for changes; inline ones are not)."""
    s, given = parsed.settings, parsed.sources["collectors"]
    if given == "default" and config is not None and config.inline_counters is not None:
        return None, tuple(parse_counters(config.inline_counters, f"{s.config_file}: metrics.fields"))
    # dcgm-exporter's default path is absent outside its image: then the built-in set.
    path = None if given == "default" and not Path(s.collectors).is_file() else s.collectors
    source = counters_source(path, s.configmap_data, kube)
    return source, tuple(source.load())


def _serving(s: Any) -> Serving:
    read = parse_duration(s.web_read_timeout, "--web-read-timeout")
    write = parse_duration(s.web_write_timeout, "--web-write-timeout")
    return Serving(WebGuard(s.web_config_file or None), read or None, write or None,
                   max_waiting_connections=s.web_max_waiting_connections,
                   max_requests_inflight=s.web_max_requests_inflight)


def _version() -> str:
    try:
        return importlib.metadata.version("gpu-autoscaler")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def pod_directory(source: str, kubelet_logs_dir: str, kube: KubeAccess) -> PodDirectory:
    if source == "kubelet-logs":
        return KubeletLogDirectory(kubelet_logs_dir)
    node = os.environ.get("NODE_NAME")
    if not node:
        raise StartupError("--pod-identity-source kubernetes-api needs NODE_NAME (set it from spec.nodeName)")
    try:
        return kube.pod_directory(node)
    except KubeClientError as exc:
        raise StartupError(f"--pod-identity-source kubernetes-api: {exc}") from None


def _stop_on_signal() -> threading.Event:
    """An event set by SIGTERM or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


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
        from exporter.cli.doctor import app as doctor_app

        clikit.run(doctor_app, "gpu-exporter doctor", args[1:], (StartupError, CountersError))
        return
    clikit.run(app, "gpu-exporter", args, (StartupError, CountersError, FlagError, WebConfigError, DurationError,
                                          ConfigFileError, KubeClientError))
