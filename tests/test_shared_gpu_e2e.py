"""The real exporter process on a time-sliced GPU: PodResources over gRPC, a fake /proc tree and kubelet log
directories, scraped over HTTP and by a real Prometheus."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from clikit.fake_gpus import fake_gpu_uuid
from tests.exporter_helpers import parse_metrics, series, value, write_state
from tests.fake_node import FakeNode
from tests.support.exporter_process import ExporterProcess
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.podresources_server import FakePodResourcesServer
    from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.e2e

SHARED = "nvidia.com/gpu.shared"


def test_time_sliced_gpu_per_pod_series_through_prometheus(
        tmp_path: Path, podresources_server: FakePodResourcesServer,
        prometheus_factory: Callable[..., PrometheusServer]) -> None:
    uuid0 = fake_gpu_uuid("", 0)
    node = FakeNode(tmp_path)
    a, b = node.pod("infer-a", "ml", "server"), node.pod("infer-b", "ml", "server")
    node.run(4242, a, "server")
    node.run(4343, b, "server")
    podresources_server.set_pods([
        ("infer-a", "ml", [("server", [(SHARED, [f"{uuid0}::0"])])]),
        ("infer-b", "ml", [("server", [(SHARED, [f"{uuid0}::3"])])]),
    ])
    state = tmp_path / "state.json"
    write_state(state, {"gpus": {"0": {"processes": [{"pid": 4242, "sm_util": 35, "fb_used_mib": 2048},
                                                     {"pid": 4343, "sm_util": 20, "fb_used_mib": 1024}]}}})
    exporter = ExporterProcess([
        "--backend", "fake", "--fake-state", str(state), "-c", "250", "-k",
        "--pod-resources-kubelet-socket", podresources_server.socket_path, "--pod-resources-refresh-interval", "200",
        "--nvidia-resource-names", SHARED, "--proc-root", str(node.proc), "--kubelet-logs-dir", str(node.logs)])
    try:
        wait_until(lambda: len(series(parse_metrics(exporter.metrics()), "gpu_pod_sm_utilization_ratio")) == 2)
        rows = parse_metrics(exporter.metrics())
        assert value(rows, "gpu_pod_sm_utilization_ratio", pod="infer-a", namespace="ml", container="server") == 0.35
        assert value(rows, "gpu_pod_framebuffer_used_bytes", pod="infer-b") == 1024 * 1024 * 1024
        assert "pod" not in series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]

        prom = prometheus_factory([exporter.address], job="gpu-exporter", honor_labels=True)
        result = prom.wait_for('sum by (pod) (gpu_pod_sm_utilization_ratio{namespace="ml"})', timeout=30)
        assert {r["metric"]["pod"]: float(r["value"][1]) for r in result} == {"infer-a": 0.35, "infer-b": 0.2}

        # infer-b ends: its share is released and its process is gone
        podresources_server.set_pods([("infer-a", "ml", [("server", [(SHARED, [f"{uuid0}::0"])])])])
        write_state(state, {"gpus": {"0": {"processes": [{"pid": 4242, "sm_util": 35, "fb_used_mib": 2048}]}}})
        node.exit(4343)
        wait_until(lambda: [r[1]["pod"] for r in series(parse_metrics(exporter.metrics()),
                                                         "gpu_pod_sm_utilization_ratio")] == ["infer-a"])
        assert value(parse_metrics(exporter.metrics()), "gpu_pod_sm_utilization_ratio", pod="infer-a") == 0.35

        # the exporter loses host PID visibility: per-pod series go, the self-metric says why
        node.set_host_pid_namespace(False)
        wait_until(lambda: not series(parse_metrics(exporter.metrics()), "gpu_pod_sm_utilization_ratio"))
        rows = parse_metrics(exporter.metrics())
        assert value(rows, "gpu_exporter_process_attribution_unavailable", reason="pids_not_visible") == 1
        assert series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    finally:
        log = exporter.stop()
    assert "Traceback" not in log
    assert "per-pod attribution on shared GPUs is off (pids_not_visible)" in log


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "KUBERNETES_SERVICE_HOST")}
    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True, text=True, timeout=30,
                          env={**clean, **env})


def test_kubernetes_api_identity_source_needs_node_name_and_a_cluster() -> None:
    args = ("--backend", "fake", "-k", "--pod-identity-source", "kubernetes-api")
    result = run_cli(*args, env={})
    assert result.returncode != 0
    assert result.stderr.strip() == ("gpu-exporter: error: --pod-identity-source kubernetes-api needs NODE_NAME "
                                     "(set it from spec.nodeName)")
    result = run_cli(*args, env={"NODE_NAME": "node-a"})
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "gpu-exporter: error: --pod-identity-source kubernetes-api: no in-cluster configuration")
