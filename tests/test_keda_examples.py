"""The ScaledObjects we publish (hpa-examples/keda-vllm-gateway-queue.yaml and those in docs/keda.md) validate against
KEDA's ScaledObject CRD (kedacore/keda v2.20.2, vendored: tests/support/schemas/SOURCES.md), their triggers' metadata
is accepted by the scaler, and they point at what the chart renders (the Service and ClusterTriggerAuthentication
of release gpu-autoscaler in gpu-system) and at the workloads they scale."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from adapter.keda.metadata import parse_metadata
from tests.support.k8s_validation import REPO, find, load_documents, one, run, tool, validate, validate_all

pytestmark = pytest.mark.tools

EXAMPLE = REPO / "hpa-examples" / "keda-vllm-gateway-queue.yaml"
GUIDE = REPO / "docs" / "keda.md"
KEDA_TRIGGERS = ("external", "external-push")


def guide_scaled_objects() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), re.S)
    return [doc for block in blocks for doc in load_documents(block) if doc.get("kind") == "ScaledObject"]


def published() -> list[dict[str, Any]]:
    return [*load_documents(EXAMPLE.read_text()), *guide_scaled_objects()]


def test_there_is_one_per_preset_family_and_the_vllm_example() -> None:
    names = [d["metadata"]["name"] for d in published()]
    assert names == ["vllm", "vision-api", "vllm-queue"]
    [vllm] = load_documents(EXAMPLE.read_text())
    assert vllm["spec"]["minReplicaCount"] == 0
    assert [t["type"] for t in vllm["spec"]["triggers"]] == ["external-push", "external"]


@pytest.mark.parametrize("doc", published(), ids=lambda d: d["metadata"]["name"])
def test_valid_against_keda_crd(doc: dict[str, Any]) -> None:
    assert validate_all([doc]) == []


def test_the_crd_check_catches_mistakes() -> None:
    [vllm] = load_documents(EXAMPLE.read_text())
    for path, value, words in ((("spec", "minReplicaCount"), "zero", "is not of type 'integer'"),
                               (("spec", "triggers", 0, "metadata", "targetValue"), 4, "is not of type 'string'"),
                               (("spec", "triggers", 0, "authenticationRef", "namespace"), "keda",
                                "Additional properties are not allowed"),
                               (("spec", "scaleTargetRef", "name"), None, "None is not of type 'string'")):
        broken = copy.deepcopy(vllm)
        where: Any = broken
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value
        errors = validate(broken)
        assert errors and words in " ".join(errors), (path, errors)


@pytest.mark.parametrize("doc", published(), ids=lambda d: d["metadata"]["name"])
def test_every_trigger_is_accepted_by_the_scaler(doc: dict[str, Any]) -> None:
    for trigger in doc["spec"]["triggers"]:
        assert trigger["type"] in KEDA_TRIGGERS
        parse_metadata(trigger["metadata"])  # raises MetadataError naming the key


@pytest.fixture(scope="module")
def chart() -> list[dict[str, Any]]:
    # The release the examples name: gpu-autoscaler in gpu-system, as hpa-examples/README.md installs it.
    proc = run([tool("helm"), "template", "gpu-autoscaler", str(REPO / "charts" / "gpu-autoscaler"), "--namespace",
                "gpu-system", "--set", "adapter.kedaScaler.enabled=true"])
    return load_documents(proc.stdout)


@pytest.mark.tools
@pytest.mark.parametrize("doc", published(), ids=lambda d: d["metadata"]["name"])
def test_they_name_what_the_chart_renders(chart: list[dict[str, Any]], doc: dict[str, Any]) -> None:
    service = one(chart, "Service", "gpu-autoscaler-keda-scaler")
    meta, port = service["metadata"], service["spec"]["ports"][0]["port"]
    address = f"{meta['name']}.{meta['namespace']}.svc:{port}"
    authentication = one(chart, "ClusterTriggerAuthentication")["metadata"]["name"]
    for trigger in doc["spec"]["triggers"]:
        assert trigger["metadata"]["scalerAddress"] == address
        assert trigger["authenticationRef"] == {"name": authentication, "kind": "ClusterTriggerAuthentication"}


def test_they_scale_the_example_workloads() -> None:
    workloads = {d["metadata"]["name"]: d for f in ("vllm.yaml", "vision-api.yaml")
                 for d in find(load_documents((REPO / "hpa-examples" / f).read_text()), "Deployment")}
    for doc in published():
        target = workloads[doc["spec"]["scaleTargetRef"]["name"]]
        assert target["metadata"]["namespace"] == doc["metadata"]["namespace"]
        selector = ",".join(f"{k}={v}" for k, v in target["spec"]["selector"]["matchLabels"].items())
        for trigger in doc["spec"]["triggers"]:
            if trigger["metadata"].get("resource") == "pods":
                assert trigger["metadata"]["labelSelector"] == selector, doc["metadata"]["name"]


def test_the_example_is_plain_yaml_kubectl_would_apply() -> None:
    assert all(isinstance(d, dict) for d in yaml.safe_load_all(EXAMPLE.read_text()))
