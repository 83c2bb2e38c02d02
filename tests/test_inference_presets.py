"""Inference-server presets (``include: [vllm, triton, tgi, sglang]``): they load as prometheus-adapter rules,
discover each server's series (current and previous names), compute exact values in promtool, and serve per-pod
and per-Deployment values through the adapter's HTTPS API from a real Prometheus scraping each server's own
exposition format (``tests/data/inference``)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from adapter.presets.inference import (
    INFERENCE_PRESETS,
    POD_DEPLOYMENT_RULE,
    inference_preset,
    preset_yaml,
    recording_rules,
)
from adapter.rules import GroupResource, MetricInfo, RulesError, build_catalogue
from adapter.rulesfile.loader import parse_rules
from loadtest.hpa.spec import milli
from tests.support.adapter_process import AdapterProcess
from tests.support.k8s_validation import run, tool
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer
from tests.support.queries import custom_promql
from tests.support.waiting import wait_until
from tests.test_rules_presets import matching

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parent / "data" / "inference"
NAMESPACE = "llm"
PODS = GroupResource("", "pods")
NAMESPACES = GroupResource("", "namespaces")
DEPLOYMENTS = GroupResource("apps", "deployments")
BASE = "/apis/custom.metrics.k8s.io/v1beta2"

# exposition file -> the pod serving it (its Deployment per kube-state-metrics.prom), and whether its counters and
# histograms grow while the test runs (a busy server) or stand still (an idle one).
TARGETS = {
    "vllm-v1-with-deprecated.prom": ("llama-7d9f8-abcde", True),
    "vllm-v1.prom": ("llama-7d9f8-fghij", False),
    "vllm-v0.prom": ("llama-old-5c4b3-klmno", False),
    "triton.prom": ("triton-6f5e4-pqrst", True),
    "tgi.prom": ("tgi-8a7b6-uvwxy", False),
    "sglang.prom": ("sglang-0", False),  # a StatefulSet's pod: no Deployment
    "sglang-first-collector.prom": ("sglang-old-9d8c7-zabcd", False),
}
ALL = ", ".join(INFERENCE_PRESETS)

# API metric -> the series names that answer it, in the order they are asked (its own name first).
RENAMED = {
    "vllm:kv_cache_usage_perc": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    "vllm:gpu_cache_usage_perc": ["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"],
    "sglang:num_queue_reqs": ["sglang:num_queue_reqs", "sglang:num_requests_waiting"],
    "sglang:num_requests_waiting": ["sglang:num_requests_waiting", "sglang:num_queue_reqs"],
    "sglang:num_running_reqs": ["sglang:num_running_reqs", "sglang:num_requests_running"],
    "sglang:num_requests_running": ["sglang:num_requests_running", "sglang:num_running_reqs"],
}
API_METRICS = {
    "vllm": ["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
             "vllm:gpu_cache_usage_perc", "vllm:time_to_first_token_seconds_p95"],
    "triton": ["nv_inference_pending_request_count", "nv_inference_queue_duration_us_per_second"],
    "tgi": ["tgi_queue_size", "tgi_batch_current_size"],
    "sglang": ["sglang:num_queue_reqs", "sglang:num_requests_waiting", "sglang:num_running_reqs",
               "sglang:num_requests_running", "sglang:token_usage"],
}


def target_labels(pod: str) -> dict[str, str]:
    """What a PodMonitor adds to every series of a pod it scrapes."""
    return {"namespace": NAMESPACE, "pod": pod, "container": "server", "endpoint": "metrics",
            "job": f"{NAMESPACE}/inference", "instance": "10.0.7.12:8000"}


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> Iterator[tuple[str, dict[str, str], str]]:
    """(name, labels, value) of each sample line, names as written (no ``_total`` added, as Prometheus stores)."""
    for line in text.splitlines():
        found = SAMPLE.match(line)
        if found:
            yield found.group(1), dict(LABEL.findall(found.group(2) or "")), found.group(3)


def scraped_series() -> list[dict[str, str]]:
    """The label sets Prometheus stores for the expositions, plus the recorded per-Deployment series."""
    series = []
    for name, (pod, _) in TARGETS.items():
        for sample, labels, _ in samples((DATA / name).read_text()):
            series.append({"__name__": sample, **labels, **target_labels(pod)})
    for rule in recording_rules(list(INFERENCE_PRESETS))[1:]:
        series.append({"__name__": rule["record"], "namespace": NAMESPACE, "deployment": "llama"})
    return series


# ---------------------------------------------------------------------------------------------- rules, pure


def test_each_preset_is_a_plain_prometheus_adapter_rules_file() -> None:
    for name, preset in INFERENCE_PRESETS.items():
        config = inference_preset(name)
        assert config.source == name and config.external_rules == () and config.include == ()
        # The same text parses as a rules file of its own: no extension (include, missingValue) in it.
        text = preset_yaml(preset)
        assert "include" not in text and "missingValue" not in text
        assert [r.series_query for r in parse_rules(text, f"{name}.yaml").rules] == \
            [r.series_query for r in config.rules]
    config = parse_rules(f"include: [{ALL}]\n", "rules.yaml")
    assert len(config.rules) == sum(len(inference_preset(n).rules) for n in INFERENCE_PRESETS)
    with pytest.raises(RulesError, match=r"rules.yaml: include\[0\]: unknown include 'vlm' \(known: capacity-headroom, "
                                         r"gpu-presets, inference-gateway, sglang, tgi, triton, vllm\)"):
        parse_rules("include: [vlm]\n", "rules.yaml")


def test_every_metric_is_served_per_pod_and_per_deployment() -> None:
    config = parse_rules(f"include: [{ALL}]\n", "rules.yaml")
    series = scraped_series()
    catalogue = build_catalogue(config, {q: matching(series, q) for q in config.series_queries()})
    served = set(catalogue.custom_metrics())
    for preset, names in API_METRICS.items():
        for name in names:
            assert {MetricInfo(name, PODS, True), MetricInfo(name, NAMESPACES, False),
                    MetricInfo(name, DEPLOYMENTS, True)} <= served, (preset, name)
    assert {m.name for m in served} == {n for names in API_METRICS.values() for n in names}
    for name in API_METRICS["vllm"]:
        [deployment] = catalogue.lookup(name, "deployments.apps")
        assert (deployment.resource_label, deployment.namespace_label) == ("deployment", "namespace")
        assert deployment.series.startswith("namespace_deployment:")
    for api, series_names in RENAMED.items():
        assert [b.series for b in catalogue.lookup(api, "pods")] == series_names


@pytest.mark.tools
def test_recording_rules_are_valid_for_promtool(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    rules = recording_rules(list(INFERENCE_PRESETS))
    path.write_text(yaml.safe_dump({"groups": [{"name": "inference", "rules": rules}]}))
    proc = run([tool("promtool"), "check", "rules", str(path)])
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout
    assert rules[0]["record"] == POD_DEPLOYMENT_RULE


# -------------------------------------------------------------------- exact values, evaluated by promtool


def promtool_test(tmp_path: Path, series: dict[str, str], checks: list[tuple[str, list[tuple[str, float]]]],
                  rules: list[dict[str, str]] | None = None) -> None:
    """``series``: promtool input (1 m apart); ``checks``: (expr at 5m, expected (labels, value) samples), compared
    to 6 decimals (promtool compares exactly: a quantile is 0.6249999999999998, not 0.625)."""
    rule_files = []
    if rules:
        (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "inference", "rules": rules}]}))
        rule_files = ["rules.yaml"]
    doc = {"rule_files": rule_files, "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "promql_expr_test": [{"expr": f"round({expr}, 1e-6)", "eval_time": "5m",
                              "exp_samples": [{"labels": labels, "value": value} for labels, value in expected]}
                             for expr, expected in checks]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(doc, width=1000))
    proc = run([tool("promtool"), "test", "rules", "test.yaml"], cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


TTFT_SHARES = {"0.1": 20, "0.25": 60, "0.5": 90, "0.75": 100, "1.0": 100, "+Inf": 100}  # cumulative per 100
# 95th percentile: rank 95 lies in (0.5, 0.75], between 90 and 100 observations: 0.5 + 0.25 * 5/10
TTFT_P95 = 0.625


def ttft_series(pod: str, deployment_labels: str = "", *, busy: bool) -> dict[str, str]:
    labels = f'namespace="llm",pod="{pod}",model_name="m",engine="0"{deployment_labels}'
    return {f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{le}"}}': f"0+{n}x10" if busy else f"{n}x10"
            for le, n in TTFT_SHARES.items()}


def pod_query(metric: str, pods: list[str]) -> str:
    config = parse_rules(f"include: [{ALL}]\n", "rules.yaml")
    series = scraped_series()
    catalogue = build_catalogue(config, {q: matching(series, q) for q in config.series_queries()})
    return custom_promql(catalogue.lookup(metric, "pods")[0], namespace=NAMESPACE, names=pods)


@pytest.mark.tools
def test_quantile_and_rate_per_pod_in_promtool(tmp_path: Path) -> None:
    series = {**ttft_series("busy", busy=True), **ttft_series("idle", busy=False),
              # Triton: two models queue 0.5 s and 1.5 s per second: 2,000,000 µs of queueing per second
              'nv_inference_queue_duration_us{namespace="llm",pod="triton-0",model="a",version="1"}': "0+30000000x10",
              'nv_inference_queue_duration_us{namespace="llm",pod="triton-0",model="b",version="1"}': "0+90000000x10",
              'nv_inference_queue_duration_us{namespace="llm",pod="triton-1",model="a",version="1"}': "7x10"}
    promtool_test(tmp_path, series, [
        # A pod with no request in the window reads 0 (not NaN, which the adapter would refuse to serve).
        (pod_query("vllm:time_to_first_token_seconds_p95", ["busy", "idle", "gone"]),
         [('{pod="busy"}', TTFT_P95), ('{pod="idle"}', 0.0)]),
        (pod_query("nv_inference_queue_duration_us_per_second", ["triton-0", "triton-1"]),
         [('{pod="triton-0"}', 2_000_000.0), ('{pod="triton-1"}', 0.0)]),
    ])


@pytest.mark.tools
def test_recording_rules_give_each_deployment_its_value_in_promtool(tmp_path: Path) -> None:
    def owner(pod: str, replicaset: str) -> str:
        return (f'kube_pod_owner{{job="kube-state-metrics",namespace="llm",pod="{pod}",uid="u-{pod}",'
                f'owner_kind="ReplicaSet",owner_name="{replicaset}",owner_is_controller="true"}}')

    def rs(replicaset: str, deployment: str) -> str:
        return (f'kube_replicaset_owner{{job="kube-state-metrics",namespace="llm",replicaset="{replicaset}",'
                f'owner_kind="Deployment",owner_name="{deployment}",owner_is_controller="true"}}')

    def gauge(name: str, pod: str, value: float, engine: str = "0") -> tuple[str, str]:
        return f'{name}{{namespace="llm",pod="{pod}",model_name="m",engine="{engine}"}}', f"{value}x10"

    series = dict([
        gauge("vllm:num_requests_waiting", "llama-a-1", 3), gauge("vllm:num_requests_waiting", "llama-a-1", 4, "1"),
        gauge("vllm:num_requests_waiting", "llama-a-2", 1), gauge("vllm:num_requests_waiting", "other-0", 50),
        # one pod on vLLM 0.10 (both KV names), one on an older engine (only the old one)
        gauge("vllm:kv_cache_usage_perc", "llama-a-1", 0.2), gauge("vllm:gpu_cache_usage_perc", "llama-a-1", 0.2),
        gauge("vllm:gpu_cache_usage_perc", "llama-a-2", 0.8),
    ])
    series.update({owner("llama-a-1", "llama-a-x"): "1x10", owner("llama-a-2", "llama-a-y"): "1x10",
                   rs("llama-a-x", "llama"): "1x10", rs("llama-a-y", "llama"): "1x10"})
    series.update(ttft_series("llama-a-1", busy=True))
    series.update(ttft_series("llama-a-2", busy=False))
    deployment = '{namespace="llm",deployment="llama"}'
    promtool_test(tmp_path, series, [
        ("namespace_deployment:vllm:num_requests_waiting:sum", [(deployment, 8.0)]),  # other-0 has no Deployment
        ("namespace_deployment:vllm:kv_cache_usage_perc:avg", [(deployment, 0.5)]),
        ("namespace_deployment:vllm:time_to_first_token_seconds:p95", [(deployment, TTFT_P95)]),
    ], rules=recording_rules(["vllm"]))


# ------------------------------------------------------- through the adapter, from a real Prometheus


def growing(text: str, started: float, per_second: float = 0.1) -> Callable[[], str]:
    """Each scrape: the exposition with every counter and histogram sample scaled by ``1 + per_second * t``, as
    a server that keeps observing the same distribution (rates, hence quantiles, stay those of the file)."""
    cumulative: set[str] = set()
    for kind in re.finditer(r"^# TYPE (\S+) (counter|histogram)$", text, re.MULTILINE):
        family = kind.group(1)
        cumulative.update([family] if kind.group(2) == "counter" else [f"{family}_{s}" for s in ("bucket", "count",
                                                                                                   "sum")])

    def render() -> str:
        factor = 1 + per_second * (time.monotonic() - started)
        lines = []
        for line in text.splitlines():
            found = SAMPLE.match(line)
            if found and found.group(1) in cumulative:
                line = f"{found.group(1)}{{{found.group(2) or ''}}} {float(found.group(3)) * factor!r}"
            lines.append(line)
        return "\n".join(lines) + "\n"

    return render


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdapterProcess]:
    tmp = tmp_path_factory.mktemp("inference")
    (tmp / "recording.yaml").write_text(yaml.safe_dump(
        {"groups": [{"name": "inference", "rules": recording_rules(list(INFERENCE_PRESETS))}]}))
    (tmp / "rules.yaml").write_text(f"include: [{ALL}]\n")
    started = time.monotonic()
    with ExitStack() as running:
        kube_state = running.enter_context(MetricsEndpoint(text=(DATA / "kube-state-metrics.prom").read_text()))
        targets: list[Any] = [(kube_state.address, {"namespace": "kube-system", "pod": "kube-state-metrics-0"})]
        for name, (pod, busy) in TARGETS.items():
            text = (DATA / name).read_text()
            render = growing(text, started) if busy else None
            endpoint = running.enter_context(MetricsEndpoint(text=text, render=render))
            targets.append((endpoint.address, target_labels(pod)))
        # honor_labels keeps kube-state-metrics' own namespace/pod; the servers' series carry the target's.
        prom = running.enter_context(PrometheusServer(targets, job="inference", honor_labels=True,
                                                      rule_files=[tmp / "recording.yaml"]))
        prom.wait_for('namespace_deployment:vllm:time_to_first_token_seconds:p95{deployment="llama"} > 0', timeout=40)
        yield running.enter_context(AdapterProcess(prom.url, str(tmp / "certs"), [
            "--config", str(tmp / "rules.yaml"), "--metrics-relist-interval", "1s"]))


def value(adapter: AdapterProcess, path: str) -> float:
    """The one item's value, waiting out the adapter's first relists."""

    def answered() -> httpx.Response | None:
        response = adapter.get(f"{BASE}/namespaces/{NAMESPACE}/{path}")
        return response if response.status_code == 200 else None

    response = wait_until(answered, 15, f"{path} answered with a value")
    [item] = response.json()["items"]
    return milli(item["value"]) / 1000


def test_discovery_lists_every_preset_metric(stack: AdapterProcess) -> None:
    wanted = {f"{r}/{m}" for names in API_METRICS.values() for m in names for r in ("pods", "deployments.apps")}
    wait_until(lambda: wanted <= {r["name"] for r in stack.get(BASE).json()["resources"]}, 15,
               f"every preset metric listed ({sorted(wanted)})")


@pytest.mark.parametrize(("path", "expected"), [
    # vLLM V1 with two engines: queues add up, the KV-cache ratio averages; the old name answers too.
    ("pods/llama-7d9f8-abcde/vllm:num_requests_waiting", 7.0),
    ("pods/llama-7d9f8-abcde/vllm:num_requests_running", 14.0),
    ("pods/llama-7d9f8-abcde/vllm:kv_cache_usage_perc", 0.5),
    ("pods/llama-7d9f8-abcde/vllm:gpu_cache_usage_perc", 0.5),
    # vLLM without the deprecated gauge, and the V0 engine with only it: both names answer either way.
    ("pods/llama-7d9f8-fghij/vllm:gpu_cache_usage_perc", 0.4),
    ("pods/llama-old-5c4b3-klmno/vllm:kv_cache_usage_perc", 0.6),
    ("pods/llama-old-5c4b3-klmno/vllm:num_requests_waiting", 2.0),
    # Triton: pending requests of every model on the pod.
    ("pods/triton-6f5e4-pqrst/nv_inference_pending_request_count", 7.0),
    ("pods/tgi-8a7b6-uvwxy/tgi_queue_size", 6.0),
    ("pods/tgi-8a7b6-uvwxy/tgi_batch_current_size", 16.0),
    # SGLang, current and first collector, under both names.
    ("pods/sglang-0/sglang:num_queue_reqs", 9.0),
    ("pods/sglang-0/sglang:num_requests_waiting", 9.0),
    ("pods/sglang-old-9d8c7-zabcd/sglang:num_queue_reqs", 5.0),
    ("pods/sglang-old-9d8c7-zabcd/sglang:num_running_reqs", 3.0),
    ("pods/sglang-0/sglang:token_usage", 0.35),
    # Deployments: queues summed over their pods (an AverageValue target divides by the replicas), ratios averaged
    # over their engines ((0.25 + 0.75 + 0.4) / 3), latency quantiles over all their requests.
    ("deployments.apps/llama/vllm:num_requests_waiting", 8.0),
    ("deployments.apps/llama/vllm:num_requests_running", 19.0),
    ("deployments.apps/llama/vllm:kv_cache_usage_perc", 1.4 / 3),
    ("deployments.apps/llama-old/vllm:gpu_cache_usage_perc", 0.6),
    ("deployments.apps/triton/nv_inference_pending_request_count", 7.0),
    ("deployments.apps/tgi/tgi_queue_size", 6.0),
    ("deployments.apps/sglang-old/sglang:num_requests_waiting", 5.0),
])
def test_values_per_pod_and_per_deployment(stack: AdapterProcess, path: str, expected: float) -> None:
    assert value(stack, path) == pytest.approx(expected, abs=1e-3)


def test_time_to_first_token_quantile_of_a_busy_and_an_idle_server(stack: AdapterProcess) -> None:
    # The busy pod's buckets grow in the file's proportions, so its p95 is the file's, whatever the rate.
    assert value(stack, "pods/llama-7d9f8-abcde/vllm:time_to_first_token_seconds_p95") == pytest.approx(TTFT_P95,
                                                                                                      abs=2e-3)
    assert value(stack, "pods/llama-7d9f8-fghij/vllm:time_to_first_token_seconds_p95") == 0.0
    assert value(stack, "deployments.apps/llama/vllm:time_to_first_token_seconds_p95") == pytest.approx(TTFT_P95,
                                                                                                      abs=2e-3)


def test_triton_queue_time_rate(stack: AdapterProcess) -> None:
    # Exact figures are promtool's test above; here, the counter's rate reaches the HPA per pod and per Deployment.
    assert value(stack, "pods/triton-6f5e4-pqrst/nv_inference_queue_duration_us_per_second") > 0
    assert value(stack, "deployments.apps/triton/nv_inference_queue_duration_us_per_second") > 0


def test_statefulset_pod_has_no_deployment_value_and_unknown_objects_are_not_found(stack: AdapterProcess) -> None:
    assert value(stack, "pods/sglang-0/sglang:num_running_reqs") == 12.0
    response = stack.get(f"{BASE}/namespaces/{NAMESPACE}/deployments.apps/sglang/sglang:num_running_reqs")
    assert response.status_code == 404 and response.json()["kind"] == "Status"
