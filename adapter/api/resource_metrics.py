"""Kubernetes JSON for ``metrics.k8s.io/v1beta1`` (``NodeMetrics``, ``PodMetrics``) and its paths (pure).

Quantities as metrics-server writes them: cpu from nanocores in canonical DecimalSI (``"250m"``,
``"123456789n"``), memory from whole bytes in canonical BinarySI (``"1Gi"``, ``"1536"``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from adapter.api.serialise import rfc3339
from clikit.quantity import format_quantity

RESOURCE_GROUP = "metrics.k8s.io"
RESOURCE_VERSION = "v1beta1"
GROUP_VERSION = f"{RESOURCE_GROUP}/{RESOURCE_VERSION}"
_BINARY = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


def cpu_quantity(cores: float) -> str:
    """Cores to whole nanocores (truncated, as metrics-server's uint64 nanocores), canonical DecimalSI."""
    return format_quantity(Decimal(math.floor(cores * 1e9)).scaleb(-9))


def memory_quantity(value: float) -> str:
    """Bytes (truncated to whole bytes), canonical BinarySI: the largest binary suffix that divides exactly;
    below 1024 or not divisible by 1024, plain bytes."""
    whole = math.floor(value)
    if abs(whole) >= 1024:
        for suffix, shift in _BINARY:
            if whole % (1 << shift) == 0:
                return f"{whole >> shift}{suffix}"
    return str(whole)


@dataclass(frozen=True)
class Usage:
    cpu_cores: float
    memory_bytes: float
    timestamp: float

    def body(self) -> dict[str, str]:
        return {"cpu": cpu_quantity(self.cpu_cores), "memory": memory_quantity(self.memory_bytes)}


@dataclass(frozen=True)
class NodeUsage:
    name: str
    usage: Usage
    labels: Mapping[str, str] = field(default_factory=dict)  # the Node's, as metrics-server copies them


@dataclass(frozen=True)
class PodUsage:
    namespace: str
    name: str
    containers: tuple[tuple[str, Usage], ...]  # by container name
    labels: Mapping[str, str] = field(default_factory=dict)  # the Pod's, as metrics-server copies them

    @property
    def timestamp(self) -> float:
        return min(u.timestamp for _, u in self.containers)


def _window(window_s: float) -> str:
    """metav1.Duration's Go form (``5m0s``, ``30s``, ``1h0m0s``)."""
    seconds = round(window_s, 3)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    sec_text = f"{secs:g}s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{sec_text}"
    if minutes:
        return f"{int(minutes)}m{sec_text}"
    return sec_text


def _meta(name: str, namespace: str | None, labels: Mapping[str, str], now: float | None) -> dict[str, Any]:
    """metrics-server's (and prometheus-adapter's) object metadata: the object's labels, and the time of the
    answer as ``creationTimestamp`` (these objects are made per request)."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["creationTimestamp"] = rfc3339(time.time() if now is None else now)
    if labels:
        meta["labels"] = dict(labels)
    return meta


def node_metrics(node: NodeUsage, window_s: float, now: float | None = None) -> dict[str, Any]:
    return {"kind": "NodeMetrics", "apiVersion": GROUP_VERSION, "metadata": _meta(node.name, None, node.labels, now),
            "timestamp": rfc3339(node.usage.timestamp), "window": _window(window_s), "usage": node.usage.body()}


def pod_metrics(pod: PodUsage, window_s: float, now: float | None = None) -> dict[str, Any]:
    return {"kind": "PodMetrics", "apiVersion": GROUP_VERSION,
            "metadata": _meta(pod.name, pod.namespace, pod.labels, now),
            "timestamp": rfc3339(pod.timestamp), "window": _window(window_s),
            "containers": [{"name": name, "usage": usage.body()} for name, usage in pod.containers]}


def metrics_list(kind: str, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": f"{kind}List", "apiVersion": GROUP_VERSION, "metadata": {}, "items": list(items)}


def resource_list() -> dict[str, Any]:
    """Discovery for the group: what metrics-server lists (``nodes`` and ``pods``, get and list)."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
            "resources": [{"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics",
                           "verbs": ["get", "list"]},
                          {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics",
                           "verbs": ["get", "list"]}]}


@dataclass(frozen=True)
class ResourcePath:
    resource: str  # "nodes" or "pods"
    namespace: str | None
    name: str | None


def parse_resource_path(rest: str) -> ResourcePath | None:
    """``nodes``, ``nodes/N``, ``pods`` (all namespaces),
    ``namespaces/NS/pods[/P]``; ``None`` for anything else."""
    parts = [p for p in rest.split("/") if p] if rest else []
    if parts == ["pods"]:
        return ResourcePath("pods", None, None)
    if parts and parts[0] == "nodes" and len(parts) <= 2:
        return ResourcePath("nodes", None, parts[1] if len(parts) == 2 else None)
    if len(parts) in (3, 4) and parts[0] == "namespaces" and parts[2] == "pods":
        return ResourcePath("pods", parts[1], parts[3] if len(parts) == 4 else None)
    return None


_FIELDS = ("metadata.name", "metadata.namespace")


def parse_field_selector(text: str) -> tuple[tuple[str, bool, str], ...]:
    """``metadata.name``/``metadata.namespace`` with ``=``, ``==`` or ``!=``, as (field, equal, value);
    anything else raises ``ValueError`` naming the term."""
    return tuple(_field_term(t.strip()) for t in text.split(",")) if text else ()


def _field_term(term: str) -> tuple[str, bool, str]:
    op = next((op for op in ("!=", "==", "=") if op in term), None)
    if op is None:
        raise ValueError(f"invalid field selector term {term!r}")
    field, value = (s.strip() for s in term.split(op, 1))
    if field not in _FIELDS:  # the generic API server's words for a type without its own field labels
        raise ValueError(f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"')
    return field, op != "!=", value


def field_matches(terms: Sequence[tuple[str, bool, str]], name: str, namespace: str | None) -> bool:
    values = {"metadata.name": name, "metadata.namespace": namespace or ""}
    return all((values[field] == value) == equal for field, equal, value in terms)
