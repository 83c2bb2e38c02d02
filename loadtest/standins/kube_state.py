"""A stand-in for kube-state-metrics' owner series, served by the demo: what the per-Deployment rules (the
inference presets' pod -> Deployment recording rule, the ``capacity-headroom`` preset's Object metric) join on.

``kube_pod_owner{namespace, pod, uid, owner_kind, owner_name, owner_is_controller}`` for each pod and
``kube_replicaset_owner{namespace, replicaset, owner_kind, owner_name, owner_is_controller}`` for each
ReplicaSet, value 1, with the names and labels of kube-state-metrics' ``docs/metrics/workload/pod-metrics.md`` and
``replicaset-metrics.md``. Each Deployment has one ReplicaSet, ``<deployment>-<hash>``; ``owners`` is called at every
scrape and returns ``{deployment: [pod names]}``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["KubeStateMetrics", "OwnerSeries", "replicaset_name"]

Owners = Callable[[], Mapping[str, Sequence[str]]]


def replicaset_name(deployment: str) -> str:
    """``<deployment>-<10 hex digits>``, shaped like the pod-template hash a Deployment's ReplicaSet is named by."""
    return f"{deployment}-{hashlib.sha1(deployment.encode()).hexdigest()[:10]}"


class OwnerSeries(Collector):
    def __init__(self, namespace: str, owners: Owners) -> None:
        self.namespace = namespace
        self.owners = owners

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pods = GaugeMetricFamily("kube_pod_owner", "Information about the Pod's owner.",
                                 labels=["namespace", "pod", "uid", "owner_kind", "owner_name", "owner_is_controller"])
        sets = GaugeMetricFamily("kube_replicaset_owner", "Information about the ReplicaSet's owner.",
                                 labels=["namespace", "replicaset", "owner_kind", "owner_name", "owner_is_controller"])
        for deployment, names in sorted(self.owners().items()):
            rs = replicaset_name(deployment)
            sets.add_metric([self.namespace, rs, "Deployment", deployment, "true"], 1)
            for pod in names:
                uid = hashlib.sha1(f"{self.namespace}/{pod}".encode()).hexdigest()
                pods.add_metric([self.namespace, pod, uid, "ReplicaSet", rs, "true"], 1)
        yield pods
        yield sets


class KubeStateMetrics:
    """``GET /metrics`` on 127.0.0.1 (prometheus_client's own HTTP server, in a thread); ``start()`` returns the
    port."""

    def __init__(self, namespace: str, owners: Owners) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(OwnerSeries(namespace, owners))
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        self._server, self._thread = start_http_server(0, "127.0.0.1", self.registry)
        return int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5.0)
