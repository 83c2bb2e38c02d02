"""``gpu-loadtest demo --nodes karpenter --quick``, with and without headroom, as CI runs it: a scale-up whose new
replica waits for a GPU node (the node layer launches one, the pod is Pending meanwhile), and the same scale-up with
placeholders, whose first new replica takes a placeholder's GPU at once. Each run is one surge of the load on the
compressed clock (about a minute); figures are real-time equivalents."""

from __future__ import annotations

import csv

import pytest

from tests.support.tools import require_tool
from tests.test_demo import QuickRun, assert_all_gone, quick_run

pytestmark = [pytest.mark.demo, pytest.mark.e2e, pytest.mark.tools]


@pytest.fixture(autouse=True)
def _prometheus_installed() -> None:
    require_tool("prometheus")


@pytest.fixture(scope="module")
def without(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    return quick_run(tmp_path_factory.mktemp("nodes"), "--nodes", "karpenter")


@pytest.fixture(scope="module")
def with_headroom(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    return quick_run(tmp_path_factory.mktemp("headroom"), "--nodes", "karpenter", "--headroom", "4")


def test_a_scale_up_waits_for_a_gpu_node(without: QuickRun) -> None:
    summary = without.summary
    assert summary["nodes"] == "karpenter" and summary["time_scale"] == 20
    [surge] = summary["capacity"]["surges"]
    assert surge["replicas_asked"] > surge["replicas_before"] == 1
    # The first new replica waited for a node: at least the node phases (3 minutes in real time) minus the batch.
    assert surge["first_replica_wait_s"] >= 170
    assert surge["phases_s"]["node"] >= 170 and surge["nodes_launched"] >= 1
    assert summary["capacity"]["nodes_launched"] >= 1 and summary["capacity"]["pending_pod_seconds"] > 0
    assert "surge 1: time to capacity" in without.result.stdout
    with without.timeline.open() as fh:
        rows = list(csv.DictReader(fh))
    assert max(int(r["pending_pods"]) for r in rows if r["pending_pods"]) >= 1  # Pending, waiting for a GPU
    assert max(int(r["node_gpus"]) for r in rows if r["node_gpus"]) > 1  # a node was launched for it
    assert without.plot.read_bytes().startswith(b"\x89PNG")
    assert summary["interrupted"] is False and summary["error"] is None
    assert_all_gone(summary)


def test_the_same_scale_up_with_headroom_does_not_wait(without: QuickRun, with_headroom: QuickRun) -> None:
    summary = with_headroom.summary
    assert summary["headroom"] == 4
    [surge] = summary["capacity"]["surges"]
    assert surge["replicas_asked"] > surge["replicas_before"] == 1
    # Bound at the node layer's next step (every 0.05 s, 1 s in real time), in a preempted placeholder's place.
    assert surge["first_replica_wait_s"] <= 1.0
    assert summary["capacity"]["placeholders_preempted"] >= 1
    [before] = without.summary["capacity"]["surges"]
    # Whether or not capacity arrived without headroom before the load fell, it came sooner with it.
    assert surge["time_to_capacity_s"] is not None
    assert before["time_to_capacity_s"] is None or surge["time_to_capacity_s"] < before["time_to_capacity_s"]
    assert summary["interrupted"] is False and summary["error"] is None
    assert_all_gone(summary)
