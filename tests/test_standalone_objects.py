"""--standalone-objects: label selectors answered from a file when there is no Kubernetes API."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

from adapter.api.status import ApiError
from adapter.kube.standalone import ObjectsFileError, StandaloneObjects, parse_objects
from adapter.rules import normalise_resource
from adapter.rules.selectors import parse_selector

pytestmark = pytest.mark.unit

PODS = normalise_resource("pods")


def _write(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) if not isinstance(data, str) else data)
    os.replace(tmp, path)


def _names(objects: StandaloneObjects, selector: str, namespace: str | None = "demo", gr=PODS):  # type: ignore[no-untyped-def]
    return asyncio.run(objects.names(gr, namespace, parse_selector(selector)))


def test_selectors_follow_the_file_as_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "objects.json"
    _write(path, {"pods": [{"namespace": "demo", "name": "infer-0", "labels": {"app": "infer"}},
                           {"namespace": "demo", "name": "other", "labels": {"app": "db"}},
                           {"namespace": "prod", "name": "infer-9", "labels": {"app": "infer"}}]})
    objects = StandaloneObjects(str(path))
    assert _names(objects, "app=infer") == ["infer-0"]
    assert _names(objects, "app in (infer,db)") == ["infer-0", "other"]
    assert _names(objects, "") == ["infer-0", "other"]
    _write(path, {"pods": [{"namespace": "demo", "name": f"infer-{i}", "labels": {"app": "infer"}} for i in range(3)]})
    assert _names(objects, "app=infer") == ["infer-0", "infer-1", "infer-2"]


def test_a_bad_rewrite_keeps_the_last_good_objects(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "objects.json"
    _write(path, {"pods": [{"namespace": "demo", "name": "infer-0", "labels": {"app": "infer"}}]})
    objects = StandaloneObjects(str(path))
    _write(path, {"pods": [{"namespace": "demo", "labels": {"app": "infer"}}]})
    assert _names(objects, "app=infer") == ["infer-0"]
    assert "pods[0]: each object needs a non-empty string 'name'" in caplog.text


def test_resources_not_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "objects.yaml"
    path.write_text("pods: []\n")
    objects = StandaloneObjects(str(path))
    services = normalise_resource("services")
    assert _names(objects, "", gr=services) is None, "no selector: every object that has series"
    with pytest.raises(ApiError) as err:
        _names(objects, "app=x", gr=services)
    assert err.value.code == 400 and "objects.yaml" in err.value.message


def test_missing_file_is_503_with_the_reason(tmp_path: Path) -> None:
    objects = StandaloneObjects(str(tmp_path / "absent.json"))
    with pytest.raises(ApiError) as err:
        _names(objects, "app=x")
    assert err.value.code == 503 and "absent.json" in err.value.message


@pytest.mark.parametrize(("text", "message"), [
    ("[1, 2]", "expected a mapping"),
    ('{"pods": {"name": "x"}}', "pods: expected a list"),
    ('{"pods": [{"name": "x", "labels": {"a": 1}}]}', "pods[0]: 'labels' must map strings to strings"),
    ('{"pods": [{"name": "x", "namespace": 3}]}', "pods[0]: 'namespace' must be a string"),
    ("{not json", "not valid JSON/YAML"),
])
def test_parse_errors_name_the_entry(text: str, message: str) -> None:
    with pytest.raises(ObjectsFileError, match=re.escape(message)):
        parse_objects(text, "objects.json")


def test_namespaces_cluster_scoped_objects_labels_and_repeated_names(tmp_path: Path) -> None:
    path = tmp_path / "objects.yaml"
    path.write_text(
        "pods:\n"
        "- {namespace: demo, name: infer-1, labels: {app: infer, track: canary}}\n"
        "- {namespace: demo, name: infer-0, labels: {app: infer}}\n"
        "- {namespace: demo, name: infer-0, labels: {app: infer, track: stable}}\n"  # listed twice: the last wins
        "- {name: stray, labels: {app: infer}}\n"
        "nodes:\n"
        "- {name: gpu-node-b, labels: {pool: gpu}}\n"
        "- {name: gpu-node-a, labels: {pool: gpu}}\n"
        "- {name: cpu-node, labels: {pool: cpu}}\n")
    objects = StandaloneObjects(str(path))
    nodes = normalise_resource("nodes")
    assert _names(objects, "app=infer") == ["infer-0", "infer-1"]
    assert _names(objects, "app=infer,track!=canary") == ["infer-0"]
    assert _names(objects, "track") == ["infer-0", "infer-1"]
    assert _names(objects, "app=infer", namespace=None) == ["stray"], "no namespace: only objects listed without one"
    assert _names(objects, "pool=gpu", namespace=None, gr=nodes) == ["gpu-node-a", "gpu-node-b"]
    assert _names(objects, "", namespace=None, gr=nodes) == ["cpu-node", "gpu-node-a", "gpu-node-b"]
    assert _names(objects, "pool=gpu", gr=nodes) == [], "nodes have no namespace"
    labels = asyncio.run(objects.labels(PODS, "demo", ["infer-0", "missing", "stray"]))
    assert labels == {"infer-0": {"app": "infer", "track": "stable"}}
    assert asyncio.run(objects.labels(nodes, None, ["cpu-node"])) == {"cpu-node": {"pool": "cpu"}}
