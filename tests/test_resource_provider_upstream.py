"""prometheus-adapter's pkg/resourceprovider/provider_test.go cases as data, answered by our adapter from a real
Prometheus (facts carried over: objects, containers, values; each case gets its own namespace/node prefix so all
cases share one scrape). Upstream's sample timestamps cannot be replayed through a scrape; the earliest-timestamp
rule is checked in test_resource_metrics_e2e (test_timestamps_are_the_earliest_sample_of_the_object).

Deliberate deviation, per the project's honest-value policy: upstream reports NaN and negative samples as 0
("should return metrics of value zero when ... NaN or negative values"); we leave such a container, pod or node
out, as metrics-server leaves out what it has no usable value for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.resource_rules import resource_rules_yaml

pytestmark = pytest.mark.e2e

UPSTREAM = "prometheus-adapter pkg/resourceprovider/provider_test.go"
NAN = float("nan")


@dataclass(frozen=True)
class PodCase:
    name: str  # upstream's It(...) text
    prefix: str
    cpu: tuple[tuple[str, str, str, float], ...]  # namespace, pod, container, value
    memory: tuple[tuple[str, str, str, float], ...]
    asked: tuple[tuple[str, str], ...]  # (namespace, pod) requested
    expected: dict[tuple[str, str], dict[str, tuple[str, str]]]  # pod -> container -> (cpu, memory)


@dataclass(frozen=True)
class NodeCase:
    name: str
    prefix: str
    cpu: tuple[tuple[str, float], ...]
    memory: tuple[tuple[str, float], ...]
    asked: tuple[str, ...]
    expected: dict[str, tuple[str, str]]


POD_CASES = (
    PodCase("should be able to list metrics pods across different namespaces", "p1",
            cpu=(("some-ns", "pod1", "cont1", 1100.0), ("some-ns", "pod1", "cont2", 1110.0),
                 ("some-ns", "pod3", "cont1", 1300.0), ("some-ns", "pod3", "cont2", 1310.0),
                 ("other-ns", "pod27", "cont1", 2200.0)),
            memory=(("some-ns", "pod1", "cont1", 3100.0), ("some-ns", "pod1", "cont2", 3110.0),
                    ("some-ns", "pod3", "cont1", 3300.0), ("some-ns", "pod3", "cont2", 3310.0),
                    ("other-ns", "pod27", "cont1", 4200.0)),
            asked=(("some-ns", "pod1"), ("some-ns", "pod3"), ("other-ns", "pod27")),
            expected={("some-ns", "pod1"): {"cont1": ("1100", "3100"), "cont2": ("1110", "3110")},
                      ("some-ns", "pod3"): {"cont1": ("1300", "3300"), "cont2": ("1310", "3310")},
                      ("other-ns", "pod27"): {"cont1": ("2200", "4200")}}),
    PodCase("should return nil metrics for missing pods, but still return partial results", "p2",
            cpu=(("some-ns", "pod1", "cont1", 1100.0), ("some-ns", "pod1", "cont2", 1110.0)),
            memory=(("some-ns", "pod1", "cont1", 3100.0), ("some-ns", "pod1", "cont2", 3110.0)),
            asked=(("some-ns", "pod1"), ("some-ns", "pod-nonexistant")),
            expected={("some-ns", "pod1"): {"cont1": ("1100", "3100"), "cont2": ("1110", "3110")}}),
    PodCase("should return metrics of value zero when pod metrics have NaN or negative values (ours: left out)",
            "p3",
            cpu=(("some-ns", "pod1", "cont1", -1100.0), ("some-ns", "pod1", "cont2", NAN),
                 ("some-ns", "pod3", "cont1", -1300.0), ("some-ns", "pod3", "cont2", 1310.0)),
            memory=(("some-ns", "pod1", "cont1", 3100.0), ("some-ns", "pod1", "cont2", -3110.0),
                    ("some-ns", "pod3", "cont1", NAN), ("some-ns", "pod3", "cont2", -3310.0)),
            asked=(("some-ns", "pod1"), ("some-ns", "pod3")),
            expected={}),
)

NODE_CASES = (
    NodeCase("should be able to list metrics for nodes", "n1",
             cpu=(("node1", 1100.0), ("node2", 1200.0)), memory=(("node1", 2100.0), ("node2", 2200.0)),
             asked=("node1", "node2"), expected={"node1": ("1100", "2100"), "node2": ("1200", "2200")}),
    NodeCase("should return nil metrics for missing nodes, but still return partial results", "n2",
             cpu=(("node1", 1100.0), ("node2", 1200.0)), memory=(("node1", 2100.0), ("node2", 2200.0)),
             asked=("node1", "node2", "node3"), expected={"node1": ("1100", "2100"), "node2": ("1200", "2200")}),
    NodeCase("should return metrics of value zero when node metrics have NaN or negative values (ours: left out)",
             "n3", cpu=(("node1", -1100.0), ("node2", 1200.0)), memory=(("node1", 2100.0), ("node2", NAN)),
             asked=("node1", "node2"), expected={}),
)

# upstream's test config: cAdvisor-style series, namespace/pod/node labels, containerLabel "container"
RULES = resource_rules_yaml(
    window="1m", container_filter=False,
    cpu=("container_cpu_usage_seconds_total", "container_cpu_usage_seconds_total_node"),
    memory=("container_memory_working_set_bytes", "container_memory_working_set_bytes_node"))


def _value(v: float) -> str:
    return "NaN" if v != v else repr(v)


def exposition() -> str:
    lines = []
    for case in POD_CASES:
        for series, samples in (("container_cpu_usage_seconds_total", case.cpu),
                                ("container_memory_working_set_bytes", case.memory)):
            lines += [f'{series}{{namespace="{case.prefix}-{ns}",pod="{pod}",container="{c}"}} {_value(v)}'
                      for ns, pod, c, v in samples]
    for node_case in NODE_CASES:
        for series, node_samples in (("container_cpu_usage_seconds_total_node", node_case.cpu),
                                     ("container_memory_working_set_bytes_node", node_case.memory)):
            lines += [f'{series}{{node="{node_case.prefix}-{n}"}} {_value(v)}' for n, v in node_samples]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdapterProcess]:
    tmp: Path = tmp_path_factory.mktemp("upstream-resource")
    endpoint = MetricsEndpoint(exposition())
    prom = PrometheusServer([(endpoint.address, {})], job="cadvisor", honor_labels=True).start()
    (tmp / "rules.yaml").write_text(RULES)
    process = None
    try:
        prom.wait_for('container_memory_working_set_bytes_node{node="n3-node2"}', timeout=30)
        process = AdapterProcess(prom.url, str(tmp / "certs"), ["--config", str(tmp / "rules.yaml")])
        yield process
    finally:
        if process is not None:
            process.stop()
        prom.stop()
        endpoint.stop()


@pytest.mark.parametrize("case", POD_CASES, ids=lambda c: f"{UPSTREAM}: {c.name}")
def test_pod_metrics(adapter: AdapterProcess, case: PodCase) -> None:
    found: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
    for ns, pod in case.asked:
        response = adapter.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{case.prefix}-{ns}/pods/{pod}")
        if response.status_code == 404:
            assert response.json()["reason"] == "NotFound"
            continue
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["window"] == "1m0s"
        found[(ns, pod)] = {c["name"]: (c["usage"]["cpu"], c["usage"]["memory"]) for c in body["containers"]}
    assert found == case.expected


@pytest.mark.parametrize("case", NODE_CASES, ids=lambda c: f"{UPSTREAM}: {c.name}")
def test_node_metrics(adapter: AdapterProcess, case: NodeCase) -> None:
    body = adapter.get("/apis/metrics.k8s.io/v1beta1/nodes").json()
    found = {i["metadata"]["name"].removeprefix(f"{case.prefix}-"): (i["usage"]["cpu"], i["usage"]["memory"])
             for i in body["items"] if i["metadata"]["name"].startswith(f"{case.prefix}-")
             and i["metadata"]["name"].removeprefix(f"{case.prefix}-") in case.asked}
    assert found == case.expected
    assert all(i["window"] == "1m0s" for i in body["items"])
