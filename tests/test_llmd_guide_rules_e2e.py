"""llm-d's "Autoscaling Workloads with HPA and EPP Metrics" guide, its prometheus-adapter rules as published
(tests/data/gateway/llm-d-epp-adapter-values.yaml): refused with a message that names the fix, and, fixed that way,
served through a real Prometheus and the real ``kubectl get --raw``, as the guide tells its readers to check."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from adapter.rules import RulesError
from adapter.rulesfile.loader import load_rules
from tests.support.adapter_process import AdapterProcess
from tests.support.kubectl import kubectl_get_raw
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parent / "data" / "gateway"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
MOVE = ("'namespaced' belongs one level up, as externalRules[{i}].resources.namespaced: false (honoured for "
        "externalRules only: false keeps the HPA's namespace out of the query)")


def guide_values() -> dict:
    return yaml.safe_load((DATA / "llm-d-epp-adapter-values.yaml").read_text())


def rules_file(external: list[dict], path: Path) -> Path:
    """The rules file the prometheus-adapter chart renders from the values: rules.external -> externalRules."""
    path.write_text(yaml.safe_dump({"externalRules": external}, sort_keys=False))
    return path


def fixed(external: list[dict]) -> list[dict]:
    """Each rule with ``namespaced`` moved where the message says."""
    out = []
    for rule in external:
        rule = json.loads(json.dumps(rule))
        rule["resources"]["namespaced"] = rule["resources"]["overrides"].pop("namespaced")
        out.append(rule)
    return out


def test_the_values_file_itself_is_named_for_what_it_is(tmp_path: Path) -> None:
    with pytest.raises(RulesError) as caught:
        load_rules(DATA / "llm-d-epp-adapter-values.yaml")
    assert "rules: must be a list, not a mapping; this is the prometheus-adapter Helm chart's values layout" in str(
        caught.value)
    assert "(rules.external -> externalRules)" in str(caught.value)


def test_the_published_rules_are_refused_with_the_fix(tmp_path: Path) -> None:
    path = rules_file(guide_values()["rules"]["external"], tmp_path / "rules.yaml")
    with pytest.raises(RulesError) as caught:
        load_rules(path)
    assert str(caught.value) == (f"{path}: externalRules[0].resources.overrides.namespaced: must be a mapping, not "
                                 "false; each key of 'overrides' is a label, mapped to {group, resource}: "
                                 + MOVE.format(i=0))
    # The adapter does not start on them, and says the same in one line.
    proc = subprocess.run([sys.executable, "-m", "adapter", "serve", "--prometheus-url", "http://127.0.0.1:9",
                           "--config", str(path), "--disable-auth", "--bind-address", "127.0.0.1",
                           "--secure-port", str(free_port()), "--cert-dir", str(tmp_path / "certs")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert MOVE.format(i=0) in proc.stdout + proc.stderr and "Traceback" not in proc.stdout + proc.stderr
    # Each rule has the slip: with the first fixed, the second is named.
    first_fixed = [*fixed(guide_values()["rules"]["external"])[:1], guide_values()["rules"]["external"][1]]
    with pytest.raises(RulesError, match=r"externalRules\[1\]\.resources\.overrides\.namespaced: .*"
                                         r"externalRules\[1\]\.resources\.namespaced: false"):
        load_rules(rules_file(first_fixed, tmp_path / "half.yaml"))


@pytest.fixture(scope="module")
def guide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AdapterProcess, Path]]:
    tmp = tmp_path_factory.mktemp("llmd-guide")
    # The guide's pool: its EPP in namespace default, scraped with the target labels its running-requests rule
    # selects on (top_level_controller_name is a target label Google Managed Prometheus's PodMonitoring adds).
    labels = {"namespace": "default", "pod": "vllm-llama3-8b-instruct-epp-6b7c9d-x2k4p",
              "top_level_controller_name": "vllm-llama3-8b-instruct-epp", "top_level_controller_type": "Deployment"}
    rules = rules_file(fixed(guide_values()["rules"]["external"]), tmp / "rules.yaml")
    with (MetricsEndpoint((DATA / "gaie-v1.5-guide-pool.prom").read_text()) as endpoint,
          PrometheusServer([(endpoint.address, labels)], job="epp") as prom):
        prom.wait_for("inference_objective_running_requests", timeout=30)
        with AdapterProcess(prom.url, str(tmp / "certs"), ["--config", str(rules),
                                                           "--metrics-relist-interval", "1s"]) as adapter:
            yield adapter, tmp


def kubectl_json(adapter: AdapterProcess, tmp: Path, path: str) -> dict:
    out = kubectl_get_raw(adapter.url, tmp, path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_fixed_rules_list_the_guides_metrics(guide) -> None:
    adapter, tmp = guide
    names = {r["name"] for r in kubectl_json(adapter, tmp, EXTERNAL)["resources"]}
    assert {"epp_queue_size", "epp_running_requests"} <= names


@pytest.mark.parametrize(("metric", "value"), [("epp_queue_size", "12"), ("epp_running_requests", "37")])
@pytest.mark.parametrize("namespace", ["default", "prod"])
def test_the_guides_checks_answer_from_any_namespace(guide, metric: str, value: str, namespace: str) -> None:
    # The guide's own check (namespace default); with namespaced: false where prometheus-adapter reads it, an HPA in
    # any namespace gets the pool's value (the guide's queries name the pool themselves).
    adapter, tmp = guide
    answer = kubectl_json(adapter, tmp, f"{EXTERNAL}/namespaces/{namespace}/{metric}")
    assert answer["kind"] == "ExternalMetricValueList"
    [item] = answer["items"]
    assert (item["metricName"], item["value"]) == (metric, value)
