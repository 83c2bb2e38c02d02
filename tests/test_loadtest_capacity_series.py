"""``--compare-capacity``'s honesty rules (pure, with a stand-in for the demo run): a surge that needed no new
replica reads "no scale-up needed"; a run that failed or was interrupted stays in the table and out of the figures,
which say so; ``--runs N`` runs the comparison N times with the seed varied and gives each figure's median and
spread; ``--metric queue`` sizes the replicas needed by the queue."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from loadtest.cli.main import main
from loadtest.cli.summary import print_summary
from loadtest.clock import DemoClock
from loadtest.hpa.record import SyncRecord
from loadtest.hpa.scale_on import ScaleOn
from loadtest.loadgen.profile import parse_profile
from loadtest.measure.progress import Progress
from loadtest.measure.summary import summarize
from loadtest.measure.time_to_capacity import ScaleUp, measure, no_scale_up_needed, surges
from loadtest.measure.timeline import TimelineRow
from loadtest.nodes import load_nodepool
from loadtest.nodes.cluster import PodSpan
from loadtest.nodes.layer import NodeLayerConfig, NodesKind
from loadtest.scenarios.capacity_compare import (
    CapacityComparison,
    capacity_row,
    format_capacity_table,
    run_capacity_comparison,
    run_capacity_series,
    spread_figures,
    spread_table,
)
from loadtest.scenarios.demo_settings import DEFAULT_SETTINGS, DemoSettings, capacity_settings, with_overrides
from loadtest.scenarios.outputs import Outputs, RunResult

pytestmark = pytest.mark.unit

PHASES = {"decision": 20.0, "node": 180.0, "image": 334.0, "model": 48.0}


def summary_of(ttc: list[float | None], cost: float, *, before: int = 1, needed: int = 4,
               decided: bool = True, behind: list[float | None] | None = None) -> Any:
    docs = [ScaleUp(i + 1, 0.0, 1.0 if decided else None, t, before, 4, PHASES, 180.0, 12.0, 0, 3, 1,
                    t if behind is None else behind[i], replicas_needed=needed).to_json() for i, t in enumerate(ttc)]
    capacity = {"time_scale": 1.0, "surges": docs, "gpu_node_seconds": cost, "pending_pod_seconds": 12.0,
                "nodes_launched": 1, "nodes": [], "placeholders_preempted": 0, "headroom_decisions": []}
    rows = [TimelineRow(t=0.0, phase="hold", target_rps=1.0, sent=10, ok=10)]
    return summarize(rows, [], None, None, extra={"capacity": capacity})


# ------------------------------------------------------------------------------------ no scale-up needed

def test_a_surge_the_replicas_already_carried_needs_no_scale_up() -> None:
    # Four replicas serve a surge that needs four: the HPA asks for none, and that is not "not reached".
    surge = surges(parse_profile("10s:5,100s:50,10s:5"))[0]
    pods = [PodSpan(-100.0, -100.0, -100.0, -50.0)] * 4
    up = measure(1, surge, [SyncRecord(5.0, 4, 4)], pods, [], [], needed=4, service_s=0.04, step_s=0.1)
    assert (up.time_to_capacity_s, up.first_decision_s, up.replicas_before, up.replicas_needed) == (None, None, 4, 4)
    assert no_scale_up_needed(up.to_json())
    short = measure(1, surge, [SyncRecord(5.0, 2, 2)], pods[:2], [], [], needed=4, service_s=0.04, step_s=0.1)
    assert not no_scale_up_needed(short.to_json())  # the HPA never asked: that is "not reached"
    console = Console(record=True, width=200, file=io.StringIO())
    print_summary(console, summary_of([None], 1000.0, before=4, decided=False), "summary")
    text = console.export_text()
    assert "no scale-up needed (4 replicas served it; it needed 4)" in text
    assert "not reached" not in text
    print_summary(console, summary_of([None], 1000.0, before=2, decided=False), "summary")
    assert "not reached before the load fell (2 -> 4 replicas" in console.export_text()


def test_the_comparison_table_reads_none_needed() -> None:
    row = capacity_row("none", summary_of([600.0, None], 1000.0))
    assert row.no_scale_up == (False, False)
    carried = capacity_row("static 4", summary_of([None, None], 1000.0, before=4, decided=False))
    assert carried.no_scale_up == (True, True)
    table = format_capacity_table([row, carried])
    assert "| none     | 600 s, -" in table and "| static 4 | none needed, none needed" in table


# ------------------------------------------------------------------------------------ --metric queue

@pytest.mark.parametrize(("scale_on", "needed"), [(ScaleOn.GPU, 4), (ScaleOn.QUEUE, 3), (ScaleOn.BOTH, 4)])
def test_replicas_needed_follow_what_the_hpa_scales_on(scale_on: ScaleOn, needed: int) -> None:
    # 55 requests/s, a replica serves 25 (40 ms each): at the 60 % GPU target 15 each, so 4; on the queue, the
    # fewest whose queue does not grow: 3 (2 would be 110 % busy); both: the larger proposal, the GPU target's.
    settings = with_overrides(DEFAULT_SETTINGS, scale_on=scale_on)
    assert settings.needed_replicas == needed
    assert settings.replica_rate == {ScaleOn.GPU: 15.0, ScaleOn.QUEUE: 25.0, ScaleOn.BOTH: 15.0}[scale_on]


# ------------------------------------------------------------------------------------ failed runs left out

def settings_for_nodes() -> DemoSettings:
    return capacity_settings(NodeLayerConfig(NodesKind.KARPENTER, DemoClock(20.0), pool=load_nodepool()),
                             quick=True)


COSTS = {"none": 10_000.0, "static": 30_000.0, "auto": 15_000.0}
TIMES = {"none": 1200.0, "static": 150.0, "auto": 400.0}


def variant(s: DemoSettings) -> str:
    assert s.capacity is not None
    return "none" if not s.capacity.headroom else "auto" if s.capacity.headroom_auto else "static"


def quiet(name: str) -> Progress:
    return Progress(Console(file=io.StringIO()))


def test_a_failed_run_stays_in_the_table_and_out_of_the_figures(tmp_path: Path) -> None:
    async def runner(s: DemoSettings, outputs: Outputs, progress: Progress) -> RunResult:
        name = variant(s)
        return RunResult(summary_of([TIMES[name]], COSTS[name]), [], [],
                         error="DemoError: the adapter exited" if name == "auto" else None)

    comparison = asyncio.run(run_capacity_comparison(settings_for_nodes(), 4, plot=None, summary=tmp_path / "c.json",
                                                     csv=None, progress=quiet, runner=runner))
    assert [r.headroom for r in comparison.rows] == ["none", "static 4", "auto (failed)"]
    assert comparison.figures == [
        "static headroom cut the first surge's time to capacity by 88 % (1200 s -> 150 s; goal: >= 80 %)",
        "left out of these figures: auto (failed: DemoError: the adapter exited)"]
    assert json.loads((tmp_path / "c.json").read_text())["left_out"] == [
        "auto (failed: DemoError: the adapter exited)"]


def test_an_interrupted_run_is_left_out_too() -> None:
    async def runner(s: DemoSettings, outputs: Outputs, progress: Progress) -> RunResult:
        name = variant(s)
        return RunResult(summary_of([TIMES[name]], COSTS[name]), [], [], interrupted=name == "static")

    comparison = asyncio.run(run_capacity_comparison(settings_for_nodes(), 4, plot=None, summary=None, csv=None,
                                                     progress=quiet, runner=runner))
    assert [n for n, _ in comparison.runs] == ["none", "static"]  # nothing runs after an interruption
    assert comparison.figures == ["left out of these figures: static (interrupted)"]


# ------------------------------------------------------------------------------------ several seeded runs

def test_runs_vary_the_seed_and_give_each_figure_its_median_and_spread(tmp_path: Path) -> None:
    seen: list[tuple[int | None, str]] = []
    spread = {7: 1.0, 8: 1.2, 9: 0.9}  # each seed's runs a little slower or faster

    async def runner(s: DemoSettings, outputs: Outputs, progress: Progress) -> RunResult:
        name = variant(s)
        seen.append((s.seed, name))
        assert s.seed is not None
        return RunResult(summary_of([TIMES[name] * spread[s.seed]], COSTS[name]), [], [],
                         error="boom" if (s.seed, name) == (9, "auto") else None)

    comparisons = asyncio.run(run_capacity_series(settings_for_nodes(), 4, 3, 7, plot=None,
                                                  summary=tmp_path / "series.json", csv=tmp_path / "run.csv",
                                                  progress=quiet, runner=runner))
    assert seen == [(seed, name) for seed in (7, 8, 9) for name in ("none", "static", "auto")]
    assert [c.seed for c in comparisons] == [7, 8, 9]
    table = spread_table(comparisons).splitlines()
    # none: 1200, 1440, 1080 s; static 150, 180, 135 s; auto only from seeds 7 and 8: 400, 480 s
    assert table[2].startswith("| none (3 runs)     | 1200 s (1080..1440)")
    assert table[3].startswith("| static 4 (3 runs) | 150 s (135..180)")
    assert table[4].startswith("| auto (2 runs)     | 440 s (400..480)")
    assert spread_figures(comparisons) == [
        "static headroom cut the first surge's time to capacity by 88 % (median of 3 runs, 88 to 88 %; "
        "goal: >= 80 %)",
        "auto headroom kept 76 % of that gain (median of 2 runs, 76 to 76 %; goal: >= 70 %)",
        "auto headroom's extra GPU-node-seconds were 25 % of static headroom's (median of 2 runs, 25 to 25 %; "
        "goal: <= 50 %)",
        "left out of these figures: seed 9: auto (failed: boom)"]
    document = json.loads((tmp_path / "series.json").read_text())
    assert document["seeds"] == [7, 8, 9] and len(document["comparisons"]) == 3
    assert document["figures"] == spread_figures(comparisons)


def test_the_spread_keeps_the_gain_kept_of_each_measure_apart() -> None:
    # On a ramp the auto headroom's share of the gain is given for the time to capacity and for the time behind
    # demand, in the same words: each has its own median.
    def ramp(ttc: float, behind: float, cost: float, name: str) -> Any:
        return capacity_row(name, summary_of([ttc], cost, behind=[behind]))

    comparison = CapacityComparison([("none", RunResult(summary_of([1.0], 1.0), [], []))] * 3,
                                    [ramp(1400.0, 900.0, 20_000.0, "none"), ramp(650.0, 150.0, 40_000.0, "static 4"),
                                     ramp(750.0, 250.0, 29_000.0, "auto")], [], [])
    lines = spread_figures([comparison, comparison])
    assert [line.split(" (median")[0] for line in lines] == [
        "static headroom cut the first surge's time to capacity by 54 %", "auto headroom kept 87 % of that gain",
        "static headroom cut the first surge's time behind demand by 83 %", "auto headroom kept 87 % of that gain",
        "auto headroom's extra GPU-node-seconds were 45 % of static headroom's"]


def test_the_spread_says_how_many_runs_never_reached_capacity() -> None:
    # Seen in the step comparison (docs/capacity.md): one run's second surge was still short of its replicas when the
    # load fell. The median is of the runs that reached capacity, and the cell says how many did not.
    def run(second: float | None) -> CapacityComparison:
        row = capacity_row("none", summary_of([1300.0, second], 20_000.0))
        return CapacityComparison([("none", RunResult(summary_of([1.0], 1.0), [], []))], [row], [], [])

    [cell] = [line for line in spread_table([run(None), run(1272.0), run(1374.0)]).splitlines()
              if line.startswith("| none")]
    assert "1300 s (1300..1300), 1323 s (1272..1374) [1 of 3 not reached]" in cell
    [cell] = [line for line in spread_table([run(1272.0), run(1374.0)]).splitlines() if line.startswith("| none")]
    assert "not reached" not in cell


def test_runs_needs_compare_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--quick", "--runs", "3"])
    assert exit_info.value.code == 2
    assert "--runs needs --compare-capacity" in capsys.readouterr().err


def test_the_cli_prints_each_seeds_comparison_then_the_spread(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import loadtest.scenarios.capacity_compare
    from loadtest.cli.demo import _compare_capacity

    async def runner(s: DemoSettings, outputs: Outputs, progress: Progress) -> RunResult:
        name = variant(s)
        return RunResult(summary_of([TIMES[name] + (s.seed or 0)], COSTS[name]), [], [])

    real = loadtest.scenarios.capacity_compare.run_capacity_series
    monkeypatch.setattr(loadtest.scenarios.capacity_compare, "run_capacity_series",
                        lambda *args, **kwargs: real(*args, **kwargs, runner=runner))
    console = Console(record=True, width=250, file=io.StringIO())
    _compare_capacity(console, settings_for_nodes(), tmp_path / "c.png", None, None, runs=2)
    text = console.export_text()
    assert text.count("comparison (--nodes karpenter") == 2 and ", seed 1)" in text and ", seed 2)" in text
    assert "2 runs (seeds 1, 2): median (lowest..highest) of each figure" in text
    assert "| none (2 runs)     | 1201.5 s (1201..1202)" in text
