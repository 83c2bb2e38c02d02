"""Resource names from the Kubernetes API's discovery, as prometheus-adapter's REST mapper resolves them: kinds,
singulars, short names and CRDs; refreshed while the adapter runs, so a CRD installed later resolves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from adapter.kube.api import KubeApi
from adapter.kube.config import load_api_client
from adapter.kube.restmapper import discover
from adapter.rules.resources import GroupResource, ResourceTable, normalise_resource
from adapter.rulesfile.loader import parse_rules
from tests.support.adapter_process import AdapterProcess
from tests.support.fake_kube import FakeKube
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def discovered(fake_kube: FakeKube, tmp_path: Path) -> Iterator[ResourceTable]:
    """The resource table read from the discovery of the fake API with a CRD (cheese.io/v1 Brand, short name br)
    and a cluster-scoped one."""
    fake_kube.register("cheese.io", "v1", "brands", "Brand", short_names=("br",))
    fake_kube.register("cheese.io", "v1", "dairies", "Dairy", namespaced=False, singular="dairy")
    api = KubeApi(load_api_client(fake_kube.write_kubeconfig(tmp_path / "kubeconfig")))  # type: ignore[arg-type]
    yield discover(api)


@pytest.mark.parametrize(("name", "group", "expected"), [
    ("brand", "cheese.io", GroupResource("cheese.io", "brands")),  # the issue's {group: cheese.io, resource: brand}
    ("brands", "cheese.io", GroupResource("cheese.io", "brands")),
    ("Brand", "cheese.io", GroupResource("cheese.io", "brands")),
    ("br", None, GroupResource("cheese.io", "brands")),
    ("brand.cheese.io", None, GroupResource("cheese.io", "brands")),
    ("dairy", None, GroupResource("cheese.io", "dairies")),  # singularName from discovery
    ("pod", None, GroupResource("", "pods")),  # singularName empty: the lowercased kind
    ("po", None, GroupResource("", "pods")),
    ("deployment", None, GroupResource("apps", "deployments")),
    ("deploy", "apps", GroupResource("apps", "deployments")),
    ("Service", None, GroupResource("", "services")),
])
def test_names_resolve_through_discovery(discovered: ResourceTable, name: str, group: str | None,
                                         expected: GroupResource) -> None:
    assert discovered.normalise(name, group) == expected


def test_kind_version_and_scope_come_from_discovery(discovered: ResourceTable) -> None:
    brands, dairies = GroupResource("cheese.io", "brands"), GroupResource("cheese.io", "dairies")
    assert (discovered.kind(brands), discovered.api_version(brands), discovered.is_namespaced(brands)) == (
        "Brand", "cheese.io/v1", True)
    assert (discovered.kind(dairies), discovered.is_namespaced(dairies)) == ("Dairy", False)


def test_rules_parsed_with_a_table_resolve_with_it_and_the_presets_too(discovered: ResourceTable) -> None:
    """A rules file carries the table it was parsed with: its overrides, its catalogue's lookups and the included
    presets all resolve with it; parsed without one, the built-in table answers."""
    text = "include: [gpu-presets]\n" + RULES
    with_api, without = parse_rules(text, "rules.yaml", discovered), parse_rules(text, "rules.yaml")
    assert with_api.table is discovered and without.table is not discovered
    assert with_api.rules[0].resources.overrides[1] == ("brand", GroupResource("cheese.io", "brands"))
    assert without.rules[0].resources.overrides[1] == ("brand", GroupResource("cheese.io", "brand"))  # as written
    assert {r.resources.table for r in with_api.rules} == {discovered}


def test_without_discovery_the_builtin_table_answers() -> None:
    assert normalise_resource("deploy") == GroupResource("apps", "deployments")
    assert normalise_resource("brand", "cheese.io") == GroupResource("cheese.io", "brand")  # as written


RULES = """\
rules:
- seriesQuery: 'cheese_sales{namespace!="",brand!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      brand: {group: cheese.io, resource: brand}
  metricsQuery: 'sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
"""


def test_a_crd_installed_while_the_adapter_runs_is_served_without_a_restart(fake_kube: FakeKube,
                                                                             tmp_path: Path) -> None:
    endpoint = MetricsEndpoint('cheese_sales{namespace="default",brand="gouda"} 5\n')
    prom = PrometheusServer([endpoint.address], honor_labels=True).start()
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    adapter = None
    try:
        prom.wait_for("cheese_sales", timeout=30)
        adapter = AdapterProcess(prom.url, str(tmp_path / "certs"), [
            "--config", str(rules), "--kubeconfig", fake_kube.write_kubeconfig(tmp_path / "kubeconfig"),
            "--discovery-interval", "1s", "--metrics-relist-interval", "1s", "--metrics-max-age", "1m"])
        listing = "/apis/custom.metrics.k8s.io/v1beta2"
        assert "brand.cheese.io/cheese_sales" in _names(adapter, listing)  # not in discovery yet: as written
        fake_kube.register("cheese.io", "v1", "brands", "Brand")
        wait_until(lambda: "brands.cheese.io/cheese_sales" in _names(adapter, listing), 15,
                   "the CRD's resource in discovery")
        body = adapter.get(f"{listing}/namespaces/default/brands.cheese.io/gouda/cheese_sales").json()
        [item] = body["items"]
        assert item["describedObject"] == {"kind": "Brand", "namespace": "default", "name": "gouda",
                                           "apiVersion": "cheese.io/v1"}
        assert item["value"] == "5"
    finally:
        if adapter is not None:
            adapter.stop()
        prom.stop()
        endpoint.stop()


def _names(adapter: AdapterProcess, path: str) -> set[str]:
    return {r["name"] for r in adapter.get(path).json()["resources"]}
