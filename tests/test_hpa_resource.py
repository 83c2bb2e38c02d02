"""loadtest.hpa.resource: the controller's cpu-utilisation decision, table-tested, and fed from our adapter's
PodMetrics answer (real adapter, real Prometheus) with requests from pod specs."""

from __future__ import annotations

import pytest

from loadtest.hpa.resource import ResourceMetricError, decide, requests_by_pod, usage_by_pod
from tests.support.fake_kube import pod
from tests.test_resource_metrics_e2e import adapter, prometheus  # noqa: F401  (module fixtures: adapter, Prometheus)

CASES = [  # name, usage (milli), requests (milli), target %, current replicas -> replicas, utilization
    ("within tolerance keeps the scale", {"a": 500, "b": 550}, {"a": 1000, "b": 1000}, 50, 2, 2, 52),
    ("double the target doubles", {"a": 1000, "b": 1000}, {"a": 1000, "b": 1000}, 50, 2, 4, 100),
    ("utilisation is over summed requests", {"a": 900, "b": 100}, {"a": 1000, "b": 3000}, 50, 2, 1, 25),
    ("metrics of unknown pods are ignored", {"a": 800, "x": 5000}, {"a": 1000}, 40, 1, 2, 80),
    ("missing pod on the way up counts idle", {"a": 1000, "b": 1000}, {"a": 1000, "b": 1000, "c": 1000}, 50, 3, 4,
     100),
    ("missing pod on the way down counts at max(100, target)%", {"a": 100, "b": 100},
     {"a": 1000, "b": 1000, "c": 1000}, 50, 3, 3, 10),
    ("truncated utilisation", {"a": 333}, {"a": 1000}, 30, 1, 1, 33),
]


@pytest.mark.parametrize(("name", "usage", "requests", "target", "current", "replicas", "utilization"), CASES,
                         ids=[c[0] for c in CASES])
def test_decision_table(name, usage, requests, target, current, replicas, utilization) -> None:
    decision = decide(usage, requests, target, current)
    assert (decision.replicas, decision.utilization) == (replicas, utilization)


def test_no_matching_pods_and_missing_requests_are_errors() -> None:
    with pytest.raises(ResourceMetricError, match="no metrics returned matched known pods"):
        decide({"x": 1}, {"a": 1000}, 50, 1)
    with pytest.raises(ResourceMetricError, match="missing request for cpu in container main of pod p"):
        requests_by_pod([pod("ns", "p")], "cpu")


def test_decision_from_the_adapters_pod_metrics(adapter) -> None:  # noqa: F811
    body = adapter.get("/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods").json()
    usage = usage_by_pod(body, "cpu")
    assert usage == {"infer-0": 251, "infer-1": 1500}  # 250m + 123456n rounds up to 1m, as MilliValue does
    specs = []
    for name, containers in (("infer-0", ("main", "sidecar")), ("infer-1", ("main",))):
        spec = pod("ml", name)
        spec["spec"]["containers"] = [{"name": c, "resources": {"requests": {"cpu": "500m"}}} for c in containers]
        specs.append(spec)
    requests = requests_by_pod(specs, "cpu")
    assert requests == {"infer-0": 1000, "infer-1": 500}
    decision = decide(usage, requests, target_utilization=60, current=2)
    # 100 * 1751 / 1500 = 116 %; 116 / 60 = 1.93 -> ceil(1.93 * 2) = 4
    assert (decision.utilization, decision.replicas) == (116, 4)
