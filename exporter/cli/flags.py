"""Every flag and environment variable of dcgm-exporter 4.x, plus ours, and what ``gpu-exporter`` does with each.

dcgm-exporter's flags are urfave/cli v2 flags (``pkg/cmd/app.go``, 4.5.3-4.8.2, plus the 4.8.3 additions from
NVIDIA's ``dcgm-exporter`` command reference: ``--config-file``, ``--web-read-timeout``, ``--web-write-timeout``,
``--container-labels``, ``--container-runtime-socket``; and 4.8.4's ``--enable-exporter-metrics``). Their
command-line syntax is Go's ``flag`` package: ``-name`` and ``--name`` alike, ``-name=value`` or ``-name value``,
booleans bare or ``-name=false``, an alias (``-f``, ``-rbmn``) the same way; an environment variable applies when
the flag is not given. ``parse`` reads a command line and an environment through this table into
:class:`ExporterSettings`; docs/flags.md's table is rendered from it (``markdown``) and a test keeps the two equal.

Each flag is ``IMPLEMENTED`` (dcgm-exporter's meaning; ``field`` is the settings attribute that holds it),
``IGNORED`` (it only makes sense with DCGM: accepted, and one warning line at start-up says why it is not
needed), ``OURS`` (a gpu-exporter flag dcgm-exporter does not have) or ``BUILTIN`` (help and version).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

Kind = Literal["string", "bool", "int", "stringSlice"]
Source = Literal["flag", "env", "config", "default"]

APP = "pkg/cmd/app.go"
REF_483 = "4.8.3 command reference"


class Disposition(StrEnum):
    IMPLEMENTED = "implemented"
    IGNORED = "accepted, ignored"
    OURS = "ours"
    BUILTIN = "built-in"


class FlagError(ValueError):
    """A command line or environment the exporter cannot start with; one line for the CLI."""


@dataclass(frozen=True)
class Flag:
    name: str
    kind: Kind
    default: Any
    disposition: Disposition
    note: str
    aliases: tuple[str, ...] = ()
    envs: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    source: str = APP

    @property
    def field(self) -> str:
        """The :class:`ExporterSettings` attribute holding this flag's value."""
        return self.name.replace("-", "_")

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


IMPL, X, OURS, B = Disposition.IMPLEMENTED, Disposition.IGNORED, Disposition.OURS, Disposition.BUILTIN
_DEVICES = "f (MIG instances where present, else GPUs), g, i or g+i; device ranges (g:0,1) are refused"
_DCGM_ONLY = "DCGM's own"

FLAGS: tuple[Flag, ...] = (
    # -- dcgm-exporter, pkg/cmd/app.go ------------------------------------------------------------------------
    Flag("collectors", "string", "/etc/dcgm-exporter/default-counters.csv", IMPL,
         "Counters CSV (`FIELD, type, help`). When the default path does not exist, the built-in default set.",
         ("f",), ("DCGM_EXPORTER_COLLECTORS",)),
    Flag("address", "string", ":9400", IMPL, "Listen address: `:9400`, `host:9400`, `[::]:9400`.",
         ("a",), ("DCGM_EXPORTER_LISTEN",)),
    Flag("collect-interval", "int", 1000, IMPL,
         "Collection interval in ms (minimum 100). Default 1000 here, 30000 in dcgm-exporter.",
         ("c",), ("DCGM_EXPORTER_INTERVAL",), minimum=100),
    Flag("kubernetes", "bool", False, IMPL, "Pod, namespace and container labels from the kubelet PodResources API.",
         ("k",), ("DCGM_EXPORTER_KUBERNETES",)),
    Flag("use-old-namespace", "bool", False, IMPL,
         "1.x label names: `uuid` for `UUID`, `pod_name`, `pod_namespace`, `container_name` for the pod labels.",
         ("o",), ("DCGM_EXPORTER_USE_OLD_NAMESPACE",)),
    Flag("cpu-devices", "string", "f", X,
         "Grace CPU entities are DCGM's; NVML has no CPU entities, so there are none to select.",
         ("p",), ("DCGM_EXPORTER_CPU_DEVICES_STR",)),
    Flag("configmap-data", "string", "none", IMPL,
         "`namespace:name`: counters from that ConfigMap's `metrics` key, falling back to `-f`; `none` = off.",
         ("m",), ("DCGM_EXPORTER_CONFIGMAP_DATA",)),
    Flag("remote-hostengine-info", "string", "localhost:5555", X,
         "There is no DCGM host engine to connect to: NVML is read in-process.",
         ("r",), ("DCGM_REMOTE_HOSTENGINE_INFO",)),
    Flag("kubernetes-enable-pod-labels", "bool", False, IMPL,
         "With `-k`: the pod's labels (names sanitized) from the Kubernetes API onto its series.",
         envs=("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",)),
    Flag("kubernetes-enable-pod-uid", "bool", False, IMPL, "With `-k`: the pod's UID as `pod_uid`.",
         envs=("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",)),
    Flag("kubernetes-gpu-id-type", "string", "uid", IMPL,
         "Match device-plugin IDs as GPU UUIDs (`uid`) or `nvidiaN` names (`device-name`, GKE).",
         envs=("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",), choices=("uid", "device-name")),
    Flag("kubernetes-pod-label-allowlist-regex", "stringSlice", (), IMPL,
         "Regexes, comma-separated or repeated; only pod labels whose key matches are copied (empty: all; one "
         "that does not compile is warned about and skipped).",
         envs=("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",)),
    Flag("devices", "string", "f", IMPL, _DEVICES, ("d",), ("DCGM_EXPORTER_DEVICES_STR",)),
    Flag("no-hostname", "bool", False, IMPL, "Omit the hostname label.", ("n",), ("DCGM_EXPORTER_NO_HOSTNAME",)),
    Flag("switch-devices", "string", "f", X,
         "NVSwitch and NVLink entities are DCGM's; NVML cannot enumerate NVSwitches.",
         ("s",), ("DCGM_EXPORTER_OTHER_DEVICES_STR",)),
    Flag("fake-gpus", "bool", False, IMPL,
         "Accept GPUs whose identity cannot be read: listed as `fake<N>` (as dcgm-exporter does for DCGM's "
         "injected GPUs) instead of left out. The simulated-GPU count is `--fake-gpu-count`.",
         envs=("DCGM_EXPORTER_USE_FAKE_GPUS",)),
    Flag("web-config-file", "string", "", IMPL,
         "Prometheus exporter-toolkit web config: TLS, client certificates, bcrypt basic-auth users.",
         envs=("DCGM_EXPORTER_WEB_CONFIG_FILE",)),
    Flag("xid-count-window-size", "int", 300000, IMPL, "Window in ms of `DCGM_EXP_XID_ERRORS_COUNT`.",
         ("x",), ("DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",), minimum=1),
    Flag("replace-blanks-in-model-name", "bool", False, IMPL, "`modelName` with dashes for blanks.",
         ("rbmn",), ("DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",)),
    Flag("debug", "bool", False, IMPL, "Debug logging.", envs=("DCGM_EXPORTER_DEBUG",)),
    Flag("clock-events-count-window-size", "int", 300000, IMPL, "Window in ms of `DCGM_EXP_CLOCK_EVENTS_COUNT`.",
         envs=("DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",), minimum=1),
    Flag("enable-dcgm-log", "bool", False, X, f"Writes {_DCGM_ONLY} library log; there is no DCGM here.",
         envs=("DCGM_EXPORTER_ENABLE_DCGM_LOG",)),
    Flag("dcgm-log-level", "string", "NONE", X, f"Level of {_DCGM_ONLY} library log; there is no DCGM here.",
         envs=("DCGM_EXPORTER_DCGM_LOG_LEVEL",),
         choices=("NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB")),
    Flag("log-format", "string", "text", IMPL, "`text` or `json`.", envs=("DCGM_EXPORTER_LOG_FORMAT",),
         choices=("text", "json")),
    Flag("pod-resources-kubelet-socket", "string", "/var/lib/kubelet/pod-resources/kubelet.sock", IMPL,
         "The kubelet's PodResources socket.", envs=("DCGM_POD_RESOURCES_KUBELET_SOCKET",)),
    Flag("hpc-job-mapping-dir", "string", "", X,
         "HPC (Slurm) job labels are not produced; this exporter targets Kubernetes.",
         envs=("DCGM_HPC_JOB_MAPPING_DIR",)),
    Flag("nvidia-resource-names", "stringSlice", (), IMPL,
         "Extra GPU resource names besides `nvidia.com/gpu` and `nvidia.com/mig-*`, e.g. `nvidia.com/gpu.shared`.",
         envs=("NVIDIA_RESOURCE_NAMES",)),
    Flag("kubernetes-virtual-gpus", "bool", False, X,
         "Shared GPUs are attributed per pod by `gpu_pod_sm_utilization_ratio` and "
         "`gpu_pod_framebuffer_used_bytes`, always on with `-k`; no per-pod copies of DCGM series.",
         envs=("KUBERNETES_VIRTUAL_GPUS",)),
    Flag("dump-enabled", "bool", False, X, "dcgm-exporter's debug dumps of DCGM state; there is no DCGM state here.",
         envs=("DCGM_EXPORTER_DUMP_ENABLED",)),
    Flag("dump-directory", "string", "/tmp/dcgm-exporter-debug", X, "As `--dump-enabled`.",
         envs=("DCGM_EXPORTER_DUMP_DIRECTORY",)),
    Flag("dump-retention", "int", 24, X, "As `--dump-enabled`.", envs=("DCGM_EXPORTER_DUMP_RETENTION",)),
    Flag("dump-compression", "bool", True, X, "As `--dump-enabled`.", envs=("DCGM_EXPORTER_DUMP_COMPRESSION",)),
    Flag("kubernetes-enable-dra", "bool", False, X,
         "DRA ResourceClaims are not mapped; GPUs allocated through the device plugin are.",
         envs=("KUBERNETES_ENABLE_DRA",)),
    Flag("disable-startup-validate", "bool", False, X,
         "Skips DCGM's start-up checks; the only check here is that NVML loads, and it is needed.",
         envs=("DISABLE_STARTUP_VALIDATE",)),
    Flag("enable-gpu-bind-unbind-watch", "bool", False, X,
         "A DCGM 4.5 event; here every GPU is re-enumerated every 30 s and a lost GPU retried every collection.",
         envs=("DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",)),
    Flag("gpu-bind-unbind-poll-interval", "string", "1s", X, "As `--enable-gpu-bind-unbind-watch`.",
         envs=("DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",)),
    Flag("enable-pprof", "bool", False, X, "Go's profiler endpoints; this exporter is not a Go program.",
         envs=("DCGM_EXPORTER_ENABLE_PPROF",)),
    Flag("web-systemd-socket", "bool", False, X,
         "systemd socket activation is not supported; the exporter listens on `--address`.",
         envs=("DCGM_EXPORTER_SYSTEMD_SOCKET",)),
    # -- dcgm-exporter 4.8.3 -----------------------------------------------------------------------------------
    Flag("config-file", "string", "", IMPL,
         "dcgm-exporter's YAML: `metrics.file` or `metrics.fields`, `collection.interval`, `collection.watchGroups`; "
         "flags and environment win over it.", envs=("DCGM_EXPORTER_CONFIG_FILE",), source=REF_483),
    Flag("web-read-timeout", "string", "10s", IMPL, "Go duration: longest time to read a request.",
         envs=("DCGM_EXPORTER_WEB_READ_TIMEOUT",), source=REF_483),
    Flag("web-write-timeout", "string", "30s", IMPL, "Go duration: longest time to write a response.",
         envs=("DCGM_EXPORTER_WEB_WRITE_TIMEOUT",), source=REF_483),
    Flag("container-labels", "bool", False, X,
         "Labels from the container runtime are not read; pod labels come from the kubelet and the API.",
         envs=("DCGM_EXPORTER_CONTAINER_LABELS",), source=REF_483),
    Flag("container-runtime-socket", "string", "", X, "As `--container-labels`.",
         envs=("DCGM_CONTAINER_RUNTIME_SOCKET",), source=REF_483),
    # -- dcgm-exporter 4.8.4 (release notes) -----------------------------------------------------------------
    Flag("enable-exporter-metrics", "bool", False, X,
         "The exporter's own process_* and gpu_exporter_* metrics are always on /metrics; there is no Go runtime.",
         envs=("DCGM_EXPORTER_ENABLE_EXPORTER_METRICS",), source="4.8.4 release notes"),
    # -- urfave/cli built-ins -----------------------------------------------------------------------------------
    Flag("help", "bool", False, B, "Print the flags and exit.", ("h",), source="urfave/cli"),
    Flag("version", "bool", False, B, "Print the version and exit.", ("v",), source="urfave/cli"),
    # -- gpu-exporter's own ---------------------------------------------------------------------------------------
    Flag("backend", "string", "nvml", OURS,
         "`nvml` or `fake` (simulated GPUs); a missing NVML library is an error, never a silent switch to fake.",
         envs=("GPU_EXPORTER_BACKEND",), choices=("nvml", "fake"), source="ours"),
    Flag("fake-gpu-count", "int", 2, OURS, "Number of simulated GPUs (`--backend fake`).",
         envs=("GPU_EXPORTER_FAKE_GPU_COUNT",), minimum=1, source="ours"),
    Flag("fake-state", "string", "", OURS, "JSON state file for the simulated GPUs, re-read at every collection.",
         envs=("GPU_EXPORTER_FAKE_STATE",), source="ours"),
    Flag("fake-seed", "string", "", OURS, "Varies the simulated GPU UUIDs.", envs=("GPU_EXPORTER_FAKE_SEED",),
         source="ours"),
    Flag("hostname-label", "string", "Hostname", OURS,
         "`Hostname` (dcgm-exporter 4.x up to 4.5.x-4.8.2) or `hostname` (4.6.0-4.8.3 and later).",
         envs=("GPU_EXPORTER_HOSTNAME_LABEL",), choices=("Hostname", "hostname"), source="ours"),
    Flag("pod-resources-refresh-interval", "int", 2000, OURS, "ms between kubelet PodResources `List` calls.",
         envs=("GPU_EXPORTER_POD_RESOURCES_REFRESH_INTERVAL",), minimum=100, source="ours"),
    Flag("proc-root", "string", "/proc", OURS,
         "proc filesystem showing the host's processes (per-pod values on shared GPUs; needs hostPID).",
         envs=("GPU_EXPORTER_PROC_ROOT",), source="ours"),
    Flag("pod-identity-source", "string", "kubelet-logs", OURS,
         "How a GPU process's pod UID becomes a pod name: `kubelet-logs` or `kubernetes-api` (needs `NODE_NAME`, "
         "in-cluster config or `--kubeconfig`, `list`/`watch` pods; watched, not polled).",
         envs=("GPU_EXPORTER_POD_IDENTITY_SOURCE",), choices=("kubelet-logs", "kubernetes-api"), source="ours"),
    Flag("kubelet-logs-dir", "string", "/var/log", OURS, "Holds the kubelet's `pods/` and `containers/` entries.",
         envs=("GPU_EXPORTER_KUBELET_LOGS_DIR",), source="ours"),
    Flag("kubeconfig", "string", "", OURS,
         "Kubernetes API credentials from this kubeconfig instead of the pod's service account (pod labels, "
         "`--configmap-data`, `--pod-identity-source kubernetes-api` outside a cluster).",
         envs=("GPU_EXPORTER_KUBECONFIG",), source="ours"),
    Flag("max-value-age", "int", 0, OURS,
         "ms a GPU's values may age (its NVML calls hang, collections stop) before `/metrics` leaves them out, so "
         "Prometheus marks the series stale; `0`: max(3 collect intervals, 10000); at least twice "
         "`--collect-interval`.", envs=("GPU_EXPORTER_MAX_VALUE_AGE",), minimum=0, source="ours"),
)

BY_SPELLING: dict[str, Flag] = {s: f for f in FLAGS for s in f.spellings}

_TYPES: dict[Kind, type] = {"string": str, "bool": bool, "int": int, "stringSlice": tuple}
ExporterSettings = dataclasses.make_dataclass(
    "ExporterSettings", [(f.field, _TYPES[f.kind]) for f in FLAGS if f.disposition is not B], frozen=True)
ExporterSettings.__doc__ = "Every flag's value, by its field name (``--collect-interval`` -> ``collect_interval``)."


@dataclass(frozen=True)
class Parsed:
    settings: Any  # ExporterSettings
    sources: Mapping[str, Source]  # field -> where its value came from
    given: tuple[str, ...]  # spellings as given on the command line or environment, for warnings
    positional: tuple[str, ...]
    action: Literal["run", "help", "version"] = "run"

    def ignored(self) -> list[tuple[Flag, str]]:
        """The IGNORED flags the user set, with how they set them (one warning each)."""
        out = []
        for flag in FLAGS:
            if flag.disposition is X and self.sources[flag.field] in ("flag", "env"):
                how = next((g for g in self.given if g.lstrip("-") in flag.spellings or g in flag.envs), flag.name)
                out.append((flag, how))
        return out


# -- values, as Go's strconv reads them -------------------------------------------------------------------------
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _convert(flag: Flag, text: str, where: str) -> Any:
    if flag.kind == "bool":
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise FlagError(f"invalid boolean value {text!r} for {where}: expected true or false")
    if flag.kind == "int":
        try:
            value = int(text, 0) if text.strip().lower().lstrip("+-").startswith(("0x", "0o", "0b")) else int(text)
        except ValueError:
            raise FlagError(f"invalid value {text!r} for {where}: expected an integer") from None
        if flag.minimum is not None and value < flag.minimum:
            raise FlagError(f"invalid value {value} for {where}: must be at least {flag.minimum}")
        return value
    if flag.kind == "stringSlice":
        return tuple(part.strip() for part in text.split(",") if part.strip())
    if flag.choices and text not in flag.choices:
        raise FlagError(f"invalid value {text!r} for {where}: expected one of {', '.join(flag.choices)}")
    return text


def _split(args: Sequence[str], i: int) -> tuple[Flag, str, str | None, int]:
    """The flag at ``args[i]`` (``-name``/``--name``, ``=value`` or not), its spelling, value and args used."""
    arg = args[i]
    body = arg[2:] if arg.startswith("--") else arg[1:]
    name, eq, value = body.partition("=")
    flag = BY_SPELLING.get(name)
    if flag is None:
        raise FlagError(f"flag provided but not defined: {arg.partition('=')[0]} (see --help)")
    spelling = arg.partition("=")[0]
    if eq:
        return flag, spelling, value, 1
    if flag.kind == "bool":
        return flag, spelling, None, 1
    if i + 1 >= len(args):
        raise FlagError(f"flag needs an argument: {spelling}")
    return flag, spelling, args[i + 1], 2


def parse(args: Sequence[str], environ: Mapping[str, str],
          config: Mapping[str, Any] | None = None) -> Parsed:
    """Read ``args`` and ``environ`` through the table: flag > environment > ``config`` (field -> value) >
    default, as dcgm-exporter 4.8.3. String slices given twice are appended, other flags: the last wins."""
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    given: list[str] = []
    positional: list[str] = []
    action: Literal["run", "help", "version"] = "run"
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            if arg.isdigit() and given and given[-1].lstrip("-") == "fake-gpus":
                # Go would stop reading flags here; before dcgm-exporter's switch, --fake-gpus N was our count.
                raise FlagError(f"--fake-gpus is a switch (dcgm-exporter's meaning); the number of simulated GPUs "
                                f"is --fake-gpu-count {arg}")
            positional.extend(args[i + 1:] if arg == "--" else args[i:])
            break
        flag, spelling, text, used = _split(args, i)
        i += used
        if flag.disposition is B:
            action = "help" if flag.name == "help" else "version"
            continue
        where = spelling if spelling.lstrip("-") == flag.name else f"{spelling} (--{flag.name})"
        value = True if text is None else _convert(flag, text, where)
        if flag.kind == "stringSlice" and sources.get(flag.field) == "flag":
            value = values[flag.field] + value
        values[flag.field], sources[flag.field] = value, "flag"
        given.append(spelling)
    for flag in FLAGS:
        if flag.disposition is B or flag.field in sources:
            continue
        env = next((e for e in flag.envs if e in environ), None)
        if env is not None and not (flag.kind in ("bool", "int") and environ[env] == ""):
            values[flag.field] = _convert(flag, environ[env], f"{env} (--{flag.name})")
            sources[flag.field] = "env"
            given.append(env)
        elif config is not None and flag.field in config:
            values[flag.field], sources[flag.field] = config[flag.field], "config"
        else:
            values[flag.field], sources[flag.field] = flag.default, "default"
    return Parsed(ExporterSettings(**values), sources, tuple(given), tuple(positional), action)


def usage(prog: str) -> str:
    lines = [f"Usage: {prog} [flags]", "", "Export NVIDIA GPU metrics with dcgm-exporter's names and labels.", "",
             "flags (environment variables apply when the flag is not given):"]
    for flag in FLAGS:
        names = ", ".join([*(f"-{a}" for a in flag.aliases), f"--{flag.name}"])
        envs = f" [${', $'.join(flag.envs)}]" if flag.envs else ""
        default = "" if flag.kind == "bool" or flag.default in ("", ()) else f" (default {flag.default})"
        tag = {X: " [accepted, ignored]", OURS: " [gpu-exporter]"}.get(flag.disposition, "")
        lines.append(f"  {names}{envs}{default}{tag}")
        lines.append(f"      {flag.note.replace('`', '')}")
    return "\n".join(lines) + "\n"


_HERE = {IMPL: "yes", X: "accepted, ignored (one warning)", OURS: "gpu-exporter only", B: "yes"}


def markdown() -> str:
    """docs/flags.md's exporter table: every flag with its environment variable, default, disposition and meaning."""
    rows = ["| flag | env | default | here | meaning |", "|---|---|---|---|---|"]
    for flag in FLAGS:
        names = ", ".join([*(f"`-{a}`" for a in flag.aliases), f"`--{flag.name}`"])
        envs = ", ".join(f"`{e}`" for e in flag.envs)
        if flag.kind == "bool":
            default = "on" if flag.default else "off"
        else:
            default = f"`{flag.default}`" if flag.default not in ("", ()) else ""
        here = _HERE[flag.disposition]
        rows.append(f"| {names} | {envs} | {default} | {here} | {flag.note.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
