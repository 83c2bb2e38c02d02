"""dcgm-exporter's command line as a DaemonSet gives it: every flag and environment variable through the one table
(exporter/cli/flags.py), the real process started with DCGM-only flags (one warning each) and with the GPU
Operator's and the dcgm-exporter chart's own args and env, --fake-gpus, --use-old-namespace, --config-file."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pynvml
import pytest

from exporter.backends.nvml import NvmlBackend
from exporter.cli.flags import BY_SPELLING, FLAGS, Disposition, Flag, FlagError, markdown, parse
from tests import fakenvml
from tests.exporter_helpers import parse_metrics, series, value, write_state
from tests.fakenvml import FakeNvml
from tests.support.docs import generated_block
from tests.support.exporter_process import ExporterProcess
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.podresources_server import FakePodResourcesServer

pytestmark = pytest.mark.e2e

fake_nvml = fakenvml.fake_nvml
REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference" / "dcgm-exporter"
UPSTREAM = [f for f in FLAGS if f.disposition in (Disposition.IMPLEMENTED, Disposition.IGNORED)]
IGNORED = [f for f in FLAGS if f.disposition is Disposition.IGNORED]
WARNING = "is accepted and ignored"

# A value of the right kind for each flag, as a user would give it.
SAMPLES: dict[str, str] = {
    "collectors": "/etc/dcgm-exporter/dcp-metrics-included.csv", "address": "[::]:9400", "collect-interval": "30000",
    "configmap-data": "gpu-operator:metrics-config", "remote-hostengine-info": "nvidia-dcgm:5555",
    "kubernetes-gpu-id-type": "device-name", "kubernetes-pod-label-allowlist-regex": "app.*,team",
    "devices": "g", "cpu-devices": "g", "switch-devices": "g", "web-config-file": "/etc/dcgm-exporter/web.yaml",
    "xid-count-window-size": "60000", "clock-events-count-window-size": "120000", "dcgm-log-level": "DEBUG",
    "log-format": "json", "pod-resources-kubelet-socket": "/run/kubelet.sock", "hpc-job-mapping-dir": "/run/hpc",
    "nvidia-resource-names": "nvidia.com/gpu.shared,nvidia.com/a100", "dump-directory": "/tmp/dumps",
    "dump-retention": "48", "gpu-bind-unbind-poll-interval": "2s", "config-file": "/etc/dcgm-exporter/config.yaml",
    "web-read-timeout": "5s", "web-write-timeout": "20s", "container-runtime-socket": "/run/containerd.sock",
}


def sample(flag: Flag) -> str:
    if flag.kind == "bool":
        return "false" if flag.default else "true"
    return SAMPLES[flag.name]


def expected(flag: Flag) -> Any:
    text = sample(flag)
    return {"bool": lambda: text == "true", "int": lambda: int(text),
            "stringSlice": lambda: tuple(text.split(",")), "string": lambda: text}[flag.kind]()


@pytest.mark.parametrize("flag", UPSTREAM, ids=lambda f: f.name)
def test_every_dcgm_exporter_flag_and_env_var_is_read_with_its_meaning(flag: Flag) -> None:
    ways: list[tuple[list[str], dict[str, str], str]] = []
    for spelling in flag.spellings:
        for dash in ("-", "--"):  # Go's flag package takes both
            if flag.kind == "bool" and sample(flag) == "true":
                ways.append(([f"{dash}{spelling}"], {}, "flag"))
            ways.append(([f"{dash}{spelling}={sample(flag)}"], {}, "flag"))
            if flag.kind != "bool":
                ways.append(([f"{dash}{spelling}", sample(flag)], {}, "flag"))
    ways += [([], {env: sample(flag)}, "env") for env in flag.envs]
    assert flag.envs, f"{flag.name} has no environment variable"
    for args, env, source in ways:
        parsed = parse(args, env)
        assert getattr(parsed.settings, flag.field) == expected(flag), (args, env)
        assert parsed.sources[flag.field] == source
        ignored = [f.name for f, _ in parsed.ignored()]
        assert ignored == ([flag.name] if flag.disposition is Disposition.IGNORED else []), (args, env)


def test_flag_beats_env_beats_config_beats_default() -> None:
    env = {"DCGM_EXPORTER_INTERVAL": "2000"}
    assert parse(["-c", "500"], env, {"collect_interval": 3000}).settings.collect_interval == 500
    assert parse([], env, {"collect_interval": 3000}).settings.collect_interval == 2000
    assert parse([], {}, {"collect_interval": 3000}).settings.collect_interval == 3000
    assert parse([], {}).settings.collect_interval == 1000


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--kubernetes=yes"], {}, "invalid boolean value 'yes' for --kubernetes"),
    (["-x", "soon"], {}, "invalid value 'soon' for -x (--xid-count-window-size): expected an integer"),
    ([], {"DCGM_EXPORTER_INTERVAL": "fast"}, "DCGM_EXPORTER_INTERVAL (--collect-interval)"),
    (["--dcgm-log-level", "LOUD"], {}, "expected one of NONE, FATAL"),
    (["--collectors"], {}, "flag needs an argument: --collectors"),
    (["--fake-gpus=4"], {}, "invalid boolean value '4' for --fake-gpus"),
    (["--backend", "fake", "--fake-gpus", "4", "-c", "200"], {}, "the number of simulated GPUs is --fake-gpu-count 4"),
])
def test_values_go_would_refuse_are_refused_naming_the_flag(args: list[str], env: dict[str, str],
                                                           message: str) -> None:
    with pytest.raises(FlagError, match=re.escape(message)):
        parse(args, env)


def test_string_slices_append_and_split_on_commas_as_urfave_cli() -> None:
    parsed = parse(["--nvidia-resource-names", "a, b", "--nvidia-resource-names=c"], {})
    assert parsed.settings.nvidia_resource_names == ("a", "b", "c")


def test_docs_flag_table_is_the_code_table() -> None:
    assert generated_block("flags.md", "exporter-flags") == markdown(), (
        "docs/flags.md's exporter flag table differs from exporter.cli.flags.markdown(): regenerate it "
        "(docs/development.md, Generated files)")


def test_every_spelling_is_unique() -> None:
    spellings = [s for f in FLAGS for s in f.spellings]
    assert len(spellings) == len(set(spellings)) == len(BY_SPELLING)


def _warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if WARNING in line]


def _warned(log: str) -> list[str]:
    """The spelling (flag or env var) each warning line names."""
    return [line.split(f" {WARNING}")[0].rsplit(" ", 1)[-1] for line in _warnings(log)]


@pytest.mark.parametrize("by", ["flag", "env"])
def test_dcgm_only_flags_start_the_exporter_with_one_warning_each(by: str) -> None:
    args: list[str] = ["--backend", "fake", "-c", "200"]
    env: dict[str, str] = {}
    used: list[str] = []
    for flag in IGNORED:
        if by == "env":
            env[flag.envs[-1]] = sample(flag)
            used.append(flag.envs[-1])
        elif flag.aliases:  # the short alias, value as the next argument
            args += [f"-{flag.aliases[0]}", sample(flag)]
            used.append(f"-{flag.aliases[0]}")
        else:
            args.append(f"--{flag.name}={sample(flag)}")
            used.append(f"--{flag.name}")
    exporter = ExporterProcess(args, env)
    try:
        assert series(parse_metrics(exporter.metrics()), "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    finally:
        log = exporter.stop()
    assert sorted(_warned(log)) == sorted(used), log


def test_implemented_flags_by_their_dcgm_exporter_spellings_take_effect() -> None:
    exporter = ExporterProcess(["--backend", "fake", "-o", "-n", "-rbmn", "-x", "60000", "-d", "g",
                                "-clock-events-count-window-size=60000", "--kubernetes-gpu-id-type", "device-name",
                                "--web-read-timeout", "5s", "--web-write-timeout=5s", "--debug=false"],
                               {"DCGM_EXPORTER_LOG_FORMAT": "json"})
    try:
        labels = series(parse_metrics(exporter.metrics()), "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]
    finally:
        log = exporter.stop()
    assert labels["uuid"].startswith("GPU-") and "UUID" not in labels  # -o
    assert not {"Hostname", "hostname"} & set(labels)  # -n
    assert " " not in labels["modelName"] and "-" in labels["modelName"]  # -rbmn
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert records and all({"time", "level", "msg"} <= set(r) for r in records)  # --log-format json
    assert _warnings(log) == []


def test_no_warning_without_dcgm_only_flags() -> None:
    exporter = ExporterProcess(["--backend", "fake"])
    assert _warnings(exporter.stop()) == []


# -- the DaemonSets that run dcgm-exporter, as their manifests render them -------------------------------------------

def _daemonset_run(tmp_path: Path, podresources_server: FakePodResourcesServer, args: list[str],
                   env: dict[str, str]) -> tuple[list[Any], str]:
    from clikit.fake_gpus import fake_gpu_uuid

    podresources_server.set_pods([("trainer-0", "ml", [("main", [("nvidia.com/gpu", [fake_gpu_uuid("", 0)])])])])
    state = tmp_path / "state.json"
    write_state(state, {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 71}}})
    # What the pod spec's image and hostPath volume provide: the fake backend (no GPU here), the counters file
    # the image ships at /etc/dcgm-exporter, and the kubelet's pod-resources socket.
    node = {"GPU_EXPORTER_BACKEND": "fake", "GPU_EXPORTER_FAKE_STATE": str(state),
            "DCGM_POD_RESOURCES_KUBELET_SOCKET": podresources_server.socket_path, "DCGM_EXPORTER_INTERVAL": "200"}
    exporter = ExporterProcess(args, {**node, **env}, listen_by_env=True)
    try:

        def attributed() -> list[Any] | None:  # the first collection may precede the first PodResources answer
            rows = parse_metrics(exporter.metrics())
            return rows if series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0", namespace="ml") or series(
                rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0", pod_namespace="ml") else None

        rows = wait_until(attributed, 10, "GPU 0 attributed to its pod")
    finally:
        log = exporter.stop()
    return rows, log


def test_gpu_operator_daemonset_args_and_env(tmp_path: Path, podresources_server: FakePodResourcesServer) -> None:
    """gpu-operator assets/state-dcgm-exporter/0800_daemonset.yaml (no args) and, from its golden files
    internal/state/testdata/golden/gpucluster-dcgm-exporter-{remote-engine,pod-metadata}.yaml, the remote host
    engine, DRA and pod-label env vars."""
    env = {
        "DCGM_EXPORTER_LISTEN": ":9400",  # replaced by ExporterProcess with its loopback port, still by env
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_EXPORTER_COLLECTORS": str(REFERENCE / "dcp-metrics-included.csv"),
        "NODE_NAME": "gpu-node-7",
        "DCGM_REMOTE_HOSTENGINE_INFO": "nvidia-dcgm-dra:5555",
        "KUBERNETES_ENABLE_DRA": "true",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true",
    }
    rows, log = _daemonset_run(tmp_path, podresources_server, [], env)
    labels = series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]
    assert value(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 71
    assert (labels["pod"], labels["namespace"], labels["container"]) == ("trainer-0", "ml", "main")
    assert labels["Hostname"] == "gpu-node-7"
    assert sorted(_warned(log)) == ["DCGM_REMOTE_HOSTENGINE_INFO", "KUBERNETES_ENABLE_DRA"]


def test_dcgm_exporter_chart_daemonset_args_and_env(tmp_path: Path,
                                                    podresources_server: FakePodResourcesServer) -> None:
    """dcgm-exporter deployment/templates/daemonset.yaml with values.yaml's arguments (4.5.3-4.8.2:
    ["-f", "/etc/dcgm-exporter/default-counters.csv"]), debugDump.enabled and the pod metadata values."""
    args = ["-f", str(REFERENCE / "default-counters.csv"),
            "--dump-enabled", "--dump-directory=/tmp/dcgm-exporter-debug", "--dump-retention=24", "--dump-compression"]
    env = {
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID": "true",
        "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX": "app.kubernetes.io/.*,team",
        "DCGM_EXPORTER_LISTEN": ":9400",
        "NODE_NAME": "gpu-node-8",
    }
    rows, log = _daemonset_run(tmp_path, podresources_server, args, env)
    labels = series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]
    assert (labels["pod"], labels["Hostname"]) == ("trainer-0", "gpu-node-8")
    assert len(_warnings(log)) == 4, log  # the four debug-dump flags
    assert "error" not in log.lower()


# -- --fake-gpus: dcgm-exporter's switch ---------------------------------------------------------------------------

def test_fake_gpus_lists_a_gpu_nvml_cannot_describe_as_fake_n(fake_nvml: FakeNvml) -> None:
    """dcgm-exporter internal/pkg/deviceinfo/device_info.go: with --fake-gpus a GPU whose device info fails is
    kept as GPU i, UUID fake<i>; without it the GPU is left out (here: retried every collection)."""
    fake_nvml.fail("nvmlDeviceGetUUID", pynvml.NVML_ERROR_UNKNOWN, gpu=1)
    for accept, uuids in ((False, [fake_nvml.gpus[0].uuid]), (True, [fake_nvml.gpus[0].uuid, "fake1"])):
        backend = NvmlBackend(pynvml, accept_fake_gpus=accept)
        backend.open()
        try:
            assert [e.uuid for e in backend.entities("f")] == uuids
        finally:
            backend.close()


def test_fake_gpus_switch_by_flag_and_env_and_the_count_has_its_own_name() -> None:
    assert parse(["--fake-gpus"], {}).settings.fake_gpus is True
    assert parse([], {"DCGM_EXPORTER_USE_FAKE_GPUS": "true"}).settings.fake_gpus is True
    exporter = ExporterProcess(["--backend", "fake", "--fake-gpus", "--fake-gpu-count", "3"])
    try:
        gpus = {labels["gpu"] for _, labels, _ in series(parse_metrics(exporter.metrics()), "DCGM_FI_DEV_GPU_UTIL")}
    finally:
        exporter.stop()
    assert gpus == {"0", "1", "2"}
    env_count = ExporterProcess(["--backend", "fake"], {"GPU_EXPORTER_FAKE_GPU_COUNT": "4"})
    try:
        assert len(series(parse_metrics(env_count.metrics()), "DCGM_FI_DEV_GPU_UTIL")) == 4
    finally:
        env_count.stop()


# -- --use-old-namespace ---------------------------------------------------------------------------------------------

def test_use_old_namespace_gives_the_1x_label_names(tmp_path: Path,
                                                   podresources_server: FakePodResourcesServer) -> None:
    """dcgm-exporter collector/gpu_collector.go (uuid) and transformation/const.go (pod_name, pod_namespace,
    container_name)."""
    rows, _ = _daemonset_run(tmp_path, podresources_server, ["-o"], {"DCGM_EXPORTER_KUBERNETES": "true"})
    labels = series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]
    assert labels["uuid"].startswith("GPU-") and "UUID" not in labels
    assert (labels["pod_name"], labels["pod_namespace"], labels["container_name"]) == ("trainer-0", "ml", "main")
    assert not {"pod", "namespace", "container"} & set(labels)


# -- --config-file (dcgm-exporter 4.8.3) ---------------------------------------------------------------------------

def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_config_file_inline_fields_and_interval(tmp_path: Path) -> None:
    config = _config(tmp_path, """version: v1
metrics:
  fields:
    - {name: DCGM_FI_DEV_GPU_UTIL, prometheusType: gauge, help: GPU utilization (in %).}
    - {name: DCGM_FI_DEV_POWER_USAGE, prometheusType: gauge, help: Power draw (in W).}
collection:
  interval: 250ms
  watchGroups:
    - {name: fast, interval: 100ms, fields: [DCGM_FI_DEV_GPU_UTIL]}
""")
    exporter = ExporterProcess(["--backend", "fake", "--config-file", config])
    try:
        names = {name for name, _, _ in parse_metrics(exporter.metrics()) if name.startswith("DCGM_")}
    finally:
        log = exporter.stop()
    assert names == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"}
    assert "every 250 ms" in log and "watch groups fast are accepted" in log


def test_config_file_is_below_flags_and_env(tmp_path: Path) -> None:
    counters = REFERENCE / 'default-counters.csv'
    config = _config(tmp_path, f"metrics:\n  file: {counters}\ncollection:\n  interval: 5000\n")
    parsed = parse(["-c", "300"], {}, {"collect_interval": 5000})
    assert parsed.settings.collect_interval == 300
    exporter = ExporterProcess(["--backend", "fake", "-f", str(REPO / "exporter" / "fields" / "default-counters.csv")],
                               {"DCGM_EXPORTER_CONFIG_FILE": config, "DCGM_EXPORTER_INTERVAL": "400"})
    log = exporter.stop()
    assert "every 400 ms" in log


@pytest.mark.parametrize(("text", "message"), [
    ("metrics:\n  fiels: []\n", "config.yaml: metrics: unknown field 'fiels'"),
    ("collection:\n  interval: soon\n", "config.yaml: collection.interval 'soon': expected a duration like 30s"),
    ("metrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_UTL, prometheusType: gauge}\n",
     "config.yaml: metrics.fields:1: unknown field 'DCGM_FI_DEV_GPU_UTL'"),
    ("version: v9\n", "config.yaml: version: 'v9' is not supported"),
])
def test_bad_config_file_is_one_line_naming_file_and_key(tmp_path: Path, text: str, message: str,
                                                         run_exporter: Callable[..., Any]) -> None:
    result = run_exporter("--backend", "fake", "--config-file", _config(tmp_path, text))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@pytest.fixture
def run_exporter() -> Callable[..., Any]:
    from tests.test_exporter_e2e import run_cli

    return run_cli
