"""Built-in GPU presets: they load, discover dcgm-exporter series under both label schemes, and average."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import promql_parser
import pytest

from adapter.presets.gpu import GPU_PRESETS_YAML, gpu_presets
from adapter.rules import Catalogue, GroupResource, MetricInfo, MissingValue, build_catalogue, result_object_name
from adapter.rules.promql import quote
from adapter.rulesfile.loader import parse_rules
from tests.support.queries import custom_promql
from tests.test_rules_engine import assert_promql, matchers_of, selectors

pytestmark = pytest.mark.unit

PER_POD_IN_RULE_ORDER = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "gpu_pod_sm_utilization_ratio",
    "gpu_pod_framebuffer_used_bytes",
)
RULES = 2 * len(PER_POD_IN_RULE_ORDER) + 1
PER_POD = tuple(sorted(PER_POD_IN_RULE_ORDER))
PODS = GroupResource("", "pods")
NAMESPACES = GroupResource("", "namespaces")
SERVICES = GroupResource("", "services")

# Labels Prometheus Operator puts on every target of the exporter's ServiceMonitor.
TARGET = {
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-7xk2p",
    "container": "nvidia-dcgm-exporter",
    "service": "dcgm-exporter",
    "endpoint": "gpu-metrics",
    "job": "nvidia-dcgm-exporter",
    "instance": "10.0.3.17:9400",
}
# gpu -> (namespace, pod, container) of the workload it is allocated to, or None for an idle GPU.
ALLOCATION = {
    "0": ("default", "vision-api-6d9f8-abcde", "api"),
    "1": ("default", "vision-api-6d9f8-abcde", "api"),
    "2": ("ml", "trainer-0", "train"),
    "3": None,
}
UTIL = {"0": 50.0, "1": 100.0, "2": 30.0, "3": 0.0}


def dcgm_series(*, honor_labels: bool) -> list[dict[str, str]]:
    """What /api/v1/series holds for one node's dcgm-exporter, with the ServiceMonitor's honorLabels."""
    series = []
    for name in (*PER_POD, "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP"):
        for gpu, owner in ALLOCATION.items():
            labels = {
                "__name__": name,
                "gpu": gpu,
                "UUID": f"GPU-9a1b2c3d-000{gpu}",
                "device": f"nvidia{gpu}",
                "modelName": "NVIDIA A10G",
                "Hostname": "ip-10-0-3-17",
                "DCGM_FI_DRIVER_VERSION": "550.90.07",
                **TARGET,
            }
            if owner and honor_labels:
                labels.update(zip(("namespace", "pod", "container"), owner, strict=True))
            elif owner:
                labels.update(zip(("exported_namespace", "exported_pod", "exported_container"), owner, strict=True))
            series.append(labels)
    return series


def matching(series: Iterable[dict[str, str]], selector: str) -> list[dict[str, str]]:
    """Prometheus's series selection for ``match[]`` (an absent label reads as empty)."""
    parsed = promql_parser.parse(selector)
    assert isinstance(parsed, promql_parser.VectorSelector)
    tests = [(m.name, str(m.op).removeprefix("MatchOp."), m.value) for m in parsed.matchers.matchers]
    if parsed.name:
        tests.append(("__name__", "Equal", parsed.name))

    def ok(labels: dict[str, str], name: str, op: str, value: str) -> bool:
        actual = labels.get(name, "")
        return {
            "Equal": actual == value,
            "NotEqual": actual != value,
            "Re": re.fullmatch(value, actual) is not None,
            "NotRe": re.fullmatch(value, actual) is None,
        }[op]

    return [s for s in series if all(ok(s, *t) for t in tests)]


def catalogue_for(series: list[dict[str, str]]) -> Catalogue:
    config = gpu_presets()
    return build_catalogue(config, {q: matching(series, q) for q in config.series_queries()})


def test_presets_load_with_the_rules_loader() -> None:
    config = gpu_presets()
    assert config is gpu_presets()  # parsed once
    assert config.source == "gpu-presets" and config.external_rules == ()
    assert len(config.rules) == RULES
    assert all(r.missing_value is MissingValue.ERROR for r in config.rules)
    assert [r.where for r in config.rules] == [f"rules[{i}]" for i in range(RULES)]
    queries = config.series_queries()
    assert len(queries) == RULES
    for name in PER_POD:
        assert f'{name}{{namespace!="",pod!=""}}' in queries
        assert f'{name}{{exported_namespace!="",exported_pod!=""}}' in queries
    assert queries[-1] == 'DCGM_FI_DEV_GPU_UTIL{service!=""}'
    # The same text is a valid rules file for prometheus-adapter users too.
    assert len(parse_rules(GPU_PRESETS_YAML, "presets.yaml").rules) == RULES


def expected_metrics() -> list[MetricInfo]:
    return sorted(
        [MetricInfo(name, gr, gr == PODS) for name in PER_POD for gr in (PODS, NAMESPACES)]
        + [MetricInfo("DCGM_FI_DEV_GPU_UTIL_AVG", SERVICES, True)]
    )


def test_catalogue_with_honor_labels() -> None:
    catalogue = catalogue_for(dcgm_series(honor_labels=True))
    assert catalogue.custom_metrics() == expected_metrics()
    for name in PER_POD:
        [binding] = catalogue.lookup(name, "pods")
        assert (binding.series, binding.resource_label, binding.namespace_label) == (name, "pod", "namespace")
    query = custom_promql(
        catalogue.lookup("DCGM_FI_DEV_GPU_UTIL", "pods")[0],
        namespace="default",
        names=["vision-api-6d9f8-abcde", "vision-api-6d9f8-fghij"],
    )
    assert query == (
        'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{namespace="default",pod=~"vision-api-6d9f8-abcde|vision-api-6d9f8-fghij"})'
    )
    parsed = promql_parser.parse(query)
    assert isinstance(parsed, promql_parser.AggregateExpr) and str(parsed.op) == "avg"  # not sum
    assert parsed.modifier is not None and parsed.modifier.labels == ["pod"]


def test_catalogue_with_exported_labels_keeps_both_rules_in_order() -> None:
    config = gpu_presets()
    catalogue = catalogue_for(dcgm_series(honor_labels=False))
    assert catalogue.custom_metrics() == expected_metrics()
    for index, name in enumerate(PER_POD_IN_RULE_ORDER):
        honor, exported = catalogue.lookup(name, "pod")
        # `namespace`/`pod` still match (they name the exporter pod), and come first, as in the file.
        assert (honor.rule, exported.rule) == (config.rules[2 * index], config.rules[2 * index + 1])
        assert (honor.resource_label, honor.namespace_label) == ("pod", "namespace")
        assert (exported.resource_label, exported.namespace_label) == ("exported_pod", "exported_namespace")
    _, exported = catalogue.lookup("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "pods")
    query = custom_promql(exported, namespace="ml", names=["trainer-0"])
    assert query == (
        'avg by (exported_pod) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{exported_namespace="ml",exported_pod="trainer-0"})'
    )
    assert result_object_name(exported, {"exported_pod": "trainer-0", "pod": TARGET["pod"]}) == "trainer-0"


@pytest.mark.parametrize("honor_labels", [True, False])
def test_service_object_metric(honor_labels: bool) -> None:
    catalogue = catalogue_for(dcgm_series(honor_labels=honor_labels))
    [binding] = catalogue.lookup("DCGM_FI_DEV_GPU_UTIL_AVG", "services")
    assert binding.rule is gpu_presets().rules[-1]
    assert (binding.series, binding.resource_label, binding.namespace_label) == (
        "DCGM_FI_DEV_GPU_UTIL",
        "service",
        None,
    )
    assert catalogue.lookup("DCGM_FI_DEV_GPU_UTIL_AVG", "pods") == ()
    # The HPA asks in its own namespace; the exporter's Service is found by name wherever it runs.
    query = custom_promql(binding, namespace="default", names=["dcgm-exporter"])
    assert query == 'avg by (service) (DCGM_FI_DEV_GPU_UTIL{service="dcgm-exporter"})'
    [selected] = selectors(query)
    assert matchers_of(selected) == [("service", "=", "dcgm-exporter")]


def _series_text(labels: dict[str, str]) -> str:
    name = labels["__name__"]
    return name + "{" + ",".join(f"{k}={quote(v)}" for k, v in sorted(labels.items()) if k != "__name__") + "}"


def _util_series(honor_labels: bool) -> dict[str, float]:
    return {
        _series_text(s): UTIL[s["gpu"]]
        for s in dcgm_series(honor_labels=honor_labels)
        if s["__name__"] == "DCGM_FI_DEV_GPU_UTIL"
    }


@pytest.mark.tools
@pytest.mark.parametrize("honor_labels", [True, False])
def test_pod_value_is_the_average_of_its_gpus_in_real_prometheus(tmp_path: Path, honor_labels: bool) -> None:
    catalogue = catalogue_for(dcgm_series(honor_labels=honor_labels))
    bindings = catalogue.lookup("DCGM_FI_DEV_GPU_UTIL", "pods")
    names = ["vision-api-6d9f8-abcde", "vision-api-6d9f8-fghij"]
    binding = bindings[0] if honor_labels else bindings[1]
    query = custom_promql(binding, namespace="default", names=names)
    label = binding.resource_label
    assert label is not None
    # Two GPUs at 50 % and 100 %: 75, not 150. The pod without GPUs has no sample (no invented value).
    assert_promql(tmp_path, _util_series(honor_labels), query, [({label: "vision-api-6d9f8-abcde"}, 75.0)])
    if not honor_labels:
        # The `pod`-label rule is asked first and has nothing for workload pods; the exported rule answers.
        first = custom_promql(bindings[0], namespace="default", names=names)
        assert_promql(tmp_path, _util_series(honor_labels), first, [])


@pytest.mark.tools
@pytest.mark.parametrize("honor_labels", [True, False])
def test_service_value_is_the_average_of_all_gpus_in_real_prometheus(tmp_path: Path, honor_labels: bool) -> None:
    [binding] = catalogue_for(dcgm_series(honor_labels=honor_labels)).lookup("DCGM_FI_DEV_GPU_UTIL_AVG", "service")
    query = custom_promql(binding, namespace="default", names=["dcgm-exporter"])
    assert_promql(tmp_path, _util_series(honor_labels), query, [({"service": "dcgm-exporter"}, 45.0)])


# A time-sliced GPU as the exporter reports it: one per-pod series per container holding a share.
# (pod, container, UUID, value): pod abcde has a sidecar sharing GPU 0 and a second share on GPU 1.
SHARES = [
    ("vision-api-6d9f8-abcde", "api", "GPU-9a1b2c3d-0000", 0.25),
    ("vision-api-6d9f8-abcde", "sidecar", "GPU-9a1b2c3d-0000", 0.125),
    ("vision-api-6d9f8-abcde", "api", "GPU-9a1b2c3d-0001", 0.125),
    ("vision-api-6d9f8-fghij", "api", "GPU-9a1b2c3d-0000", 0.5),
    ("vision-api-6d9f8-klmno", "api", "GPU-9a1b2c3d-0001", 0.0),  # holds a share, idle
]
SHARED_GPU_METRICS = ("gpu_pod_sm_utilization_ratio", "gpu_pod_framebuffer_used_bytes")


def share_series(name: str, *, honor_labels: bool) -> list[tuple[dict[str, str], float]]:
    out = []
    for pod, container, uuid, share in SHARES:
        labels = {"__name__": name, "gpu": uuid[-1], "UUID": uuid, "modelName": "NVIDIA A10G", **TARGET}
        keys = ("namespace", "pod", "container") if honor_labels else (
            "exported_namespace", "exported_pod", "exported_container")
        labels.update(zip(keys, ("default", pod, container), strict=True))
        out.append((labels, share))
    return out


@pytest.mark.parametrize("honor_labels", [True, False])
def test_shared_gpu_metrics_are_discovered_for_pods(honor_labels: bool) -> None:
    catalogue = catalogue_for([labels for name in SHARED_GPU_METRICS
                               for labels, _ in share_series(name, honor_labels=honor_labels)])
    for name in SHARED_GPU_METRICS:
        assert MetricInfo(name, PODS, True) in catalogue.custom_metrics()
        assert MetricInfo(name, NAMESPACES, False) in catalogue.custom_metrics()
        resource_labels = [b.resource_label for b in catalogue.lookup(name, "pods")]
        # with honorLabels false, `pod` names the exporter pod: both rules match, the exported one answers
        assert resource_labels == (["pod"] if honor_labels else ["pod", "exported_pod"])


@pytest.mark.tools
@pytest.mark.parametrize("honor_labels", [True, False])
@pytest.mark.parametrize("name", SHARED_GPU_METRICS)
def test_shared_gpu_share_per_pod_in_real_prometheus(tmp_path: Path, honor_labels: bool, name: str) -> None:
    """A pod's containers add up on each GPU, then its GPUs average: abcde = avg(0.25 + 0.125, 0.125) = 0.25."""
    series = share_series(name, honor_labels=honor_labels)
    bindings = catalogue_for([labels for labels, _ in series]).lookup(name, "pods")
    binding = bindings[0] if honor_labels else bindings[1]
    names = ["vision-api-6d9f8-abcde", "vision-api-6d9f8-fghij", "vision-api-6d9f8-klmno", "vision-api-6d9f8-gone"]
    query = custom_promql(binding, namespace="default", names=names)
    label = binding.resource_label
    assert label is not None
    # the pod that no longer holds a share has no sample: no invented value
    assert_promql(tmp_path, {_series_text(labels): v for labels, v in series}, query,
                  [({label: "vision-api-6d9f8-abcde"}, 0.25), ({label: "vision-api-6d9f8-fghij"}, 0.5),
                   ({label: "vision-api-6d9f8-klmno"}, 0.0)])
