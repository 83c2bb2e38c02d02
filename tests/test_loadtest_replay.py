"""``gpu-loadtest demo --from-report``: a capacity report (or a demo's own summary) translated into the demo's node,
image and model delays and its surges (pure, :mod:`loadtest.scenarios.replay`), unknown phases kept at the
defaults and said, and one-line errors for a file that is not a report."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from loadtest.cli.main import main
from loadtest.nodes import NodeTimings
from loadtest.scenarios.replay import HOLD_FACTOR, ReplayError, ReplaySurge, read_report, replay_of

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "capacity-report.json"
DEFAULTS = NodeTimings()


def example() -> dict[str, Any]:
    return json.loads(EXAMPLE.read_text())


def test_the_example_report_gives_its_medians_split_as_it_records_them() -> None:
    # Three replicas waited for a new node: 142.0, 154.0 and 142.2 s for a GPU, less Karpenter's own 1.6, 1.6, 1.1 s
    # (the model has its batch window): 140.4, 152.4, 141.1 -> 141.1; launch + registration 54.8, 58.6, 52.1 ->
    # 54.8; node Ready 19.5, 21.0, 20.4 -> 20.4; the GPUs the rest. The image's pull on a new node is known for
    # two (the third's Pulled event expired): 21.3 and 19.8; the model for all four: 236.0, 241.5, 229.8, 233.1.
    replay = replay_of(example(), "report.json")
    assert replay.timings == NodeTimings(launch_s=54.8, ready_s=20.4, gpu_s=65.9, image_pull_s=20.6,
                                         model_load_s=234.6)
    assert replay.notes == (
        "node: 141.1 s, the median wait for a GPU of 3 replicas that waited for a new node, the autoscaler's own "
        "reaction left to the model; launch 54.8 s, Ready 20.4 s, GPUs 65.9 s as the file has them",
        "image: 20.6 s, the median of 2 replicas on a new node",
        "model: 234.6 s, the median of 4 replicas")
    assert replay.surges == (ReplaySurge(1200.0, 1, 3, 384.0), ReplaySurge(6615.0, 2, 4, 373.0))


def test_the_surges_are_steps_between_the_rates_their_replicas_serve() -> None:
    replay = replay_of(example(), "report.json")
    profile, lines = replay.profile(15.0)
    hold = replay.hold_s(replay.surges[0])
    # 3.74 provisioning times (node 141.1 + image 20.6 + model 234.6 = 396.3 s) in whole minutes: 25 minutes
    assert hold == 1500.0 and HOLD_FACTOR * replay.provisioning_s == pytest.approx(1480.9, abs=0.1)
    # n replicas at 15 requests/s each: n - 1/3 of them, so 1 -> 10, 2 -> 25, 3 -> 40, 4 -> 55
    assert profile.text() == "300s:10,1500s:40,120s:40..25,900s:25,1500s:55,120s:55..25,900s:25"
    assert lines == ["surge 1: 1 -> 3 replicas, 10 -> 40 requests/s, held 25 min, then 15 min at 25 (the file's 90 "
                     "min to the next scale-up cut)",
                     "surge 2: 2 -> 4 replicas, 25 -> 55 requests/s, held 25 min, then 15 min at 25"]


def demo_summary(surges: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodes": "karpenter", "capacity": {"time_scale": 20.0, "surges": surges}}


def demo_surge(start: float, before: int, needed: int, replicas: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"surge": 1, "load_step_s": start, "first_decision_s": start + 30.0, "time_to_capacity_s": 1300.0,
            "replicas_before": before, "replicas_asked": needed + 1, "replicas_needed": needed,
            "phases_s": {}, "replicas": replicas, **extra}


def replica(node: float | None, image: float | None, model: float | None, new_node: bool | None = True) -> dict:
    return {"pod": "infer-1", "node": "g5.xlarge-1", "new_node": new_node,
            "phases_s": {"node": node, "image": image, "model": model}}


TRANSLATIONS = [
    # (case, surges in a demo's summary, timings, notes that must appear)
    ("a demo's summary: no sub-phases, so the node splits as the defaults do; the needed replicas, not the asked",
     [demo_surge(300.0, 1, 4, [replica(362.0, 334.0, 48.0), replica(180.0, 0.0, 48.0, new_node=False)])],
     NodeTimings(launch_s=90.5, ready_s=40.2, gpu_s=231.3, image_pull_s=334.0, model_load_s=48.0),
     ["split as the defaults split theirs: launch 90.5 s, Ready 40.2 s, GPUs 231.3 s"]),
    ("a phase no replica has keeps the default, and says so", [demo_surge(300.0, 1, 3, [replica(200.0, None, None)])],
     NodeTimings(launch_s=50.0, ready_s=22.2, gpu_s=127.8, image_pull_s=334.0, model_load_s=48.0),
     ["image: unknown in the file: the default, 334 s", "model: unknown in the file: the default, 48 s"]),
    ("no replica waited for a new node: the node phase is the default",
     [demo_surge(300.0, 1, 2, [replica(0.5, 0.0, 50.0, new_node=False)])],
     NodeTimings(model_load_s=50.0), ["node: unknown in the file (no replica that waited for a new node has its "
                                      "wait): the default, 180 s"]),
]


@pytest.mark.parametrize(("case", "surges", "timings", "notes"), TRANSLATIONS, ids=[t[0] for t in TRANSLATIONS])
def test_a_summary_translates_into_delays(case: str, surges: list[dict[str, Any]], timings: NodeTimings,
                                          notes: list[str]) -> None:
    replay = replay_of(demo_summary(surges), "summary.json")
    assert replay.timings == timings
    assert all(any(n in line for line in replay.notes) for n in notes), replay.notes


SURGES = [
    # (case, (load step, replicas before, replicas needed or asked) per scale-up, surges replayed, words said)
    ("scale-ups that asked for nothing more are left out", [(300.0, 4, 4), (4000.0, 1, 3)], [(4000.0, 1, 3)],
     "scale-up 1 left out: it asked for 4 replicas with 4 serving"),
    ("a scale-up from zero starts from one replica", [(300.0, 0, 2)], [(300.0, 1, 2)],
     "scale-up 1: from 0 replicas: replayed from 1"),
    ("scale-ups close together get the shortest lull", [(0.0, 1, 3), (600.0, 1, 3)], [(0.0, 1, 3), (600.0, 1, 3)],
     "min to the next scale-up stretched"),
]


@pytest.mark.parametrize(("case", "recorded", "replayed", "said"), SURGES, ids=[s[0] for s in SURGES])
def test_scale_ups_become_surges(case: str, recorded: list[tuple[float, int, int]],
                                 replayed: list[tuple[float, int, int]], said: str) -> None:
    surges = [demo_surge(t, before, needed, [replica(180.0, 334.0, 48.0)]) for t, before, needed in recorded]
    replay = replay_of(demo_summary(surges), "summary.json")
    assert [(s.start, s.before, s.target) for s in replay.surges] == replayed
    _, lines = replay.profile(15.0)
    assert any(said in line for line in (*replay.notes, *lines)), (replay.notes, lines)


def test_a_compare_capacity_summary_replays_its_run_without_headroom() -> None:
    none = demo_summary([demo_surge(300.0, 1, 4, [replica(300.0, 100.0, 60.0)])])
    static = demo_summary([demo_surge(300.0, 1, 4, [replica(0.5, 0.0, 60.0, new_node=False)])])
    replay = replay_of({"table": [], "runs": {"none": none, "static": static}}, "compare.json")
    assert (replay.timings.node_s, replay.timings.image_pull_s) == (300.0, 100.0)
    series = {"runs": 2, "comparisons": [{"runs": {"none": none}}]}
    assert replay_of(series, "series.json").timings == replay.timings


@pytest.mark.parametrize(("content", "error"), [
    (None, "--from-report {path}: No such file or directory"),
    ("{not json", "--from-report {path}: not JSON"),
    ("[1, 2]", "--from-report {path}: expected a JSON object (a capacity report or a demo's --summary)"),
    ('{"capacity": {"time_scale": 1}}', "--from-report {path}: not a capacity report or a demo's --summary with GPU "
                                        "nodes (no capacity.surges in it)"),
    ('{"capacity": {"surges": [{"replicas_before": 2, "replicas_asked": 2}]}}',
     "--from-report {path}: no scale-up to replay (1 in it; scale-up 1 left out: it asked for 2 replicas with 2 "
     "serving)"),
])
def test_a_file_that_is_not_a_report_is_a_one_line_error(tmp_path: Path, content: str | None, error: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ReplayError) as info:
        replay_of(read_report(path), str(path))
    assert str(info.value).startswith(error.format(path=path)) and "\n" not in str(info.value)
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--quick", "--from-report", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-loadtest: error: --from-report") and len(err.splitlines()) == 1, err


def test_the_cli_runs_the_replay_and_says_what_it_took(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import loadtest.cli.demo

    ran: list[Any] = []
    monkeypatch.setattr(loadtest.cli.demo, "_run_one", lambda settings, *args: ran.append(settings))
    main(["demo", "--from-report", str(EXAMPLE), "--node-timing", "model_load=2m"])
    [settings] = ran
    assert settings.capacity.timings == NodeTimings(launch_s=54.8, ready_s=20.4, gpu_s=65.9, image_pull_s=20.6,
                                                    model_load_s=120.0)  # --node-timing wins over the file
    assert settings.real_profile.text() == "300s:10,1500s:40,120s:40..25,900s:25,1500s:55,120s:55..25,900s:25"
    assert settings.cold_start_s == pytest.approx(120.0 / 20)
    assert settings.describe()["replay"][0] == f"replaying {EXAMPLE}:"
    out = capsys.readouterr().out
    assert f"replaying {EXAMPLE}:\n  node: 141.1 s" in out and "surge 2: 2 -> 4 replicas" in out


def test_more_replicas_than_max_replicas_raise_it_unless_asked(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    import loadtest.cli.demo

    big = copy.deepcopy(example())
    big["capacity"]["surges"][1]["replicas_asked"] = 10
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    ran: list[Any] = []
    monkeypatch.setattr(loadtest.cli.demo, "_run_one", lambda settings, *args: ran.append(settings))
    main(["demo", "--from-report", str(path)])
    main(["demo", "--from-report", str(path), "--max-replicas", "6"])
    assert [s.max_replicas for s in ran] == [10, 6]
    assert "  maxReplicas 10, the most a scale-up asked for" in ran[0].replay


def test_a_replay_of_a_recording_with_the_defaults_gives_the_defaults_back() -> None:
    # A demo run's own per-replica detail (NodeLayer.replicas) read back: a replica that waited 181 s for its
    # node (1 s of Karpenter's batch window, then 180 s), pulled 334 s and loaded 48 s gives the defaults, but for
    # the batch window, which a demo's summary cannot tell from the node.
    from loadtest.clock import DemoClock
    from loadtest.nodes import Karpenter, PodTemplate
    from loadtest.nodes.layer import NodeLayer, NodeLayerConfig, NodesKind
    from tests.test_loadtest_nodes import G1, pool

    layer = NodeLayer(NodeLayerConfig(NodesKind.KARPENTER, DemoClock(1.0), pool=pool(G1)), "infer")
    layer.load_started = 0.0
    karpenter = Karpenter(pool(G1))
    layer.cluster.create_pod("infer-1", "infer", PodTemplate(image="inference", ready_after_s=48.0), 10.0)
    for t in range(10, 700):
        layer.cluster.step(float(t))
        karpenter.tick(layer.cluster, float(t))
    [detail] = layer.replicas(0.0, 100.0)
    assert detail["new_node"] is True and detail["image_cached"] is False
    assert detail["phases_s"] == {"node": 181.0, "image": 334.0, "model": 48.0}
    replay = replay_of(demo_summary([demo_surge(0.0, 1, 2, [detail])]), "summary.json")
    assert replay.timings == NodeTimings(launch_s=45.2, ready_s=20.1, gpu_s=115.7)
