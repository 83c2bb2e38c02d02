"""``gpu-loadtest demo --quick``, the default lane with GPU nodes (as CI runs `make demo`), with and without
headroom: a scale-up whose new replica waits for a GPU node (the node layer launches one, the pod is Pending
meanwhile), and the same scale-up with placeholders, whose first new replica takes a placeholder's GPU at once.
Each run is one surge of the load on the compressed clock (about a minute and a half); figures are real-time
equivalents. Headroom that follows demand is tests/test_demo_capacity_auto.py (its own file, so that a parallel
worker runs it beside these two runs)."""

from __future__ import annotations

import csv

import pytest

from tests.test_demo import QuickRun, assert_all_gone, quick_run

pytestmark = [pytest.mark.demo, pytest.mark.e2e, pytest.mark.tools]


@pytest.fixture(scope="module")
def without(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    return quick_run(tmp_path_factory.mktemp("nodes"))  # GPU nodes by default: Karpenter


@pytest.fixture(scope="module")
def with_headroom(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    return quick_run(tmp_path_factory.mktemp("headroom"), "--headroom", "4")


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


def test_the_runs_summary_replays_as_its_own_delays_and_surge(without: QuickRun) -> None:
    """``gpu-loadtest demo --from-report`` reads a demo's summary as it reads a capacity report: each new replica's
    node, image and model phases (real-time equivalents) give the delays back, the surge its step."""
    from loadtest.scenarios.replay import replay_of

    [surge] = without.summary["capacity"]["surges"]
    new = [r for r in surge["replicas"] if r["new_node"]]
    assert new and all(r["phases_s"]["node"] >= 180 for r in new)  # the node's 3 minutes and the batch window
    replay = replay_of(without.summary, "summary.json")
    timings = replay.timings
    # The node: its 180 s and Karpenter's batch window (a second or two, ticks of 1 s in real time); the image as
    # pulled; the model: its 48 s plus the replica process's own start, in real-time seconds on this clock.
    assert 180 <= timings.node_s <= 200 and 334 <= timings.image_pull_s <= 345 and timings.model_load_s >= 48
    [replayed] = replay.surges
    assert (replayed.start, replayed.before, replayed.target) == (240.0, 1, 4)


def test_the_same_scale_up_with_headroom_does_not_wait(without: QuickRun, with_headroom: QuickRun) -> None:
    summary = with_headroom.summary
    assert summary["headroom"] == 4 and summary["placeholder_image"] == "pause"  # the chart's default
    [surge] = summary["capacity"]["surges"]
    assert surge["replicas_asked"] > surge["replicas_before"] == 1
    # Bound at the node layer's next step (every 0.05 s, 1 s in real time), in a preempted placeholder's place.
    assert surge["first_replica_wait_s"] <= 1.0
    assert summary["capacity"]["placeholders_preempted"] >= 1
    # Pause placeholders leave the image to the replica: it pulls it where the placeholder stood.
    assert surge["phases_s"]["image"] > 0
    [before] = without.summary["capacity"]["surges"]
    # The surge spent less time waiting for nodes. (Not the time to capacity: under a loaded CI machine the HPA
    # sometimes asks for a fifth replica late in the hold, beyond the four placeholders, whose node, image and model
    # then outlast the load; seen once.)
    assert surge["phases_s"]["node"] < before["phases_s"]["node"]
    assert summary["interrupted"] is False and summary["error"] is None
    assert_all_gone(summary)
