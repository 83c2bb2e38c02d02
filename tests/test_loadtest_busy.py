"""The busy fraction of a simulated GPU over a sliding window."""

from __future__ import annotations

import pytest

from loadtest.standins.busy import BusyWindow

pytestmark = pytest.mark.unit


def test_idle_gpu_is_zero_and_fully_busy_is_one() -> None:
    window = BusyWindow(2.0, clock=lambda: 0.0)
    assert window.fraction(now=10.0) == 0.0
    window.begin(now=10.0)
    assert window.fraction(now=11.0) == pytest.approx(0.5)  # busy for 1 s of the last 2
    assert window.fraction(now=13.0) == 1.0
    window.end(now=13.0)
    assert window.fraction(now=13.0) == 1.0


def test_only_the_window_counts() -> None:
    window = BusyWindow(2.0)
    for start in (0.0, 0.5, 1.0, 1.5):  # 0.1 s of every 0.5 s: 20 % busy
        window.begin(now=start)
        window.end(now=start + 0.1)
    assert window.fraction(now=2.0) == pytest.approx(0.2)
    assert window.fraction(now=2.95) == pytest.approx(0.1)  # [1.0, 1.1) and [1.5, 1.6) are inside [0.95, 2.95]
    assert window.fraction(now=3.55) == pytest.approx(0.025)  # the last 0.05 s of [1.5, 1.6)
    assert window.fraction(now=3.6) == 0.0


def test_an_interval_straddling_the_window_start_counts_only_its_inside_part() -> None:
    window = BusyWindow(1.0)
    window.begin(now=0.0)
    window.end(now=1.0)
    assert window.fraction(now=1.5) == pytest.approx(0.5)


def test_misuse_is_an_error() -> None:
    window = BusyWindow(1.0)
    with pytest.raises(RuntimeError, match="not busy"):
        window.end(now=0.0)
    window.begin(now=0.0)
    with pytest.raises(RuntimeError, match="already busy"):
        window.begin(now=0.1)
    with pytest.raises(ValueError, match="positive"):
        BusyWindow(0)
