"""The ``capacity-headroom`` preset (``include: [capacity-headroom]``): ``inference_queue_growth_rate``, how fast what
waits grows (requests/s), from a real Prometheus fed queues that grow, stay flat and fall: External, selected by
``inference_pool`` (the endpoint picker's flow-control queue, both metric-name generations), and Object on
Deployments (the inference servers' waiting requests, joined to the Deployment through kube-state-metrics' owner
series and the pod -> Deployment recording rule). Read through the adapter's HTTP API, ``kubectl get --raw`` (through
the fake API's aggregation), ``gpu-adapter explain`` and the KEDA external scaler.

The queries here take the slope over 10 s at 1 s steps (``capacity_yaml("10s", "1s")``) instead of the preset's
2 minutes at 15 s, so that a test sees a steady slope within seconds; the query is the same otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from adapter.rules import parse_rules
from adapter.rules.capacity import (
    CAPACITY_PRESET,
    GROWTH_METRIC,
    SERVER_QUEUES,
    STEP,
    WINDOW,
    capacity_preset,
    capacity_yaml,
)
from adapter.rules.inference import INFERENCE_PRESETS, recording_rules
from loadtest.hpa.spec import milli
from loadtest.kube_state import OwnerSeries
from tests.support.adapter_process import AdapterProcess
from tests.support.fake_kube import FakeKube
from tests.support.keda import KedaClient
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port
from tests.support.tools import require_tool

pytestmark = [pytest.mark.e2e, pytest.mark.tools]

CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
START = time.monotonic()


def since() -> float:
    return time.monotonic() - START


# ------------------------------------------------------------------------------------------------- pure checks

def test_the_preset_loads_as_a_plain_rules_file_and_by_include() -> None:
    config = capacity_preset()
    assert config is capacity_preset() and config.source == CAPACITY_PRESET
    assert [r.name.as_ for r in config.rules] == [r.name.as_ for r in config.external_rules] == [GROWTH_METRIC]
    included = parse_rules(f"include: [{CAPACITY_PRESET}]\n", "rules.yaml")
    assert len(included.rules) == 1 and len(included.external_rules) == 1
    assert f"[{WINDOW}:{STEP}]" in config.rules[0].metrics_query.source
    assert "clamp_min(deriv(" in config.external_rules[0].metrics_query.source  # never negative


def test_the_server_queues_are_the_inference_presets_waiting_gauges() -> None:
    gauges = {name for preset in INFERENCE_PRESETS.values() for metric in preset.metrics
              for name in getattr(metric, "names", ())}
    assert set(SERVER_QUEUES) <= gauges


def test_the_chart_copy_is_the_preset() -> None:
    chart = Path(__file__).parent.parent / "charts" / "gpu-autoscaler" / "files" / "capacity-presets.yaml"
    assert yaml.safe_load(chart.read_text()) == yaml.safe_load(capacity_yaml())


# ------------------------------------------------------------------------------------- a real Prometheus, fed

def servers() -> str:
    """The servers' waiting requests: growing, flat and falling, under several servers' names."""
    t = since()
    rows = [
        ('vllm:num_requests_waiting{model_name="m",engine="0"}', "grow-0", 2 * t),   # +2/s
        ('vllm:num_requests_waiting{model_name="m",engine="0"}', "grow-1", 3),        # flat: the Deployment +2/s
        ('vllm:num_requests_waiting{model_name="m",engine="0"}', "flat-0", 4),
        ('vllm:num_requests_waiting{model_name="m",engine="0"}', "fall-0", max(0.0, 500 - 3 * t)),
        ("tgi_queue_size", "tgi-0", t),                                               # +1/s, TGI's name
        ('sglang:num_queue_reqs{model_name="m"}', "sgl-0", t),                        # SGLang exports both names:
        ('sglang:num_requests_waiting{name="m"}', "sgl-0", t),                        # +1/s, not +2
        ('vllm:num_requests_running{model_name="m",engine="0"}', "quiet-0", 7 * t),   # no queue reported
    ]
    return "".join(f'{series[:-1] + "," if series.endswith("}") else series + "{"}namespace="llm",pod="{pod}"}} '
                   f"{value}\n" for series, pod, value in rows)


OWNERS = {"grow": ["grow-0", "grow-1"], "flat": ["flat-0"], "fall": ["fall-0"], "tgi": ["tgi-0"], "sgl": ["sgl-0"],
          "quiet": ["quiet-0"]}


def kube_state() -> str:
    registry = CollectorRegistry()
    registry.register(OwnerSeries("llm", lambda: OWNERS))
    return generate_latest(registry).decode()


def epp(pool: str, queue: Callable[[], float] | None, *, current: bool = True, flow_control: bool = True
        ) -> Callable[[], str]:
    """One endpoint picker's exposition for ``pool`` (the current ``llm_d_epp_`` or the previous names)."""
    prefix, ready = ("llm_d_epp_", "llm_d_epp_ready_endpoints") if current else \
        ("inference_extension_", "inference_pool_ready_pods")

    def render() -> str:
        text = f'{ready}{{name="{pool}"}} 2\n'
        if flow_control:
            text += f"{prefix}flow_control_dispatch_cycle_duration_seconds_count {int(since() * 1000)}\n"
            text += f"{prefix}flow_control_dispatch_cycle_duration_seconds_sum 0.5\n"
            text += f'{prefix}flow_control_pool_saturation{{inference_pool="{pool}"}} 0.5\n'
            if current:  # llm-d-router exports the previous names beside the current ones (gateway.py)
                text += f'inference_extension_flow_control_pool_saturation{{inference_pool="{pool}"}} 0.5\n'
        if queue is not None:
            text += (f'{prefix}flow_control_queue_size{{fairness_id="default",inference_pool="{pool}",'
                     f'priority="0"}} {queue()}\n')
        return text

    return render


POOLS = {
    "grow": epp("grow", lambda: 3 * since()),                         # +3/s
    "flat": epp("flat", lambda: 5),
    "idle": epp("idle", None),                                        # flow control on, nothing queued: 0
    "old": epp("old", lambda: since(), current=False),                # +1/s under the previous names
    "nofc": epp("nofc", None, flow_control=False),                    # no flow control: no queue, no value
}


class Stack:
    def __init__(self, tmp: Path) -> None:
        self.running = ExitStack()
        server = self.running.enter_context(MetricsEndpoint(render=servers))
        owners = self.running.enter_context(MetricsEndpoint(kube_state()))
        pickers = {pool: self.running.enter_context(MetricsEndpoint(render=render)) for pool, render in POOLS.items()}
        rules = tmp / "recording.yaml"
        rules.write_text(yaml.safe_dump({"groups": [{"name": "t", "rules": recording_rules([])}]}))
        targets: list[str | tuple[str, dict[str, str]]] = [server.address, owners.address]
        targets += [(p.address, {"namespace": "llm", "pod": f"{pool}-epp-0"}) for pool, p in pickers.items()]
        self.prom = self.running.enter_context(PrometheusServer(targets, honor_labels=True, rule_files=[rules]))
        (tmp / "rules.yaml").write_text(capacity_yaml("10s", "1s"))
        self.rules = tmp / "rules.yaml"
        self.scaler_port = free_port()
        self.adapter = self.running.enter_context(AdapterProcess(self.prom.url, str(tmp / "certs"), [
            "--config", str(self.rules), "--metrics-relist-interval", "1s", "--keda-scaler-port",
            str(self.scaler_port), "--keda-scaler-insecure"]))
        self.kube = FakeKube()
        self.kube.aggregated.update({"custom.metrics.k8s.io": self.adapter.url,
                                     "external.metrics.k8s.io": self.adapter.url})
        self.kube.start()
        self.running.callback(self.kube.stop)
        self.kubeconfig = self.kube.write_kubeconfig(tmp / "kubeconfig")
        # Until every queue has a full window of samples and the recording rule has run over it.
        deadline = time.monotonic() + 60
        while since() < 14 or self.external("grow") is None or self.on_deployment("grow") is None:
            assert time.monotonic() < deadline, "the growth never answered"
            time.sleep(0.5)

    def _value(self, response: httpx.Response) -> float | None:
        if response.status_code == 404:
            assert response.json()["kind"] == "Status"
            return None
        assert response.status_code == 200, response.text
        [item] = response.json()["items"]
        assert item.get("metricName", item.get("metric", {}).get("name")) == GROWTH_METRIC
        return milli(item["value"]) / 1000

    def external(self, pool: str) -> float | None:
        return self._value(self.adapter.get(f"{EXTERNAL}/namespaces/llm/{GROWTH_METRIC}",
                                            labelSelector=f"inference_pool={pool}"))

    def on_deployment(self, name: str) -> float | None:
        return self._value(self.adapter.get(f"{CUSTOM}/namespaces/llm/deployments.apps/{name}/{GROWTH_METRIC}"))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(tmp_path_factory.mktemp("capacity-preset"))
    with running.running:
        yield running


def test_the_gateway_queue_growth_is_served_external_by_inference_pool(stack: Stack) -> None:
    assert stack.external("grow") == pytest.approx(3.0, abs=0.3)
    assert stack.external("old") == pytest.approx(1.0, abs=0.2)  # the previous metric names answer too
    assert stack.external("flat") == 0  # flat reads 0, not "no value"
    assert stack.external("idle") == 0  # flow control on, nothing queued
    assert stack.external("nofc") is None  # no flow control: no queue to read
    assert stack.external("ghost") is None  # no endpoint picker reports this pool


def test_the_servers_queue_growth_is_served_on_the_deployment(stack: Stack) -> None:
    assert stack.on_deployment("grow") == pytest.approx(2.0, abs=0.2)  # the pods' queues added up
    assert stack.on_deployment("tgi") == pytest.approx(1.0, abs=0.1)
    assert stack.on_deployment("sgl") == pytest.approx(1.0, abs=0.1)  # one server under two names, counted once
    assert stack.on_deployment("flat") == 0
    assert stack.on_deployment("fall") == 0  # falling is 0: headroom goes away, never below 0
    assert stack.on_deployment("quiet") is None  # no server queue reported for it
    assert stack.on_deployment("nobody") is None


def test_kubectl_get_raw_reads_both_through_the_aggregation(stack: Stack) -> None:
    kubectl = require_tool("kubectl")
    for path, expected in ((f"{CUSTOM}/namespaces/llm/deployments.apps/grow/{GROWTH_METRIC}", 2.0),
                           (f"{EXTERNAL}/namespaces/llm/{GROWTH_METRIC}?labelSelector=inference_pool%3Dgrow", 3.0)):
        done = subprocess.run([kubectl, "--kubeconfig", stack.kubeconfig, "get", "--raw", path],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        [item] = json.loads(done.stdout)["items"]
        assert milli(item["value"]) / 1000 == pytest.approx(expected, rel=0.15)


def test_explain_shows_the_slope_query(stack: Stack) -> None:
    done = subprocess.run([sys.executable, "-m", "adapter", "explain", "--prometheus-url", stack.prom.url,
                           "--config", str(stack.rules), "--output", "json",
                           f"{CUSTOM}/namespaces/llm/deployments.apps/grow/{GROWTH_METRIC}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [rule] = report["rules"]
    assert rule["promql"].startswith("clamp_min(deriv((sum by (deployment) (")
    assert 'namespace_deployment_pod:kube_pod_owner:relabel{namespace="llm",deployment="grow"}' in rule["promql"]
    [item] = report["items"]
    assert milli(item["value"]) / 1000 == pytest.approx(2.0, abs=0.2)


def test_the_keda_scaler_serves_it(stack: Stack) -> None:
    keda = KedaClient(f"127.0.0.1:{stack.scaler_port}")
    try:
        external = keda.trigger("headroom", "llm", {"metric": GROWTH_METRIC, "metricSelector": "inference_pool=grow",
                                                    "targetValue": "0.03"})
        assert external.value() == pytest.approx(3.0, abs=0.3)
        on_deployment = keda.trigger("headroom", "llm", {"metric": GROWTH_METRIC, "resource": "deployments.apps",
                                                         "name": "grow", "targetValue": "0.03"})
        assert on_deployment.value() == pytest.approx(2.0, abs=0.2)
        flat = keda.trigger("headroom", "llm", {"metric": GROWTH_METRIC, "metricSelector": "inference_pool=flat",
                                                "targetValue": "0.03"})
        assert flat.value() == 0 and not flat.is_active()
    finally:
        keda.close()
