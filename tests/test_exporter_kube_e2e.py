"""The real exporter process against the fake Kubernetes API on loopback: pod labels and UID from a watch,
``--configmap-data`` with its fallback to ``-f``, and hot reload of the counters file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from clikit.fake_gpus import fake_gpu_uuid
from tests.exporter_helpers import parse_metrics, series, value
from tests.support.exporter_process import ExporterProcess
from tests.support.fake_kube import FakeKube, configmap, pod
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.podresources_server import FakePodResourcesServer

pytestmark = pytest.mark.e2e

UID = "5b7e4c1d-2a3f-4e6b-9c8d-0f1e2d3c4b5a"


def gpu_series(exporter: ExporterProcess, gpu: str, name: str = "DCGM_FI_DEV_GPU_UTIL") -> dict[str, str]:
    found = series(parse_metrics(exporter.metrics()), name, gpu=gpu)
    assert len(found) == 1, found
    return found[0][1]


def reload_checks(exporter: ExporterProcess) -> float:
    """How many times the exporter has checked its counters file (``gpu_exporter_counters_checks_total``)."""
    return value(parse_metrics(exporter.metrics()), "gpu_exporter_counters_checks_total")


def field_names(exporter: ExporterProcess) -> set[str]:
    return {row[0] for row in parse_metrics(exporter.metrics()) if row[0].startswith("DCGM_FI_DEV_")}


def test_pod_labels_and_uid_come_from_the_watched_pod(
        tmp_path: Path, fake_kube: FakeKube, podresources_server: FakePodResourcesServer) -> None:
    labels = {"app.kubernetes.io/name": "llm", "tier": "gold", "build-id": "b-123", "gpu": "spoof"}
    fake_kube.put("", "v1", "pods", pod("ml", "infer-0", labels, node_name="node-a", uid=UID))
    fake_kube.put("", "v1", "pods", pod("ml", "other-node", {"tier": "x"}, node_name="node-b"))
    podresources_server.set_pods([("infer-0", "ml", [("server", [("nvidia.com/gpu", [fake_gpu_uuid("", 0)])])])])
    kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    common = ["--backend", "fake", "-k", "--pod-resources-kubelet-socket", podresources_server.socket_path,
              "--pod-resources-refresh-interval", "200", "-c", "200", "--kubeconfig", kubeconfig]

    # dcgm-exporter's environment variables, an allowlist of two patterns in one comma-separated value
    exporter = ExporterProcess(common, env={
        "NODE_NAME": "node-a", "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID": "true",
        "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX": r"^app\.kubernetes\.io/,^tier$,^gpu$"})
    try:
        wait_until(lambda: "tier" in gpu_series(exporter, "0"))
        got = gpu_series(exporter, "0")
        assert (got["pod"], got["namespace"], got["container"]) == ("infer-0", "ml", "server")
        assert got["pod_uid"] == UID
        assert got["app_kubernetes_io_name"] == "llm" and got["tier"] == "gold"
        assert "build_id" not in got  # not in the allowlist
        assert got["gpu"] == "0"  # a pod label never replaces one of the GPU's own labels
        assert not {"pod", "pod_uid", "tier"} & gpu_series(exporter, "1").keys()  # GPU 1 is not allocated

        # the pod's labels change: the next collections carry the new value, without a restart or a new list
        lists_before = fake_kube.count("GET", "/api/v1/pods", watch=False)
        fake_kube.put("", "v1", "pods", pod("ml", "infer-0", {**labels, "tier": "silver"}, node_name="node-a"))
        wait_until(lambda: gpu_series(exporter, "0").get("tier") == "silver")
        for _ in range(5):
            exporter.metrics()
        assert fake_kube.count("GET", "/api/v1/pods", watch=False) == lists_before == 1
        pod_requests = [r for r in fake_kube.received if r.path == "/api/v1/pods"]
        assert {r.query.get("fieldSelector") for r in pod_requests} == {"spec.nodeName=node-a"}
        assert fake_kube.count("GET", "/api/v1/pods", watch=True) >= 1
    finally:
        log = exporter.stop()
    assert "Traceback" not in log

    # flags instead of the environment; without --kubernetes-enable-pod-uid there is no pod_uid, without an
    # allowlist every label is exported
    exporter = ExporterProcess([*common, "--kubernetes-enable-pod-labels"], env={"NODE_NAME": "node-a"})
    try:
        wait_until(lambda: "tier" in gpu_series(exporter, "0"))
        got = gpu_series(exporter, "0")
        assert got["build_id"] == "b-123" and "pod_uid" not in got
    finally:
        exporter.stop()


def test_pod_labels_without_credentials_keep_the_exporter_running(
        tmp_path: Path, podresources_server: FakePodResourcesServer) -> None:
    podresources_server.set_pods([("infer-0", "ml", [("server", [("nvidia.com/gpu", [fake_gpu_uuid("", 0)])])])])
    absent = tmp_path / "absent-kubeconfig"
    exporter = ExporterProcess(["--backend", "fake", "-k", "--pod-resources-kubelet-socket",
                                podresources_server.socket_path, "--kubernetes-enable-pod-labels",
                                "--kubeconfig", str(absent)], env={"NODE_NAME": "node-a"})
    try:
        assert gpu_series(exporter, "0")["pod"] == "infer-0"  # still attributed, just without pod labels
    finally:
        log = exporter.stop()
    assert f"pod labels and UIDs will not be available: kubeconfig {absent}: " in log
    assert "Traceback" not in log


CONFIGMAP_METRICS = ("# from the ConfigMap\n"
                     "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
                     "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")


def test_configmap_data_loads_the_configmap_and_falls_back_to_the_file(tmp_path: Path, fake_kube: FakeKube) -> None:
    fake_kube.put("", "v1", "configmaps", configmap("gpu", "exporter-metrics", {"metrics": CONFIGMAP_METRICS}))
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")
    args = ["--backend", "fake", "-f", str(counters), "--kubeconfig", fake_kube.write_kubeconfig(tmp_path / "kc")]

    exporter = ExporterProcess([*args, "--configmap-data", "gpu:exporter-metrics", "-c", "200"])
    try:
        assert field_names(exporter) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"}
        assert fake_kube.count("GET", "/api/v1/namespaces/gpu/configmaps/exporter-metrics") == 1
        # read at start only; SIGHUP reloads, which reads the ConfigMap again (the -f file did not change)
        fake_kube.put("", "v1", "configmaps", configmap("gpu", "exporter-metrics", {
            "metrics": CONFIGMAP_METRICS + "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n"}))
        checks = reload_checks(exporter)
        wait_until(lambda: reload_checks(exporter) >= checks + 2, what="two reload checks after the edit")
        assert "DCGM_FI_DEV_SM_CLOCK" not in field_names(exporter)
        assert fake_kube.count("GET", "/api/v1/namespaces/gpu/configmaps/exporter-metrics") == 1
        exporter.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "DCGM_FI_DEV_SM_CLOCK" in field_names(exporter))
        assert fake_kube.count("GET", "/api/v1/namespaces/gpu/configmaps/exporter-metrics") == 2
    finally:
        exporter.stop()

    # dcgm-exporter's environment variable; the ConfigMap does not exist: the -f file is used, said in one line
    exporter = ExporterProcess(args, env={"DCGM_EXPORTER_CONFIGMAP_DATA": "gpu:absent"})
    try:
        assert field_names(exporter) == {"DCGM_FI_DEV_POWER_USAGE"}
    finally:
        log = exporter.stop()
    assert (f"could not retrieve ConfigMap 'gpu:absent': HTTP 404 Not Found; falling back to metric file "
            f"'{counters}'") in log
    assert "Traceback" not in log


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter", "--backend", "fake", *args], capture_output=True,
                          text=True, timeout=30)


def test_configmap_data_errors_name_the_value_or_the_configmap(tmp_path: Path, fake_kube: FakeKube) -> None:
    kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kc")
    result = run_cli("--configmap-data", "no-colon", "--kubeconfig", kubeconfig)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "gpu-exporter: error: --configmap-data 'no-colon': expected <namespace>:<name> or none")

    fake_kube.put("", "v1", "configmaps", configmap("gpu", "no-key", {"other": "x"}))
    fake_kube.put("", "v1", "configmaps", configmap("gpu", "bad", {"metrics": "DCGM_FI_DEV_GPU_UTIL, gauge, ok\n"
                                                                              "NOT_A_FIELD, gauge, x\n"}))
    result = run_cli("--configmap-data", "gpu:no-key", "--kubeconfig", kubeconfig)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == "gpu-exporter: error: ConfigMap gpu/no-key: no 'metrics' key"
    result = run_cli("--configmap-data", "gpu:bad", "--kubeconfig", kubeconfig)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("gpu-exporter: error: ConfigMap gpu/bad key metrics:2: unknown field 'NOT_A_FIELD'")
    assert "Traceback" not in result.stderr


def rewrite(path: Path, text: str) -> None:
    """As an editor or a ConfigMap volume does: a new file renamed over the old one."""
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_counters_file_is_reloaded_and_a_bad_rewrite_keeps_the_fields_in_use(tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n")
    exporter = ExporterProcess(["--backend", "fake", "-f", str(counters), "-c", "200"])
    try:
        assert field_names(exporter) == {"DCGM_FI_DEV_GPU_UTIL"}
        rewrite(counters, "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
                          "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
        wait_until(lambda: field_names(exporter) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"})

        rewrite(counters, "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"
                          "DCGM_FI_DEV_NOT_A_FIELD, gauge, typo\n")
        counters.with_suffix(".new").write_text("")  # some other write in the directory meanwhile
        rewrite(counters.with_name("unrelated.csv"), "x")
        # the broken file is refused once: later checks leave it alone, the old set serves meanwhile
        exporter.output.wait_for("refused")
        checks = reload_checks(exporter)
        wait_until(lambda: reload_checks(exporter) >= checks + 2, what="two more reload checks")
        assert field_names(exporter) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"}
        samples = parse_metrics(exporter.metrics())
        assert value(samples, "gpu_exporter_counters_reloads_total", result="rejected") == 1
        assert value(samples, "gpu_exporter_counters_reloads_total", result="applied") == 1
        assert exporter.client.get("/health").status_code == 200

        # a fixed file is taken
        rewrite(counters, "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")
        wait_until(lambda: field_names(exporter) == {"DCGM_FI_DEV_POWER_USAGE"})
    finally:
        log = exporter.stop()
    refused = [line for line in log.splitlines() if "refused" in line]
    assert len(refused) == 1, log
    assert f"{counters}:2: unknown field 'DCGM_FI_DEV_NOT_A_FIELD'" in refused[0]
    assert "still serving the 2 fields loaded before" in refused[0]
    assert "added: DCGM_FI_DEV_GPU_TEMP; removed: none" in log
    assert exporter.proc.returncode == 0 and "Traceback" not in log
