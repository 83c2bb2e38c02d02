"""``gpu-loadtest demo --quick --headroom auto``: headroom that follows demand, whose HPA reads the
capacity-headroom preset's request-rate growth through the real adapter, asks for placeholders when the load steps up
and gives them back once it stops growing. One surge of the load on the compressed clock (about a minute and a
half); figures are real-time equivalents. Apart from tests/test_demo_capacity.py so that a parallel worker runs it
beside those two runs."""

from __future__ import annotations

import pytest

from tests.test_demo import QuickRun, assert_all_gone, quick_run

pytestmark = [pytest.mark.demo, pytest.mark.e2e, pytest.mark.tools]


@pytest.fixture(scope="module")
def following_demand(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    return quick_run(tmp_path_factory.mktemp("auto"), "--headroom", "auto", "--placeholder-image", "workload")


def test_headroom_that_follows_demand_grows_when_the_load_steps_up(following_demand: QuickRun) -> None:
    summary = following_demand.summary
    hpa = summary["headroom_hpa"]
    # The chart's bounds on a cluster whose HPA may scale to zero (Kubernetes 1.37+).
    assert hpa["metric"] == "inference_request_rate_growth" and (hpa["min_replicas"], hpa["max_replicas"]) == (0, 4)
    assert summary["placeholder_image"] == "workload"  # the workload's image, pre-pulled
    capacity = summary["capacity"]
    # The arrival rate's growth, read through the adapter, asked for placeholders at the step (4 minutes in), and
    # never before it: the flat load's wobbles stay inside the preset's noise margin.
    ups = [d for d in capacity["headroom_decisions"] if d["to"] > d["from"]]
    assert ups and ups[0]["t"] >= 240 and ups[0]["growth"] > 0
    peak = max(ups, key=lambda d: (d["to"], -d["t"]))
    assert peak["to"] > 1
    # Once the load stopped growing (held at 55, then falling) the headroom came back down after the slope's windows
    # forgot the step and the HPA's 5-minute scale-down window passed: to 0 in most runs, while a single wobble
    # above the noise margin late in the run (this lane's load is noisier on a busy CI machine) holds one
    # placeholder for another window.
    assert min(d["to"] for d in capacity["headroom_decisions"] if d["t"] > peak["t"]) <= 1
    assert summary["interrupted"] is False and summary["error"] is None
    assert_all_gone(summary)
