"""When virtual users start, and the throughput cap: Taurus' shaper tables from its own tests, and the Concurrency
Thread Group's planned concurrency (jmeter-plugins ``ConcurrencyThreadStarter.getPlannedConcurrency``)."""

from __future__ import annotations

import math

import pytest

from loadtest.loadgen.taurus.schedule import RateCap, concurrency_group_starts, shaper_rows, thread_group_starts

pytestmark = pytest.mark.unit

# (upstream file and test, throughput, ramp-up, hold-for, steps, the load_profile rows it expects)
SHAPER = [
    ("tests/unit/modules/jmeter/test_JMeterExecutor.py test_add_shaper_constant", 100, 0, 60, None,
     [(100.0, 100.0, 60)]),
    ("tests/unit/modules/jmeter/test_JMeterExecutor.py test_add_shaper_ramp_up", 9, 60, 120, None,
     [(1.0, 9.0, 60), (9.0, 9.0, 120)]),
    ("tests/unit/modules/jmeter/test_JMX.py test_CTG_crs", 52, 103, 0, 5,
     [(10.4, 10.4, 20), (20.8, 20.8, 21), (31.2, 31.2, 20), (41.6, 41.6, 21), (52.0, 52.0, 21)]),
    ("tests/unit/modules/jmeter/test_JMX.py test_TST_low_val", 2, 300, 6900, None,
     [(1.0, 2.0, 300), (2.0, 2.0, 6900)]),
]


@pytest.mark.parametrize(("source", "throughput", "ramp_up", "hold", "steps", "rows"), SHAPER,
                         ids=[s[0].rsplit(" ", 1)[1] for s in SHAPER])
def test_shaper_rows_are_those_taurus_writes(source: str, throughput: float, ramp_up: int, hold: int,
                                             steps: int | None, rows: list[tuple[float, float, int]]) -> None:
    assert shaper_rows(throughput, ramp_up, hold, steps) == rows


def test_the_cap_ramps_linearly_within_a_row_and_ends_with_the_schedule() -> None:
    cap = RateCap(tuple(shaper_rows(9, 60, 120, None)))
    assert [cap.rate_at(t) for t in (0, 30, 60, 100, 179.9)] == pytest.approx([1.0, 5.0, 9.0, 9.0, 9.0])
    assert cap.rate_at(180) == 0.0 and cap.duration == 180


def planned(target: int, ramp_up: float, steps: int | None, t: float) -> int:
    """getPlannedConcurrency during the ramp-up and hold, written out from the Java source (Math.round: halves up)."""
    if ramp_up == 0 or t > ramp_up:
        return target
    if steps:
        return math.floor(target / steps * (math.floor(t / (ramp_up / steps)) + 1) + 0.5)
    return math.floor(target / ramp_up * t + 0.5)


@pytest.mark.parametrize(("target", "ramp_up", "steps"), [
    (1, 1, None),  # the guide's execution: concurrency 1, ramp-up 1s
    (10, 15, None),  # site/dat/docs/ExecutionSettings.md's example: concurrency 10, ramp-up 15s
    (71, 103, 5),  # test_JMX.py test_CTG_crs's load
    (170, 60, 5),  # test_JMeterExecutor.py test_stepping_tg_ramp_no_proportion's load
    (4, 2, 2), (3, 10, 4), (5, 7, 10),  # more steps than users: some steps add none
])
def test_each_user_starts_when_the_planned_concurrency_first_reaches_it(target: int, ramp_up: int,
                                                                          steps: int | None) -> None:
    starts = concurrency_group_starts(target, ramp_up, steps)
    assert len(starts) == target and starts == sorted(starts)
    grid = [i / 1000 * ramp_up for i in range(1001)]
    for k, start in enumerate(starts, 1):
        first = next(t for t in grid if planned(target, ramp_up, steps, t) >= k)
        assert start == pytest.approx(first, abs=ramp_up / 1000 + 1e-9), (k, start, first)


def test_concurrency_group_starts_in_the_examples() -> None:
    assert concurrency_group_starts(1, 1, None) == [0.5]  # the guide's one user starts half a second in
    assert concurrency_group_starts(4, 2, 2) == [0.0, 0.0, 1.0, 1.0]
    assert concurrency_group_starts(3, 0, None) == [0.0, 0.0, 0.0]
    assert concurrency_group_starts(170, 60, 5)[::34] == [0.0, 12.0, 24.0, 36.0, 48.0]


def test_a_regular_thread_group_spreads_its_threads_over_the_ramp_up() -> None:
    assert thread_group_starts(4, 2) == [0.0, 0.5, 1.0, 1.5]
    assert thread_group_starts(2, 0) == [0.0, 0.0]
