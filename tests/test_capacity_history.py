"""Headroom sized from the workload's own history (issue 48, item 3), end to end through a real Prometheus and the
adapter: kube-state-metrics-shaped series of the workload's past replicas (kube-state-metrics internal/store/pod.go
and node.go, as tests/promtool/capacity-rules.test.yaml lists them) go through the chart's recording rules to the
provisioning time the chart records for ``headroom.auto`` (``namespace_deployment:headroom_provisioning_seconds``),
and the ``capacity-headroom`` preset serves ``inference_request_rate_ahead``: the arrival rate's growth times that
time, as the HPA of ``headroom.auto`` reads it, Object on the Deployment and External by InferencePool.

Three workloads in namespace ``llm``, each rendered by the chart with ``headroom.auto``:

* ``hist``: five replicas waited for a new node (ready 400 to 800 s after creation: p90 760 s) and two took a
  placeholder's GPU on a node that was there (50 and 60 s). The time is 760 s: the replicas that did not wait for a
  node are not counted, so headroom that works leaves the measure where it was. Behind InferencePool ``hist-pool``.
* ``fresh``: only replicas that found a GPU: no history, so provisioningTime (9m, 540 s).
* ``fixed``: the same history as ``hist`` but ``provisioningTimeSource: fixed`` with 5m: 300 s.

The history group's 5-minute interval is set to Prometheus' 1 s here (the rules are the chart's otherwise), and the
preset's windows are short as in tests/test_capacity_preset.py (``capacity_yaml("10s", "1s", "5s")``). Each
workload's servers count requests as TGI does, ``t + 0.25 t^2``: the arrival rate grows by 0.5 requests/s per
second."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.presets.capacity import REQUEST_AHEAD_METRIC, REQUEST_GROWTH_METRIC, capacity_yaml
from adapter.presets.capacity_history import HEADROOM_PROVISIONING, capacity_groups
from adapter.presets.inference import recording_rules
from loadtest.hpa.spec import milli
from tests.support.adapter_process import AdapterProcess
from tests.support.k8s_validation import one
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.test_chart import render

pytestmark = [pytest.mark.e2e, pytest.mark.tools]

CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
NEW_NODE = (400, 500, 600, 700, 800)  # p90 by linear interpolation: 760
ON_PLACEHOLDERS = (50, 60)
EXPECTED = {"hist": (760, "history"), "fresh": (540, "fallback"), "fixed": (300, "fixed")}
BARE = "bare"
"""A workload with servers but no headroom: the chart records no provisioning time for it."""
START = time.monotonic()


def since() -> float:
    return time.monotonic() - START


def _pod(deployment: str, name: str, ready_after: int, node: str, gpus: int = 1) -> str:
    """One past replica as kube-state-metrics exports it: created at 10000, ready ``ready_after`` seconds later."""
    pod = f'namespace="llm",pod="{name}",uid="{name}"'
    return (f'kube_pod_created{{{pod}}} 10000\n'
            f'kube_pod_status_scheduled_time{{{pod}}} {10000 + ready_after // 2}\n'
            f'kube_pod_status_ready_time{{{pod}}} {10000 + ready_after}\n'
            f'kube_pod_info{{{pod},node="{node}",created_by_kind="ReplicaSet",created_by_name="{deployment}-rs"}} 1\n'
            f'kube_pod_owner{{{pod},owner_kind="ReplicaSet",owner_name="{deployment}-rs",owner_is_controller="true"}}'
            " 1\n"
            f'kube_pod_container_resource_requests{{{pod},container="server",node="{node}",'
            f'resource="nvidia_com_gpu",unit="integer"}} {gpus}\n')


def kube_state() -> str:
    text = 'kube_node_created{node="gpu-old"} 100\n'
    for deployment in (*EXPECTED, BARE):
        text += (f'kube_replicaset_owner{{namespace="llm",replicaset="{deployment}-rs",owner_kind="Deployment",'
                 f'owner_name="{deployment}",owner_is_controller="true"}} 1\n')
        # The server pod the growth is read from (running now, on the old node).
        text += (f'kube_pod_owner{{namespace="llm",pod="{deployment}-srv-0",uid="{deployment}-srv-0",'
                 f'owner_kind="ReplicaSet",owner_name="{deployment}-rs",owner_is_controller="true"}} 1\n')
        past = [] if deployment in ("fresh", BARE) else list(NEW_NODE)
        for i, ready in enumerate(past):
            node = f"{deployment}-new-{i}"
            text += f'kube_node_created{{node="{node}"}} 10100\n' + _pod(deployment, f"{deployment}-n{i}", ready, node)
        for i, ready in enumerate(ON_PLACEHOLDERS):
            text += _pod(deployment, f"{deployment}-p{i}", ready, "gpu-old")
    return text


def servers() -> str:
    t = since()
    count = t + 0.25 * t * t
    text = "".join(f'tgi_request_count{{namespace="llm",pod="{d}-srv-0"}} {count}\n' for d in (*EXPECTED, BARE))
    # The endpoint picker in front of hist: its pool gauge and its request counter (llm-d-router's names).
    return text + ('llm_d_epp_flow_control_pool_saturation{namespace="llm",pod="hist-epp-0",'
                   'inference_pool="hist-pool"} 0.5\n'
                   'llm_d_epp_flow_control_queue_size{namespace="llm",pod="hist-epp-0",fairness_id="default",'
                   'inference_pool="hist-pool",priority="0"} 0\n'
                   f'llm_d_epp_request_total{{namespace="llm",pod="hist-epp-0",model_name="m"}} {count}\n')


def headroom_group(workload: str, *sets: str) -> dict[str, Any]:
    """The chart's gpu-autoscaler.headroom group for ``workload`` (renamed per workload: one group per file name)."""
    rule = one(render(None, "prometheusRule.enabled=true", "headroom.namespace=llm",
                      f"headroom.workload.name={workload}", "headroom.auto.enabled=true",
                      "headroom.auto.requestsPerReplica=10", *sets), "PrometheusRule")
    [group] = [g for g in rule["spec"]["groups"] if g["name"] == "gpu-autoscaler.headroom"]
    return {**group, "name": f"headroom-{workload}"}


class Stack:
    def __init__(self, tmp: Path) -> None:
        global START
        START = time.monotonic()
        self.running = ExitStack()
        targets = [self.running.enter_context(MetricsEndpoint(render=r)).address for r in (kube_state, servers)]
        history = [{k: v for k, v in g.items() if k != "interval"} for g in capacity_groups()]
        groups = [{"name": "inference", "rules": recording_rules([])}, *history,
                  headroom_group("hist", "headroom.auto.source=gateway", "headroom.auto.inferencePool=hist-pool",
                                 "adapter.apiService.externalMetrics.enabled=true"),
                  headroom_group("fresh"),
                  headroom_group("fixed", "headroom.auto.provisioningTimeSource=fixed",
                                 "headroom.auto.provisioningTime=5m")]
        (tmp / "recording.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        self.prom = self.running.enter_context(PrometheusServer(targets, honor_labels=True,
                                                                rule_files=[tmp / "recording.yaml"]))
        (tmp / "rules.yaml").write_text(capacity_yaml("10s", "1s", "5s", count_window="10m"))
        self.adapter = self.running.enter_context(AdapterProcess(self.prom.url, str(tmp / "certs"), [
            "--config", str(tmp / "rules.yaml"), "--metrics-relist-interval", "1s"]))
        deadline = time.monotonic() + 60
        while since() < 20 or any(self.on_deployment(d, REQUEST_AHEAD_METRIC) is None for d in EXPECTED):
            assert time.monotonic() < deadline, "the preset's ahead metric never answered"
            time.sleep(0.5)

    def _value(self, path: str, **params: str) -> float | None:
        response = self.adapter.get(path, **params)
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        [item] = response.json()["items"]
        return milli(item["value"]) / 1000

    def on_deployment(self, name: str, metric: str) -> float | None:
        return self._value(f"{CUSTOM}/namespaces/llm/deployments.apps/{name}/{metric}")

    def external(self, pool: str, metric: str) -> float | None:
        return self._value(f"{EXTERNAL}/namespaces/llm/{metric}", labelSelector=f"inference_pool={pool}")

    def provisioning(self) -> dict[str, tuple[float, str]]:
        return {s["metric"]["deployment"]: (float(s["value"][1]), s["metric"]["source"])
                for s in self.prom.query(HEADROOM_PROVISIONING)}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(tmp_path_factory.mktemp("capacity-history"))
    with running.running:
        yield running


def test_the_provisioning_time_is_the_measured_p90_of_replicas_that_waited_for_a_node(stack):
    assert stack.provisioning() == EXPECTED


def _pairs(read: Callable[[str], float | None]) -> Iterator[tuple[float, float]]:
    """(growth, ahead) read back to back, a few times: each read evaluates the slope anew, and on a loaded machine
    a late scrape moves it between two reads a moment apart."""
    for _ in range(10):
        growth, ahead = read(REQUEST_GROWTH_METRIC), read(REQUEST_AHEAD_METRIC)
        assert growth is not None and ahead is not None
        yield growth, ahead
        time.sleep(0.3)


@pytest.mark.parametrize("workload", list(EXPECTED))
def test_the_ahead_metric_is_the_growth_times_that_time(stack, workload):
    seconds, _ = EXPECTED[workload]
    pairs = list(_pairs(lambda metric: stack.on_deployment(workload, metric)))
    assert any(ahead == pytest.approx(growth * seconds, rel=0.02) and growth > 0.2 for growth, ahead in pairs), pairs


def test_the_external_ahead_metric_reads_the_pools_time(stack):
    pairs = list(_pairs(lambda metric: stack.external("hist-pool", metric)))
    assert any(ahead == pytest.approx(growth * 760, rel=0.02) and growth > 0.2 for growth, ahead in pairs), pairs


def test_no_recorded_time_no_value(stack):
    """A workload the chart records no provisioning time for gets no ahead value (never a guessed one), while its
    growth is served; a pool without one likewise."""
    assert (stack.on_deployment(BARE, REQUEST_GROWTH_METRIC) or 0) > 0
    assert stack.on_deployment(BARE, REQUEST_AHEAD_METRIC) is None
    assert stack.external("other-pool", REQUEST_AHEAD_METRIC) is None
