"""``--configmap-data`` parsing and the counters reloader, without a process (the e2e tests run the real one)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from exporter.exposition import render
from exporter.fields.counters import Counter, CountersError
from exporter.serving.counters_source import CountersReloader, CountersSource, parse_configmap_ref

pytestmark = pytest.mark.unit

UTIL = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
TEMP = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"


@pytest.mark.parametrize(("value", "expected"), [
    ("none", None),  # dcgm-exporter's default (pkg/cmd/app.go undefinedConfigMapData)
    ("", None),
    ("gpu-operator:exporter-metrics-config-map", ("gpu-operator", "exporter-metrics-config-map")),
])
def test_configmap_ref(value: str, expected: tuple[str, str] | None) -> None:
    assert parse_configmap_ref(value) == expected


@pytest.mark.parametrize("value", ["name-only", "a:b:c", ":name", "ns:"])
def test_malformed_configmap_ref(value: str) -> None:
    with pytest.raises(CountersError, match=r"^--configmap-data '.*': expected <namespace>:<name>$"):
        parse_configmap_ref(value)


def test_configmap_that_cannot_be_fetched_falls_back_to_the_file(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "counters.csv"
    path.write_text(TEMP)

    def forbidden(namespace: str, name: str) -> dict:
        raise PermissionError("configmaps is forbidden")

    with caplog.at_level(logging.WARNING):
        counters = CountersSource(str(path), ("gpu", "cm"), forbidden).load()
    assert [c.name for c in counters] == ["DCGM_FI_DEV_GPU_TEMP"]
    assert caplog.messages == [f"could not retrieve ConfigMap 'gpu:cm': configmaps is forbidden; falling back to "
                               f"metric file '{path}'"]
    counters = CountersSource(str(path), ("gpu", "cm"), lambda ns, n: {"data": {"metrics": UTIL}}).load()
    assert [c.name for c in counters] == ["DCGM_FI_DEV_GPU_UTIL"]


class Applied:
    def __init__(self) -> None:
        self.sets: list[list[str]] = []

    def __call__(self, counters: Sequence[Counter]) -> None:
        self.sets.append([c.name for c in counters])


def test_reloader_applies_changes_once_and_survives_a_missing_or_bad_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "counters.csv"
    path.write_text(UTIL)
    source = CountersSource(str(path))
    applied = Applied()
    reloader = CountersReloader(source, applied, source.load())
    assert not reloader.check()  # unchanged
    path.write_text(UTIL + TEMP)
    assert reloader.check() and applied.sets == [["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"]]
    assert not reloader.check()  # the same content is not applied twice

    path.unlink()
    caplog.clear()  # the reload above logged at INFO (captured when an earlier test left the root logger there)
    with caplog.at_level(logging.WARNING):
        assert not reloader.check() and not reloader.check()
    assert len(caplog.messages) == 1 and "cannot read counters file" in caplog.messages[0]

    caplog.clear()
    path.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, x\nDCGM_FI_NOT_A_FIELD, gauge, nothing\n")
    with caplog.at_level(logging.ERROR):
        assert not reloader.check() and not reloader.check()  # judged once, not logged every second
    assert len(caplog.messages) == 1
    assert f"{path}:2:" in caplog.messages[0] and "DCGM_FI_NOT_A_FIELD" in caplog.messages[0]
    assert reloader.rejected_total == 1 and len(applied.sets) == 1

    reloader.request()  # SIGHUP: reload even an unchanged file, here the same bad one: refused again
    assert not reloader.check() and reloader.rejected_total == 2
    path.write_text(TEMP)
    assert reloader.check() and applied.sets[-1] == ["DCGM_FI_DEV_GPU_TEMP"]
    # the exporter's own series: every check counted, each changed file by what became of it
    text = render(reloader.self_metrics())
    assert "gpu_exporter_counters_checks_total 9\n" in text
    assert 'gpu_exporter_counters_reloads_total{result="applied"} 2\n' in text
    assert 'gpu_exporter_counters_reloads_total{result="rejected"} 2\n' in text
