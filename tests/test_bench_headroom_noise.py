"""bench/headroom_noise.py on a tiny case: a flat Poisson load backfilled into a real Prometheus, read through the
capacity-headroom preset's own request-rate growth query and through the same slope without its noise margin."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from adapter.presets.capacity import NOISE_SIGMAS, RATE_WINDOW, WINDOW
from tests.support.scripts import load_script
from tests.support.tools import require_tool

pytestmark = [pytest.mark.e2e, pytest.mark.tools]

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "headroom_noise.py"


def load_bench() -> ModuleType:
    return load_script("bench/headroom_noise.py", "headroom_noise_bench")


def test_a_flat_load_reads_above_zero_about_half_the_time_without_the_margin_and_rarely_with_it(
        tmp_path: Path) -> None:
    require_tool("prometheus")
    require_tool("promtool")
    bench = load_bench()
    result = bench.measure([bench.Case(55.0, 15)], minutes=40, seed=1, workdir=tmp_path)
    queries = result["queries"]["r55-s15"]
    preset, baseline = queries["preset"], queries["baseline"]
    # The preset's own query, as the adapter renders it for the case's pool: the slope and the noise margin.
    assert preset.startswith("clamp_min(deriv(") and f"[{WINDOW}:" in preset
    assert f"{NOISE_SIGMAS:g} * sqrt(2 * clamp_min(" in preset and "rate(llm_d_epp_request_total{" in preset
    assert 'inference_pool="pool",namespace="r55-s15"' in preset
    assert "sqrt(" not in baseline and preset.startswith(baseline.removesuffix(", 0)"))
    [row] = result["rows"]
    assert row["counted_rate"] == pytest.approx(55.0, rel=0.05)  # the backfilled counter is the load
    plain, margin = row["baseline"], row["preset"]
    assert plain["evaluations"] == margin["evaluations"] == 40 * 4
    # deriv of noise: positive about half the time; the margin leaves out most of it.
    assert 0.3 <= plain["above_zero"] / plain["evaluations"] <= 0.7, plain
    assert margin["above_zero"] <= plain["above_zero"] / 4, (margin, plain)
    assert margin["max_value"] < plain["max_value"]
    assert f"}}[{RATE_WINDOW}]))" in preset
