"""Validate Kubernetes manifests offline, the way a cluster would, with the real tools where there are some.

* Built-in kinds: the ``kubernetes-validate`` package's schemas for each Kubernetes version we support, in strict
  mode (unknown fields are errors).
* Custom resources: the published CRDs vendored under ``schemas/crds`` (see ``schemas/SOURCES.md``), with unknown
  fields rejected as server-side strict field validation does; cert-manager kinds against a minimal hand-written
  schema (labelled as such).
* ``kubectl kustomize`` and ``helm`` are the real binaries from ``.tools/bin`` (``scripts/install-tools.sh``).
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.support.tools import require_tool

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = Path(__file__).resolve().parent / "schemas"
KUBE_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33")

# (apiVersion, kind) -> (vendored CRD file, served version)
CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
    ("karpenter.sh/v1", "NodePool"): "karpenter.sh_nodepools.yaml",
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): "karpenter.k8s.aws_ec2nodeclasses.v1.yaml",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_scaledobjects.yaml",
    ("keda.sh/v1alpha1", "ClusterTriggerAuthentication"): "keda.sh_clustertriggerauthentications.yaml",
    ("autoscaling.x-k8s.io/v1alpha1", "CapacityBuffer"): "autoscaling.x-k8s.io_capacitybuffers.yaml",
    ("autoscaling.x-k8s.io/v1beta1", "CapacityBuffer"): "autoscaling.x-k8s.io_capacitybuffers.yaml",
}
# Other published CRDs of a kind in CRDS, for checks against every project that serves it.
OTHER_CRDS = {
    ("autoscaling.x-k8s.io/v1beta1", "CapacityBuffer"): ("autoscaling.x-k8s.io_capacitybuffers.karpenter.yaml",),
}
CERT_MANAGER_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}


def tool(name: str) -> str:
    """Absolute path of helm/kubectl/promtool, by the suite's one missing-tool policy (tests/support/tools.py)."""
    return require_tool(name)


def run(args: list[str], cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def load_documents(text: str) -> list[dict[str, Any]]:
    """Every non-empty YAML document, expanding ``List`` objects."""
    docs: list[dict[str, Any]] = []
    # libyaml's safe loader: the same documents as yaml.safe_load_all, about ten times faster on a rendered chart.
    for doc in yaml.load_all(text, Loader=yaml.CSafeLoader):
        if not doc:
            continue
        if doc.get("kind") == "List":
            docs.extend(item for item in doc.get("items", []) if item)
        else:
            docs.append(doc)
    return docs


def load_files(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs.extend(load_documents(path.read_text()))
    return docs


def kustomize(directory: Path) -> list[dict[str, Any]]:
    return load_documents(run([tool("kubectl"), "kustomize", str(directory)]).stdout)


def name_of(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata", {})
    where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
    return f"{doc.get('kind')} {where}{meta.get('name')}"


@functools.cache
def _crd_schema(filename: str, api_version: str) -> dict[str, Any]:
    return _strict(crd_schema(filename, api_version))


def _strict(schema: Any) -> Any:
    """A CRD's structural schema as JSON Schema that rejects unknown fields (server-side strict validation)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items() if not key.startswith("x-kubernetes-")}
    if "properties" in out and "additionalProperties" not in out \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if "properties" in out:
        # The properties map's own keys are field names, not schema keywords.
        out["properties"] = {name: _strict(sub) for name, sub in schema["properties"].items()}
    return out


@functools.cache
def _cert_manager_schemas() -> dict[str, Any]:
    return json.loads((SCHEMAS / "cert-manager-minimal.json").read_text())


def _validate_metadata(doc: dict[str, Any]) -> list[str]:
    errors = []
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        errors.append(f"{name_of(doc)}: metadata.name is missing")
    return errors


def crd_schema(filename: str, api_version: str) -> dict[str, Any]:
    """The served version's ``openAPIV3Schema`` of a vendored CRD as it is published (not made strict)."""
    crd = yaml.safe_load((SCHEMAS / "crds" / filename).read_text())
    version = api_version.split("/")[1]
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return entry["schema"]["openAPIV3Schema"]
    raise KeyError(f"{filename} does not serve {api_version}")


def _crd_errors(doc: dict[str, Any], filename: str) -> list[str]:
    validator = jsonschema.Draft7Validator(_crd_schema(filename, doc["apiVersion"]))
    return [f"{name_of(doc)} ({filename}): {'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(copy.deepcopy(doc))]


def validate(doc: dict[str, Any], versions: Iterable[str] = KUBE_VERSIONS) -> list[str]:
    """Errors for one object against every Kubernetes version in ``versions`` (empty when valid). The same object
    is rendered again by many tests (a chart's RBAC, Services, ConfigMaps under other values): each is checked once
    per process (kubernetes-validate reads and parses its whole definitions file at every call, about 15 ms)."""
    return list(_validate(json.dumps(doc, sort_keys=True), tuple(versions)))


@functools.lru_cache(maxsize=4096)
def _validate(doc_json: str, versions: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_validate_uncached(json.loads(doc_json), versions))


def _validate_uncached(doc: dict[str, Any], versions: Iterable[str]) -> list[str]:
    key = (doc.get("apiVersion"), doc.get("kind"))
    errors = _validate_metadata(doc)
    if key in CRDS:
        for filename in (CRDS[key], *OTHER_CRDS.get(key, ())):  # type: ignore[index]
            errors += _crd_errors(doc, filename)
        return errors
    if key in CERT_MANAGER_KINDS:
        validator = jsonschema.Draft7Validator(_cert_manager_schemas()[key[1]])
        return errors + [f"{name_of(doc)} (minimal schema): {'.'.join(map(str, e.absolute_path))}: {e.message}"
                         for e in validator.iter_errors(doc)]
    for version in versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{name_of(doc)} on Kubernetes {version}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{name_of(doc)}: {exc.message}")
    return errors


def validate_all(docs: Iterable[dict[str, Any]], versions: Iterable[str] = KUBE_VERSIONS) -> list[str]:
    versions = tuple(versions)
    errors: list[str] = []
    for doc in docs:
        errors.extend(validate(doc, versions))
    return errors


def find(docs: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[name_of(d) for d in found]}"
    return found[0]
