"""Snapshots in per-GPU runs: leaving GPUs out at scrape time and carrying a hung GPU's lines."""

from __future__ import annotations

import pytest

from exporter.exposition import Family
from exporter.serving.snapshot import Snapshot
from tests.exporter_helpers import parse_metrics

pytestmark = pytest.mark.unit


def families(values: dict[int, float]) -> list[Family]:
    util = Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).")
    temp = Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).")
    for gpu, v in values.items():
        util.add((("gpu", str(gpu)), ("UUID", f"GPU-{gpu}")), v)
        temp.add((("gpu", str(gpu)), ("UUID", f"GPU-{gpu}")), 40 + gpu)
    return [util, temp]


TAIL = "# HELP gpu_exporter_up x\n# TYPE gpu_exporter_up gauge\ngpu_exporter_up{gpu=\"1\"} 1\n"


def rows(snapshot: Snapshot) -> set[tuple[str, str, float]]:
    return {(name, labels.get("gpu", ""), v) for name, labels, v in parse_metrics(snapshot.body.decode())}


def test_without_leaves_out_only_the_stale_gpus_sample_lines_and_keeps_the_tail() -> None:
    snap = Snapshot.build(families({0: 10, 1: 70}), TAIL, 1.7e9, {0: 100.0, 1: 94.0})
    assert snap.stale_gpus(now=98.0, max_age_s=5) == frozenset()
    assert snap.stale_gpus(now=100.0, max_age_s=5) == frozenset({1})
    assert snap.without(frozenset()) is snap
    fresh = snap.without(frozenset({1}))
    assert rows(fresh) == {("DCGM_FI_DEV_GPU_UTIL", "0", 10), ("DCGM_FI_DEV_GPU_TEMP", "0", 40),
                           ("gpu_exporter_up", "1", 1)}  # the exporter's own metrics are never left out
    assert fresh.read_at == {0: 100.0}
    assert snap.without(frozenset({1})) is fresh  # cached
    none_left = snap.without(frozenset({0, 1}))
    assert "DCGM_FI_DEV_GPU_UTIL" not in none_left.body.decode()  # no HELP/TYPE without samples
    assert none_left.gzipped()


def test_carry_keeps_a_hung_gpus_previous_lines_and_read_time() -> None:
    before = Snapshot.build(families({0: 10, 1: 70}), TAIL, 1.7e9, {0: 100.0, 1: 100.0})
    after = Snapshot.build(families({0: 55}), TAIL, 1.7e9 + 1, {0: 101.0}, (before, frozenset({1})))
    assert rows(after) == {("DCGM_FI_DEV_GPU_UTIL", "0", 55), ("DCGM_FI_DEV_GPU_UTIL", "1", 70),
                           ("DCGM_FI_DEV_GPU_TEMP", "0", 40), ("DCGM_FI_DEV_GPU_TEMP", "1", 41),
                           ("gpu_exporter_up", "1", 1)}
    assert after.read_at == {0: 101.0, 1: 100.0}
    assert after.body.decode().count("# TYPE DCGM_FI_DEV_GPU_UTIL") == 1
    # a family the new collection has no samples for still comes back for the carried GPU
    only_self = Snapshot.build([], TAIL, 1.7e9 + 2, {}, (before, frozenset({1})))
    assert ("DCGM_FI_DEV_GPU_UTIL", "1", 70) in rows(only_self)
