"""Pod UID and container ID -> pod, from the Kubernetes API (``--pod-identity-source kubernetes-api``).

Lists the pods bound to this node (``fieldSelector=spec.nodeName=$NODE_NAME``; RBAC: ``list`` on ``pods``) on its
own thread, so a collection never waits for the API server; a lookup that misses asks for an early refresh.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from exporter.pod_directory import PodName
from exporter.pod_mapping import PodRef

log = logging.getLogger("exporter.kube_pod_directory")

Tables = tuple[dict[str, PodName], dict[str, PodRef]]


def tables_from_pod_list(doc: Mapping[str, Any]) -> Tables:
    """A ``PodList`` JSON document -> (pod UID -> pod, container ID -> container) (pure).

    Container IDs in the status are ``<runtime>://<id>``; the cgroup path carries only ``<id>``.
    """
    pods: dict[str, PodName] = {}
    containers: dict[str, PodRef] = {}
    for item in doc.get("items") or []:
        meta = item.get("metadata") or {}
        uid, name, namespace = meta.get("uid"), meta.get("name"), meta.get("namespace")
        if not (uid and name and namespace):
            continue
        pods[uid] = PodName(namespace, name)
        status = item.get("status") or {}
        for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
            for container in status.get(key) or []:
                container_id = (container.get("containerID") or "").rpartition("://")[2]
                if container_id and container.get("name"):
                    containers[container_id] = PodRef(name, namespace, container["name"])
    return pods, containers


class KubernetesApiDirectory:
    def __init__(self, node_name: str, list_pods: Callable[[], Mapping[str, Any]], *,
                 refresh_interval_s: float = 30.0, min_refresh_gap_s: float = 2.0) -> None:
        self.node_name = node_name
        self._list_pods = list_pods
        self.refresh_interval_s = refresh_interval_s
        self.min_refresh_gap_s = min_refresh_gap_s
        self._tables: Tables = ({}, {})
        self._last_error: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def in_cluster(cls, node_name: str, timeout_s: float = 5.0) -> KubernetesApiDirectory:
        """Uses the pod's service account (``kubernetes.config.load_incluster_config``)."""
        from kubernetes import client, config

        config.load_incluster_config()
        return cls(node_name, api_pod_lister(client.ApiClient(), node_name, timeout_s))

    def pod(self, uid: str) -> PodName | None:
        found = self._tables[0].get(uid)
        if found is None:
            self._wake.set()
        return found

    def container(self, container_id: str) -> PodRef | None:
        found = self._tables[1].get(container_id)
        if found is None:
            self._wake.set()
        return found

    def refresh_once(self) -> bool:
        """List pods once; on failure keep the previous tables (pods and their UIDs do not change)."""
        try:
            tables = tables_from_pod_list(self._list_pods())
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}".splitlines()[0]
            if message != self._last_error:
                log.warning("listing pods on node %s failed: %s", self.node_name, message)
            self._last_error = message
            return False
        if self._last_error is not None:
            log.info("listing pods on node %s works again", self.node_name)
        self._last_error = None
        self._tables = tables
        return True

    def start(self) -> None:
        self.refresh_once()
        self._thread = threading.Thread(target=self._run, name="pod-directory", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.refresh_interval_s)
            if self._stop.wait(self.min_refresh_gap_s):  # also rate-limits refreshes asked for by misses
                return
            self._wake.clear()
            self.refresh_once()


def api_pod_lister(api_client: Any, node_name: str, timeout_s: float = 5.0) -> Callable[[], Mapping[str, Any]]:
    """``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`` through the official client, as raw JSON."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def list_pods() -> Mapping[str, Any]:
        response = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_name}",
                                                    _preload_content=False, _request_timeout=timeout_s)
        return json.loads(response.data)

    return list_pods
