"""Taurus think times, as ``bzt/utils.py`` (``parse_think_time``) and the JMeter timers Taurus writes read them
(Taurus' durations, which think times are made of, are tested with the other grammars in test_durations.py)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from loadtest.loadgen.taurus.values import TaurusValueError, ThinkTime, parse_think_time

pytestmark = pytest.mark.unit

THINK_TIMES = [
    # site/dat/docs/JMeter.md: "2s: constant value", "uniform(5s, 1s)", "gaussian(1m, 1.5s)", "poisson(10s, 3s)".
    ("2s", ThinkTime("constant", 2.0)), (0.75, ThinkTime("constant", 0.75)), ("1s500ms", ThinkTime("constant", 1.5)),
    ("uniform(5s, 1s)", ThinkTime("uniform", 5.0, 1.0)), ("gaussian(1m, 1.5s)", ThinkTime("gaussian", 60.0, 1.5)),
    ("poisson(10s, 3s)", ThinkTime("poisson", 10.0, 3.0)), ("Uniform(5s,1s)", ThinkTime("uniform", 5.0, 1.0)),
    # ProtocolHandler.safe_time: whole milliseconds
    ("0.7505", ThinkTime("constant", 0.75)),
]


@pytest.mark.parametrize(("text", "think"), THINK_TIMES)
def test_think_times_read_as_taurus_writes_their_timers(text: object, think: ThinkTime) -> None:
    assert parse_think_time(text) == think


@pytest.mark.parametrize("text", ["uniform(5s)", "normal(5s, 1s)", "uniform(1s, 2s)", "poisson(1s, 3s)", "soon",
                                  "uniform(5x, 1s)"])
def test_bad_think_times_are_errors(text: str) -> None:
    with pytest.raises(TaurusValueError):
        parse_think_time(text)


def draws(think: str, n: int = 4000) -> list[float]:
    rng = random.Random(7)
    parsed = parse_think_time(think)
    return [parsed.sample(rng) for _ in range(n)]


def test_uniform_think_time_spans_mean_plus_minus_the_deviation() -> None:
    """UniformRandomTimer, offset mean - dev and range 2 dev (bzt/jmx/tools.py _get_timer)."""
    values = draws("uniform(5s, 1s)")
    assert 4.0 <= min(values) < 4.05 and 5.95 < max(values) <= 6.0
    assert statistics.mean(values) == pytest.approx(5.0, abs=0.05)


def test_gaussian_think_time_has_the_mean_and_the_deviation() -> None:
    """GaussianRandomTimer: |N(0, 1) * dev + mean|."""
    values = draws("gaussian(1s, 100ms)")
    assert statistics.mean(values) == pytest.approx(1.0, abs=0.01)
    assert statistics.stdev(values) == pytest.approx(0.1, abs=0.01)


@pytest.mark.parametrize(("think", "low"), [("poisson(10s, 3s)", 3.0), ("poisson(20ms, 10ms)", 0.01)])
def test_poisson_think_time_starts_at_the_deviation_with_the_mean(think: str, low: float) -> None:
    """PoissonRandomTimer with offset dev and lambda mean - dev (in ms), both of JMeter's methods (lambda over 30 and
    up to 30): "mean is 10s and range of values starts from 3s" (site/dat/docs/JMeter.md)."""
    values = draws(think)
    mean = parse_think_time(think).mean_s
    assert min(values) >= low
    assert statistics.mean(values) == pytest.approx(mean, rel=0.01)
    lambda_ms = (mean - low) * 1000
    assert statistics.stdev(values) == pytest.approx(math.sqrt(lambda_ms) / 1000, rel=0.1)
