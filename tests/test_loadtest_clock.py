"""The demo's clock: every real <-> demo conversion the load test makes, with its rounding, pinned by one table."""

from __future__ import annotations

from typing import Any

import pytest

from loadtest.clock import REAL_TIME, DemoClock
from loadtest.loadgen.profile import parse_profile
from loadtest.nodes import KarpenterSettings, NodePool, NodeTimings

pytestmark = pytest.mark.unit

CLOCK = DemoClock(20.0)  # the demo's default with GPU nodes

CONVERSIONS: list[tuple[str, DemoClock, str, Any, Any]] = [
    # (case, clock, method, argument, result)
    ("a real duration on the demo's clock", CLOCK, "demo_seconds", 180.0, 9.0),
    ("a demo duration in real time", CLOCK, "real_seconds", 0.75, 15.0),
    ("real time: nothing changes", REAL_TIME, "demo_seconds", 15.0, 15.0),
    ("whole seconds: the HPA's 300 s window", CLOCK, "demo_whole_seconds", 300.0, 15),
    ("whole seconds: a 15 s period is 0.75, rounded to 1", CLOCK, "demo_whole_seconds", 15.0, 1),
    ("whole seconds: halves go to even, as round() does", CLOCK, "demo_whole_seconds", 50.0, 2),
    ("whole seconds: 0 stays 0", CLOCK, "demo_whole_seconds", 0.0, 0),
    ("a PromQL range in whole milliseconds", CLOCK, "demo_promql_duration", "5m", "15000ms"),
    ("a PromQL range rounded to the millisecond", CLOCK, "demo_promql_duration", "1m30s", "4500ms"),
    ("a PromQL range never below 1 ms", DemoClock(5000.0), "demo_promql_duration", "1s", "1ms"),
    ("a count over 20 real seconds, as one demo second's", CLOCK, "demo_count", 300.0, 15.0),
    ("a growth per real second, per demo second", CLOCK, "demo_rate", 0.25, 5.0),
    ("a figure in real seconds, to 0.1 s", CLOCK, "real_figure", 12.3456, 246.9),
    ("no figure stays none", CLOCK, "real_figure", None, None),
    ("a figure of a real-time run, to 0.1 s", REAL_TIME, "real_figure", 12.3456, 12.3),
]


@pytest.mark.parametrize(("case", "clock", "method", "argument", "result"), CONVERSIONS,
                         ids=[c[0] for c in CONVERSIONS])
def test_conversions(case: str, clock: DemoClock, method: str, argument: Any, result: Any) -> None:
    assert getattr(clock, method)(argument) == result


def test_whole_seconds_keep_a_floor() -> None:
    # A rate-limit policy's periodSeconds must be at least 1: 5 s is 0.25 on the demo's clock.
    assert CLOCK.demo_whole_seconds(5.0, least=1) == 1


def test_settings_profiles_and_back() -> None:
    timings = CLOCK.demo_settings(NodeTimings())
    assert (timings.launch_s, timings.node_s, timings.image_pull_s) == (2.25, 9.0, 16.7)
    assert CLOCK.demo_settings(KarpenterSettings()).batch_max_s == 0.5
    never = NodePool("gpu", (), consolidate_after_s=None)  # consolidateAfter: Never stays Never
    assert CLOCK.demo_settings(never).consolidate_after_s is None
    real = parse_profile("300s:8,120s:8..55,600s:55")
    assert CLOCK.demo_profile(real).text() == "15s:8,6s:8..55,30s:55"
    assert CLOCK.real_profile(CLOCK.demo_profile(real)) == real


@pytest.mark.parametrize("scale", [0.5, 0.0, -1.0, float("nan"), float("inf")])
def test_the_clock_never_runs_slower_than_real_time(scale: float) -> None:
    with pytest.raises(ValueError, match="time_scale"):
        DemoClock(scale)


def test_compressed() -> None:
    assert CLOCK.compressed and not REAL_TIME.compressed
