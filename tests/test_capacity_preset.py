"""The ``capacity-headroom`` preset (``include: [capacity-headroom]``), from a real Prometheus fed queues and request
counters that grow, stay flat and fall: ``inference_queue_growth_rate``, how fast what waits grows (requests/s), and
``inference_request_rate_growth``, how fast the arrival rate grows (requests/s per second). Each External, selected by
``inference_pool`` (the endpoint picker's flow-control queue and request counter, both metric-name generations), and
Object on Deployments (the inference servers' waiting requests and request counters, joined to the Deployment
through kube-state-metrics' owner series and the pod -> Deployment recording rule). Read through the adapter's HTTP
API, ``kubectl get --raw`` (through the fake API's aggregation), ``gpu-adapter explain`` and the KEDA external scaler.

The queries here take the slope over 10 s at 1 s steps and the counters' rates over 5 s
(``capacity_yaml("10s", "1s", "5s")``) instead of the preset's 2 minutes at 15 s and 2 minutes, so that a test sees a
steady slope within seconds; the query is the same otherwise. A counter that grows as ``a t + b t^2`` arrives at
``a + 2 b t`` requests/s, a rate that grows by ``2 b`` per second."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from adapter.presets.capacity import (
    CAPACITY_PRESET,
    EPP_REQUESTS,
    GROWTH_METRIC,
    NOISE_SIGMAS,
    QUEUE_AHEAD_METRIC,
    RATE_WINDOW,
    REQUEST_AHEAD_METRIC,
    REQUEST_GROWTH_METRIC,
    SERVER_ARRIVALS,
    SERVER_QUEUES,
    STEP,
    WINDOW,
    capacity_preset,
    capacity_yaml,
)
from adapter.presets.capacity_history import HEADROOM_PROVISIONING
from adapter.presets.inference import INFERENCE_PRESETS, recording_rules
from adapter.rulesfile.loader import parse_rules
from loadtest.hpa.spec import milli
from loadtest.standins.kube_state import OwnerSeries
from tests.support.adapter_process import AdapterProcess
from tests.support.counting_proxy import CountingProxy
from tests.support.fake_kube import FakeKube
from tests.support.keda import KedaClient
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port
from tests.support.tools import require_tool

pytestmark = [pytest.mark.e2e, pytest.mark.tools]

CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
_CLOCK = {"start": time.monotonic()}
"""When the fed series start: the stack resets it (a test worker may import this module minutes before it runs)."""


def since() -> float:
    return time.monotonic() - _CLOCK["start"]


# ------------------------------------------------------------------------------------------------- pure checks

METRICS = [GROWTH_METRIC, REQUEST_GROWTH_METRIC, QUEUE_AHEAD_METRIC, REQUEST_AHEAD_METRIC]


def test_the_preset_loads_as_a_plain_rules_file_and_by_include() -> None:
    config = capacity_preset()
    assert config is capacity_preset() and config.source == CAPACITY_PRESET
    assert [r.name.as_ for r in config.rules] == [r.name.as_ for r in config.external_rules] == METRICS
    included = parse_rules(f"include: [{CAPACITY_PRESET}]\n", "rules.yaml")
    assert len(included.rules) == len(included.external_rules) == 4
    for rule in (*config.rules, *config.external_rules):
        assert f"[{WINDOW}:{STEP}]" in rule.metrics_query.source
        assert rule.metrics_query.source.startswith("clamp_min(deriv(")  # never negative
    assert f"[{RATE_WINDOW}]" in config.rules[1].metrics_query.source
    # The *_ahead metrics are the growths times the provisioning time the chart records (tests/test_capacity_history.py
    # reads them through a real Prometheus).
    for rules in (config.rules, config.external_rules):
        for growth, ahead in ((rules[0], rules[2]), (rules[1], rules[3])):
            assert ahead.metrics_query.source.startswith(growth.metrics_query.source + " * on (")
            assert f"{HEADROOM_PROVISIONING}{{<<.LabelMatchers>>}}" in ahead.metrics_query.source


def test_the_arrival_counters_are_each_servers_and_the_in_flight_gauges_the_inference_presets_names() -> None:
    gauges = {name for preset in INFERENCE_PRESETS.values() for metric in preset.metrics
              for name in getattr(metric, "names", ())}
    assert {s.server for s in SERVER_ARRIVALS} == {"vLLM", "TGI", "SGLang", "Triton"}
    for server in SERVER_ARRIVALS:
        assert set(server.in_flight) <= gauges, server.server


def test_the_server_queues_are_the_inference_presets_waiting_gauges() -> None:
    gauges = {name for preset in INFERENCE_PRESETS.values() for metric in preset.metrics
              for name in getattr(metric, "names", ())}
    assert set(SERVER_QUEUES) <= gauges


def test_the_chart_copy_is_the_preset() -> None:
    chart = Path(__file__).parent.parent / "charts" / "gpu-autoscaler" / "files" / "capacity-presets.yaml"
    assert yaml.safe_load(chart.read_text()) == yaml.safe_load(capacity_yaml())


# ------------------------------------------------------------------------------------- a real Prometheus, fed

VLLM = '{model_name="m",engine="0"}'


def vllm_server(pod: str, finished: float, running: float, waiting: float) -> list[tuple[str, str, float]]:
    """One vLLM V1 server: its finished-request counter (by reason) and its running and waiting gauges."""
    return [(f'vllm:request_success_total{{model_name="m",engine="0",finished_reason="{reason}"}}', pod, value)
            for reason, value in (("stop", finished), ("abort", 0.0))] + [
        (f"vllm:num_requests_running{VLLM}", pod, running), (f"vllm:num_requests_waiting{VLLM}", pod, waiting)]


def servers() -> str:
    """The servers' waiting requests and request counters: growing, flat and falling, under several servers'
    names."""
    t, now_ms = since(), round(time.time() * 1000)
    rows = [
        (f"vllm:num_requests_waiting{VLLM}", "grow-0", 2 * t),                       # +2/s
        (f"vllm:num_requests_waiting{VLLM}", "grow-1", 3),                           # flat: the Deployment +2/s
        (f"vllm:num_requests_waiting{VLLM}", "flat-0", 4),
        (f"vllm:num_requests_waiting{VLLM}", "fall-0", max(0.0, 500 - 3 * t)),
        ("tgi_queue_size", "tgi-0", t),                                               # +1/s, TGI's name
        ('sglang:num_queue_reqs{model_name="m"}', "sgl-0", t),                        # SGLang exports both names:
        ('sglang:num_requests_waiting{name="m"}', "sgl-0", t),                        # +1/s, not +2
        (f"vllm:num_requests_running{VLLM}", "quiet-0", 7 * t),                      # no queue, no counter
        # Arrivals. rgrow: 2 + 0.5 t finished per second, and a queue whose growth (0.05 t^2 waiting: 0.1 t per
        # second) adds 0.1 t arrivals per second that have not finished: the arrival rate grows 0.6 per second.
        *vllm_server("rgrow-0", 2 * t + 0.25 * t * t, 1, 0.05 * t * t),
        *vllm_server("rflat-0", 5 * t, 1, 2),                                         # 5/s: flat
        *vllm_server("rfall-0", 50 * t - 0.25 * t * t, 1, 0),                         # 50 - 0.5 t: falling
        ("tgi_request_count", "rtgi-0", t + 0.25 * t * t),                             # counted on arrival: +0.5
        ('sglang:num_requests_total{model_name="m"}', "rsgl-0", 0.5 * t * t),          # +1
        ('sglang:num_running_reqs{model_name="m"}', "rsgl-0", 3),
        ('sglang:num_queue_reqs{model_name="m"}', "rsgl-0", 0),
        ('nv_inference_request_success{model="m",version="1"}', "rtrt-0", 0.25 * t * t),  # success and failure
        ('nv_inference_request_failure{model="m",version="1"}', "rtrt-0", 0.25 * t * t),  # together: +1
        ('nv_inference_pending_request_count{model="m",version="1"}', "rtrt-0", 2),
        # A scale-down at a flat 10/s: two pods at 5/s each until SCALE_DOWN_AT, then one of them is deleted (its
        # series and its owner series end) and the other serves all 10/s.
        *vllm_server("rdown-0", 5 * t + 5 * max(0.0, t - SCALE_DOWN_AT), 1, 0),
        *(vllm_server("rdown-1", 5 * t, 1, 0) if t < SCALE_DOWN_AT else []),
        # Growth at 100 requests/s, below and above the noise margin (0.12 requests/s per second there).
        ("tgi_request_count", "rslow-0", 100 * t + 0.025 * t * t),                     # +0.05
        ("tgi_request_count", "rfast-0", 100 * t + 0.25 * t * t),                      # +0.5
    ]
    # These two carry the time their value was computed at: at 100 requests/s a scrape that Prometheus stamps
    # 0.1 s before the page is rendered (a busy CI machine) is 10 requests of noise, more than the margin leaves
    # room for (read 0.154 against 0.05 once). The others have no timestamp, as servers write them, so that a
    # deleted pod's series goes stale as it does in a cluster.
    stamped = {"rslow-0", "rfast-0"}
    return "".join(f'{series[:-1] + "," if series.endswith("}") else series + "{"}namespace="llm",pod="{pod}"}} '
                   f"{value}{f' {now_ms}' if pod in stamped else ''}\n" for series, pod, value in rows)


OWNERS = {"grow": ["grow-0", "grow-1"], "flat": ["flat-0"], "fall": ["fall-0"], "tgi": ["tgi-0"], "sgl": ["sgl-0"],
          "quiet": ["quiet-0"], "rgrow": ["rgrow-0"], "rflat": ["rflat-0"], "rfall": ["rfall-0"],
          "rtgi": ["rtgi-0"], "rsgl": ["rsgl-0"], "rtrt": ["rtrt-0"], "rslow": ["rslow-0"], "rfast": ["rfast-0"]}
SCALE_DOWN_AT = 30.0
"""Seconds after the stack starts at which ``rdown`` loses a pod (after the stack's first full windows)."""


def owners() -> dict[str, list[str]]:
    return {**OWNERS, "rdown": ["rdown-0", "rdown-1"] if since() < SCALE_DOWN_AT else ["rdown-0"]}


def kube_state() -> str:
    registry = CollectorRegistry()
    registry.register(OwnerSeries("llm", owners))
    return generate_latest(registry).decode()


def epp(pool: str, queue: Callable[[], float] | None, *, current: bool = True, flow_control: bool = True,
        requests: Callable[[], float] | None = None) -> Callable[[], str]:
    """One endpoint picker's exposition for ``pool`` (the current ``llm_d_epp_`` or the previous names); its
    request counter under both names where current (llm-d-router exports both), else Gateway API Inference
    Extension's."""
    prefix, ready = ("llm_d_epp_", "llm_d_epp_ready_endpoints") if current else \
        ("inference_extension_", "inference_pool_ready_pods")

    def render() -> str:
        text = f'{ready}{{name="{pool}"}} 2\n'
        if requests is not None:
            for name in EPP_REQUESTS if current else EPP_REQUESTS[1:]:
                text += f'{name}{{model_name="m",target_model_name="m",priority="0"}} {requests()}\n'
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
    # queue +3/s; requests 2 + t per second dispatched, plus the queue's 3 per second: arrivals grow 1 per second
    "grow": epp("grow", lambda: 3 * since(), requests=lambda: 2 * since() + 0.5 * since() ** 2),
    "flat": epp("flat", lambda: 5, requests=lambda: 4 * since()),    # both flat
    "idle": epp("idle", None),                                        # flow control on, nothing queued or sent: 0
    # +1/s under the previous names; requests 0.25 t^2: +0.5 per second
    "old": epp("old", lambda: since(), current=False, requests=lambda: 0.25 * since() ** 2),
    "nofc": epp("nofc", None, flow_control=False, requests=lambda: since() ** 2),  # no flow control: no value
}


COUNT_WINDOW = "10m"
"""The noise margin's counting window: as though each 5 s rate counted 10 minutes of requests (the preset's 2 minutes
with these short windows would leave little growth to see)."""


def margin(rate: float) -> float:
    """The request-rate growth the preset leaves out at ``rate`` requests/s: 2 standard deviations of a flat
    Poisson load's slope over the 10 s window."""
    return NOISE_SIGMAS * math.sqrt(2 * rate / 600) / 10


class Stack:
    def __init__(self, tmp: Path) -> None:
        _CLOCK["start"] = time.monotonic()  # every fed series starts now, its windows fill from here
        self.running = ExitStack()
        server = self.running.enter_context(MetricsEndpoint(render=servers))
        owners = self.running.enter_context(MetricsEndpoint(render=kube_state))
        pickers = {pool: self.running.enter_context(MetricsEndpoint(render=render)) for pool, render in POOLS.items()}
        rules = tmp / "recording.yaml"
        rules.write_text(yaml.safe_dump({"groups": [{"name": "t", "rules": recording_rules([])}]}))
        targets: list[str | tuple[str, dict[str, str]]] = [server.address, owners.address]
        targets += [(p.address, {"namespace": "llm", "pod": f"{pool}-epp-0"}) for pool, p in pickers.items()]
        self.prom = self.running.enter_context(PrometheusServer(targets, honor_labels=True, rule_files=[rules]))
        (tmp / "rules.yaml").write_text(capacity_yaml("10s", "1s", "5s", count_window=COUNT_WINDOW))
        self.rules = tmp / "rules.yaml"
        self.scaler_port = free_port()
        self.proxy = CountingProxy(self.prom.url)  # counts the instant queries the adapter sends
        self.running.callback(self.proxy.stop)
        self.adapter = self.running.enter_context(AdapterProcess(self.proxy.url, str(tmp / "certs"), [
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
        while since() < 20 or any(value is None for value in (
                self.external("grow"), self.on_deployment("grow"), self.external("grow", REQUEST_GROWTH_METRIC),
                self.on_deployment("rgrow", REQUEST_GROWTH_METRIC))):
            assert time.monotonic() < deadline, "the growth never answered"
            time.sleep(0.5)

    def _value(self, response: httpx.Response, metric: str) -> float | None:
        if response.status_code == 404:
            assert response.json()["kind"] == "Status"
            return None
        assert response.status_code == 200, response.text
        [item] = response.json()["items"]
        assert item.get("metricName", item.get("metric", {}).get("name")) == metric
        return milli(item["value"]) / 1000

    def external(self, pool: str, metric: str = GROWTH_METRIC) -> float | None:
        return self._value(self.adapter.get(f"{EXTERNAL}/namespaces/llm/{metric}",
                                            labelSelector=f"inference_pool={pool}"), metric)

    def on_deployment(self, name: str, metric: str = GROWTH_METRIC) -> float | None:
        return self._value(self.adapter.get(f"{CUSTOM}/namespaces/llm/deployments.apps/{name}/{metric}"), metric)


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


def test_the_gateway_request_rate_growth_is_served_external_by_inference_pool(stack: Stack) -> None:
    metric = REQUEST_GROWTH_METRIC
    # Dispatched requests (counted once, though llm-d-router exports both names) plus what waits in flow control.
    t = since()
    assert stack.external("grow", metric) == pytest.approx(1.0 - margin(5 + t), abs=0.15)
    # Gateway API Inference Extension's name
    assert stack.external("old", metric) == pytest.approx(0.5 - margin(0.5 * t), abs=0.1)
    assert stack.external("flat", metric) == 0
    assert stack.external("idle", metric) == 0  # flow control on, no request yet: no counter series, still 0
    assert stack.external("nofc", metric) is None  # no flow control: the pool is not discovered
    assert stack.external("ghost", metric) is None


def test_the_servers_request_rate_growth_is_served_on_the_deployment(stack: Stack) -> None:
    metric = REQUEST_GROWTH_METRIC
    # Each less the noise margin at its current rate. vLLM counts requests when they finish: what its queue gained
    # arrived too (0.5 + 0.1 per second).
    t = since()
    assert stack.on_deployment("rgrow", metric) == pytest.approx(0.6 - margin(2 + 0.6 * t), abs=0.1)
    assert stack.on_deployment("rtgi", metric) == pytest.approx(0.5 - margin(1 + 0.5 * t), abs=0.1)  # on arrival
    assert stack.on_deployment("rsgl", metric) == pytest.approx(1.0 - margin(t), abs=0.15)
    assert stack.on_deployment("rtrt", metric) == pytest.approx(1.0 - margin(t), abs=0.15)  # success and failure
    # At 100 requests/s, growth within the noise of a flat load reads 0; above it, what exceeds it.
    assert stack.on_deployment("rslow", metric) == 0
    assert stack.on_deployment("rfast", metric) == pytest.approx(0.5 - margin(100 + 0.5 * t), abs=0.1)
    assert stack.on_deployment("rflat", metric) == 0
    assert stack.on_deployment("rfall", metric) == 0  # a falling rate is 0, never below
    assert stack.on_deployment("quiet", metric) is None  # no request counter reported for it
    assert stack.on_deployment("grow", metric) is None  # queues alone: no counter, no value


def test_a_scale_down_at_a_flat_load_is_no_growth(stack: Stack) -> None:
    # The deleted pod's requests of the rate window still count (its owner series taken over that window), so the
    # requests moving to the pod that stays read as no change. Counting only the pods owned now, the arrivals would
    # drop by half at once and climb back over the rate window: 0.26 requests/s per second of growth here at its
    # peak (measured), against 0.03 at most with the window.
    metric = REQUEST_GROWTH_METRIC
    before = stack.on_deployment("rdown", metric)
    assert since() >= SCALE_DOWN_AT or before == pytest.approx(0, abs=0.05)
    while since() < SCALE_DOWN_AT:
        time.sleep(0.2)
    seen = []
    while since() < SCALE_DOWN_AT + 16:  # the rate window (5 s) and the slope's (10 s) past the scale-down
        seen.append(stack.on_deployment("rdown", metric))
        time.sleep(0.5)
    assert None not in seen
    assert max(seen) <= 0.1, seen  # type: ignore[type-var]


def test_kubectl_get_raw_reads_both_through_the_aggregation(stack: Stack) -> None:
    kubectl = require_tool("kubectl")
    for path, expected in ((f"{CUSTOM}/namespaces/llm/deployments.apps/grow/{GROWTH_METRIC}", 2.0),
                           (f"{EXTERNAL}/namespaces/llm/{GROWTH_METRIC}?labelSelector=inference_pool%3Dgrow", 3.0)):
        done = subprocess.run([kubectl, "--kubeconfig", stack.kubeconfig, "get", "--raw", path],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        [item] = json.loads(done.stdout)["items"]
        assert milli(item["value"]) / 1000 == pytest.approx(expected, rel=0.15)


def explain(stack: Stack, path: str) -> dict[str, Any]:
    """``adapter explain --output json`` of one request path against the stack's Prometheus and rules."""
    done = subprocess.run([sys.executable, "-m", "adapter", "explain", "--prometheus-url", stack.prom.url,
                           "--config", str(stack.rules), "--output", "json", path],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_explain_shows_the_slope_query(stack: Stack) -> None:
    report = explain(stack, f"{CUSTOM}/namespaces/llm/deployments.apps/grow/{GROWTH_METRIC}")
    [rule] = report["rules"]
    assert rule["promql"].startswith("clamp_min(deriv((sum by (deployment) (")
    assert 'namespace_deployment_pod:kube_pod_owner:relabel{namespace="llm",deployment="grow"}' in rule["promql"]
    [item] = report["items"]
    assert milli(item["value"]) / 1000 == pytest.approx(2.0, abs=0.2)
    report = explain(stack, f"{EXTERNAL}/namespaces/llm/{REQUEST_GROWTH_METRIC}?labelSelector=inference_pool%3Dgrow")
    # One binding per name the pool's saturation gauge is discovered under (llm-d-router exports both); the first
    # answers.
    assert {r["series"] for r in report["rules"]} == {"llm_d_epp_flow_control_pool_saturation",
                                                      "inference_extension_flow_control_pool_saturation"}
    for rule in report["rules"]:
        assert "rate(llm_d_epp_request_total{" in rule["promql"] and 'inference_pool="grow"' in rule["promql"]
    [item] = report["items"]
    assert milli(item["value"]) / 1000 == pytest.approx(1.0, abs=0.15)


def test_the_object_rules_read_the_servers_in_the_requests_namespace_only(stack: Stack) -> None:
    # Prometheus carries no matcher across the join with the owner series: the servers' own selectors must name the
    # request's namespace, as the External arrivals query does, or each sync reads every pod of the cluster.
    for name, metric in (("grow", GROWTH_METRIC), ("rgrow", REQUEST_GROWTH_METRIC)):
        report = explain(stack, f"{CUSTOM}/namespaces/llm/deployments.apps/{name}/{metric}")
        [rule] = report["rules"]
        assert 'namespace!=""' not in rule["promql"]
        assert 'namespace=~"llm",pod!=""' in rule["promql"], rule["promql"]
        [item] = report["items"]
        assert milli(item["value"]) / 1000 > 0
    for rule in capacity_preset().external_rules:
        assert 'namespace!=""' not in rule.metrics_query.source


def test_an_external_request_asks_one_freshness_query_for_its_two_rules(stack: Stack) -> None:
    # The pool's saturation gauge is discovered under both name generations, so the request has two rules (their
    # queries render the same and are sent once), but only the first rule's answer is served: its freshness is the
    # only one asked. The selector's set form is used by no other test, so no cached answer stands in for a query.
    stack.proxy.queries.clear()
    reply = stack.adapter.get(f"{EXTERNAL}/namespaces/llm/{REQUEST_GROWTH_METRIC}",
                              labelSelector="inference_pool in (grow,unseen)")
    assert stack._value(reply, REQUEST_GROWTH_METRIC) is not None
    sent = {q: n for q, n in stack.proxy.queries.items() if 'inference_pool=~"grow|unseen"' in q}
    freshness = [q for q in sent if q.startswith("count_over_time(")]
    assert len(freshness) == 1 and sent[freshness[0]] == 1, sent
    assert sum(sent.values()) == 2, sent  # the metric's query once, its freshness once


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
        arrivals = keda.trigger("headroom", "llm", {"metric": REQUEST_GROWTH_METRIC, "resource": "deployments.apps",
                                                    "name": "rtgi", "targetValue": "0.02"})
        assert arrivals.value() == pytest.approx(0.5, abs=0.1) and arrivals.is_active()
    finally:
        keda.close()
