"""Rules hot reload: a valid change is applied without restart, an invalid one is refused and the old rules stay.

Unit tests drive ``RulesSource.poll`` directly; the end-to-end test edits a ConfigMap-style mount (a ``..data``
symlink swapped atomically, as the kubelet does) under the real adapter process and a real Prometheus.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapter.rules import RulesError
from adapter.rulesfile.source import RulesSource
from tests.support.adapter_metrics import scrape, value
from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.unit

RULE_UTIL = """\
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
"""
RULE_RENAMED = """\
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {matches: '^DCGM_FI_DEV_GPU_UTIL$', as: 'gpu_util_renamed'}
  metricsQuery: 'max by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
"""
EXTERNAL = """\
externalRules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  name: {matches: '^DCGM_FI_DEV_GPU_UTIL$', as: 'gpu_util_sum'}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'
"""
V1 = "rules:\n" + RULE_UTIL
V2 = "rules:\n" + RULE_UTIL + RULE_RENAMED + EXTERNAL
BAD = "rules:\n" + RULE_UTIL + RULE_RENAMED.replace("'^DCGM_FI_DEV_GPU_UTIL$'", "'^DCGM_(FI'")


# -- RulesSource ----------------------------------------------------------------------------------------------

def poll(source: RulesSource) -> bool:
    return asyncio.run(source.poll())


def test_a_valid_change_is_applied_and_announced(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(V1)
    source = RulesSource.load(str(path))
    seen = []
    source.on_change(seen.append)
    assert poll(source) is False  # unchanged
    stat = path.stat()
    path.write_text(V2)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime: the content is what counts
    assert poll(source) is True
    assert len(source.current.rules) == 2 and len(source.current.external_rules) == 1
    assert seen == [source.current] and source() is source.current
    assert (source.applied_total, source.rejected_total) == (1, 0)


def test_an_invalid_change_is_refused_once_and_the_rules_in_force_stay(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(V1)
    source = RulesSource.load(str(path))
    before = source.current
    path.write_text(BAD)
    with caplog.at_level(logging.INFO, logger="adapter.rules"):
        for _ in range(3):
            assert poll(source) is False
    assert source.current is before
    assert source.rejected_total == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert f"{path}: rules[1].name.matches: invalid regex" in errors[0]
    assert source.last_error is not None and "rules[1].name.matches" in source.last_error


def test_a_missing_file_keeps_the_rules_and_reverting_a_bad_edit_reapplies_nothing(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(V1)
    source = RulesSource.load(str(path))
    before = source.current
    path.unlink()
    assert poll(source) is False and poll(source) is False
    assert source.current is before and source.rejected_total == 1
    assert "cannot read the rules file" in (source.last_error or "")
    path.write_text(V1)  # back to the rules in force
    assert poll(source) is False
    assert source.current is before and source.applied_total == 0 and source.last_error is None


def test_the_first_load_of_a_bad_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(BAD)
    with pytest.raises(RulesError, match=r"rules\[1\]\.name\.matches"):
        RulesSource.load(str(path))


def test_presets_have_nothing_to_watch() -> None:
    source = RulesSource.load(None)
    assert not source.watching
    assert poll(source) is False
    assert source.current.rules  # the built-in GPU presets


# -- the real adapter -----------------------------------------------------------------------------------------

class ConfigMapMount:
    """The kubelet's layout: ``rules.yaml -> ..data/rules.yaml``, ``..data -> ..<version>``, swapped by rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0
        self.path = root / "rules.yaml"

    def write(self, text: str) -> None:
        self.version += 1
        target = self.root / f"..v{self.version}"
        target.mkdir()
        (target / "rules.yaml").write_text(text)
        tmp_link = self.root / "..data_tmp"
        tmp_link.symlink_to(target.name)
        os.replace(tmp_link, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to("..data/rules.yaml")


@pytest.fixture(scope="module")
def prom() -> Iterator[PrometheusServer]:
    endpoint = MetricsEndpoint('DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="ml",pod="infer-0"} 40\n'
                               'DCGM_FI_DEV_GPU_UTIL{gpu="1",namespace="ml",pod="infer-0"} 80\n')
    server = PrometheusServer([endpoint.address], honor_labels=True).start()
    try:
        server.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="infer-0"}', lambda r: len(r) == 2, timeout=30)
        yield server
    finally:
        server.stop()
        endpoint.stop()


CUSTOM = "/apis/custom.metrics.k8s.io/v1beta1"


def discovered(adapter: AdapterProcess) -> set[str]:
    return {r["name"] for r in adapter.get(CUSTOM).json()["resources"]}


def groups(adapter: AdapterProcess) -> set[str]:
    return {g["name"] for g in adapter.get("/apis").json()["groups"]}


@pytest.mark.e2e
def test_rules_reload_without_restart(prom: PrometheusServer, tmp_path: Path) -> None:
    mount = ConfigMapMount(tmp_path)
    mount.write(V1)
    # relisting every 10 minutes: a new metric showing up sooner proves the reload relisted at once
    adapter = AdapterProcess(prom.url, str(tmp_path / "certs"), [
        "--config", str(mount.path), "--config-reload-interval", "200ms", "--metrics-relist-interval", "10m"])
    try:
        assert discovered(adapter) == {"pods/DCGM_FI_DEV_GPU_UTIL", "namespaces/DCGM_FI_DEV_GPU_UTIL"}
        assert groups(adapter) == {"custom.metrics.k8s.io"}

        mount.write(V2)
        wait_until(lambda: "pods/gpu_util_renamed" in discovered(adapter), what="the new metric in discovery")
        response = adapter.get(f"{CUSTOM}/namespaces/ml/pods/infer-0/gpu_util_renamed")
        assert response.status_code == 200 and response.json()["items"][0]["value"] == "80"
        assert groups(adapter) == {"custom.metrics.k8s.io", "external.metrics.k8s.io"}  # externalRules now
        response = adapter.get("/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/gpu_util_sum")
        assert response.status_code == 200 and response.json()["items"][0]["value"] == "120"

        mount.write(BAD)
        wait_until(lambda: value(scrape(adapter), "gpu_adapter_rules_reloads_total", result="rejected") == 1,
                   what="the bad edit refused")
        response = adapter.get(f"{CUSTOM}/namespaces/ml/pods/infer-0/gpu_util_renamed")  # old rules still served
        assert response.status_code == 200 and response.json()["items"][0]["value"] == "80"
        assert "pods/gpu_util_renamed" in discovered(adapter)

        mount.write(V1)  # a later valid edit still applies: reloading goes on after a refusal
        wait_until(lambda: "pods/gpu_util_renamed" not in discovered(adapter), what="the metric gone again")
        samples = scrape(adapter)
        assert value(samples, "gpu_adapter_rules_reloads_total", result="applied") == 2
        assert value(samples, "gpu_adapter_rules", section="rules") == 1
        assert groups(adapter) == {"custom.metrics.k8s.io"}
    finally:
        log = adapter.stop()
    refused = [line for line in log.splitlines() if "rules reload refused" in line]
    assert len(refused) == 1, log
    assert f"{mount.path}: rules[1].name.matches: invalid regex" in refused[0]
    assert "ERROR" in refused[0]


@pytest.mark.e2e
def test_reloading_can_be_turned_off(prom: PrometheusServer, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(V1)
    adapter = AdapterProcess(prom.url, str(tmp_path / "certs"), [
        "--config", str(path), "--config-reload-interval", "0", "--metrics-relist-interval", "1s",
        "--metrics-max-age", "1m"])
    try:
        path.write_text(V2)
        # several relists later the new rules are still not in force
        first = value(scrape(adapter), "gpu_adapter_discovery_last_success_timestamp_seconds")
        wait_until(lambda: (value(scrape(adapter), "gpu_adapter_discovery_last_success_timestamp_seconds") or 0)
                   >= (first or 0) + 2, what="two more relists")
        assert discovered(adapter) == {"pods/DCGM_FI_DEV_GPU_UTIL", "namespaces/DCGM_FI_DEV_GPU_UTIL"}
        assert value(scrape(adapter), "gpu_adapter_rules_reloads_total", result="applied") == 0
    finally:
        adapter.stop()
