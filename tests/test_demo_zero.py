"""``gpu-loadtest demo --min-replicas 0 --quick`` end to end: the HPA takes the replicas to zero through the real
adapter (the inference-gateway preset's External metrics, read from the buffering gateway's endpoint-picker series
through a real Prometheus), the burst that follows wakes them, the gateway holds every request while no replica is
ready, and none is lost; the summary reports the cold-start wait and the GPU-seconds used."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.test_demo import assert_all_gone, quick_run

pytestmark = [pytest.mark.demo, pytest.mark.e2e, pytest.mark.tools]

QUEUE, RUNNING = "llm_d_epp_flow_control_queue_size", "llm_d_epp_average_running_requests"


def test_quick_scale_to_zero_reaches_zero_wakes_on_the_gateway_queue_and_loses_no_request(tmp_path: Path) -> None:
    run = quick_run(tmp_path, "--min-replicas", "0")
    summary = run.summary
    assert summary["min_replicas"] == 0 and summary["hpa_metrics"] == [QUEUE, RUNNING]
    assert summary["initial_replicas"] == 1  # created at 1: a Deployment applied at 0 would count as paused
    assert summary["interrupted"] is False and summary["error"] is None

    # Down to zero while idle, then woken by the queue the burst leaves at the gateway.
    decisions = summary["decisions"]
    to_zero = next(i for i, d in enumerate(decisions) if d["from"] > 0 and d["to"] == 0)
    assert decisions[to_zero]["reason"] == "All metrics below target"
    wake = next(d for d in decisions[to_zero:] if d["from"] == 0 and d["to"] > 0)
    assert wake["reason"] == f"external metric {QUEUE} above target"
    assert wake["readings"][QUEUE] > 0  # at 0 replicas any request waiting asks for ceil(waiting / 5) >= 1
    assert wake["readings"][RUNNING] is None  # no replica ready: the pool's average has no value, the queue decides
    assert summary["seconds_at_zero"] > 0

    # No request lost: the gateway held those that came while no replica was ready, and forwarded them all.
    assert summary["requests"]["sent"] > 0
    assert summary["requests"]["ok"] == summary["requests"]["sent"]
    assert summary["requests"]["errors"] == summary["requests"]["dropped"] == 0
    cold = summary["cold_start"]
    assert cold["requests"] > 0 and len(cold["first_request_waits_seconds"]) >= 1
    assert 0 < cold["wait_p50_seconds"] <= cold["wait_max_seconds"] < summary["gateway_timeout_seconds"]
    assert cold["timed_out"] == cold["abandoned"] == cold["upstream_errors"] == 0
    assert cold["forwarded"] == cold["received"] == summary["requests"]["sent"]

    with run.timeline.open() as fh:
        rows = list(csv.DictReader(fh))
    replicas = [int(r["current_replicas"]) for r in rows]
    first_zero = replicas.index(0)
    assert max(replicas[first_zero:]) > 0  # back from zero
    assert max(int(r["gateway_queue"]) for r in rows) > 0
    # The GPU-seconds reported add up the replicas that held a GPU, second by second over the profile (cold starts
    # included); a sample at the end of each second is off by at most the replicas a decision added or removed.
    pods = sum(int(r["pods"]) for r in rows if r["phase"] != "drain")
    changed = sum(abs(e["to"] - e["from"]) for e in summary["scale_events"])
    assert summary["gpu_seconds"] == pytest.approx(pods, abs=changed + 1)
    assert "GPU-seconds (replica-seconds)" in run.result.stdout and "cold-start wait" in run.result.stdout
    assert run.plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert_all_gone(summary)
