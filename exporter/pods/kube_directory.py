"""Pods on this node from the Kubernetes API, kept current by a watch (list once, then watch; relist on 410).

Serves two readers: ``--pod-identity-source kubernetes-api`` (pod UID / container ID -> pod, for GPU processes)
and ``--kubernetes-enable-pod-labels`` / ``--kubernetes-enable-pod-uid`` (namespace/name -> UID and labels).
Only pods bound to ``$NODE_NAME`` are watched when it is set (``fieldSelector=spec.nodeName=<node>``; RBAC:
``list`` and ``watch`` on ``pods``). A collection only reads the last published tables: it never waits for the API
server, and nothing is listed per scrape.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from exporter.pods.directory import PodName
from exporter.pods.mapping import PodRef

log = logging.getLogger("exporter.kube_pod_directory")


@dataclass(frozen=True)
class PodMeta:
    """What the exporter keeps of one pod object."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    containers: Mapping[str, str] = field(default_factory=dict)  # runtime container ID -> container name


def pod_meta(obj: Mapping[str, Any]) -> PodMeta | None:
    """A Pod JSON object -> :class:`PodMeta` (pure); None without name, namespace or UID.

    Container IDs in the status are ``<runtime>://<id>``; the cgroup path carries only ``<id>``.
    """
    meta = obj.get("metadata") or {}
    uid, name, namespace = meta.get("uid"), meta.get("name"), meta.get("namespace")
    if not (uid and name and namespace):
        return None
    containers: dict[str, str] = {}
    status = obj.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for container in status.get(key) or []:
            container_id = (container.get("containerID") or "").rpartition("://")[2]
            if container_id and container.get("name"):
                containers[container_id] = container["name"]
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return PodMeta(namespace, name, uid, labels, containers)


@dataclass(frozen=True)
class PodTables:
    """Lookup tables over one set of pods, built once per change and then only read."""

    by_uid: Mapping[str, PodMeta] = field(default_factory=dict)
    by_name: Mapping[tuple[str, str], PodMeta] = field(default_factory=dict)
    by_container: Mapping[str, PodRef] = field(default_factory=dict)

    @classmethod
    def of(cls, pods: Iterable[PodMeta]) -> PodTables:
        by_uid: dict[str, PodMeta] = {}
        by_name: dict[tuple[str, str], PodMeta] = {}
        by_container: dict[str, PodRef] = {}
        for pod in pods:
            by_uid[pod.uid] = pod
            by_name[(pod.namespace, pod.name)] = pod
            for container_id, container in pod.containers.items():
                by_container[container_id] = PodRef(pod.name, pod.namespace, container)
        return cls(by_uid, by_name, by_container)


class PodSource(Protocol):
    """The two API calls the directory makes; :class:`ApiPodSource` makes them through the official client."""

    def list(self) -> Mapping[str, Any]: ...

    def watch(self, resource_version: str) -> Iterator[Mapping[str, Any]]: ...

    def stop(self) -> None: ...


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class KubernetesApiDirectory:
    """Pods on one node, listed once and then watched on a thread; lookups read the last published tables."""

    def __init__(self, node_name: str | None, source: PodSource, *, retry_max_s: float = 30.0) -> None:
        self.node_name = node_name
        self._source = source
        self.retry_max_s = retry_max_s
        self._pods: dict[str, PodMeta] = {}  # by UID; only the watch thread writes it
        self._tables = PodTables()
        self._resource_version: str | None = None
        self._last_error: str | None = None
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_api_client(cls, api_client: Any, node_name: str | None,
                        timeout_s: float = 5.0) -> KubernetesApiDirectory:
        return cls(node_name, ApiPodSource(api_client, node_name, timeout_s))

    # -- lookups (any thread) ----------------------------------------------------------------------------------
    def pod(self, uid: str) -> PodName | None:
        found = self._tables.by_uid.get(uid)
        return None if found is None else PodName(found.namespace, found.name)

    def container(self, container_id: str) -> PodRef | None:
        return self._tables.by_container.get(container_id)

    def by_name(self, namespace: str, name: str) -> PodMeta | None:
        return self._tables.by_name.get((namespace, name))

    # -- the watch thread --------------------------------------------------------------------------------------
    def start(self, wait_s: float = 5.0) -> None:
        """Start watching; waits up to ``wait_s`` for the first list so the first collection has pod data."""
        self._thread = threading.Thread(target=self._run, name="pod-directory", daemon=True)
        self._thread.start()
        self.synced.wait(wait_s)

    def stop(self) -> None:
        self._stop.set()
        self._source.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                if self._resource_version is None:
                    self.relist()
                for event in self._source.watch(self._resource_version or ""):
                    self.apply(event)
                    if self._stop.is_set():
                        return
                delay = 1.0  # the watch ended normally (its timeout); watch again from where it stopped
            except Gone:
                self._resource_version = None  # too old: list again at once
                continue
            except Exception as exc:  # the client raises ApiException, urllib3 and OSError variants
                if self._stop.is_set():  # stop() cut the watch's connection
                    return
                self._failed(exc)
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.retry_max_s)

    def relist(self) -> None:
        """Replace every pod with a fresh list and remember its resourceVersion (where the watch starts)."""
        doc = self._source.list()
        pods = (pod_meta(item) for item in doc.get("items") or [])
        self._pods = {p.uid: p for p in pods if p is not None}
        self._publish()
        self._resource_version = str((doc.get("metadata") or {}).get("resourceVersion") or "") or None
        self.synced.set()
        self._recovered()

    def apply(self, event: Mapping[str, Any]) -> None:
        """One watch event: ADDED/MODIFIED/DELETED change the tables, BOOKMARK only moves the resourceVersion."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(obj.get("message", "resource version too old"))
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self._resource_version = str(rv)
        if kind == "BOOKMARK":
            return
        pod = pod_meta(obj)
        if pod is None:
            return
        if kind == "DELETED":
            self._pods.pop(pod.uid, None)
        else:
            self._pods[pod.uid] = pod
        self._publish()
        self._recovered()

    def _publish(self) -> None:
        self._tables = PodTables.of(self._pods.values())  # one assignment: readers see old or new, never half

    def _failed(self, exc: BaseException) -> None:
        message = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        if message != self._last_error:
            log.warning("watching pods on %s failed, keeping the last known pods and retrying: %s",
                        f"node {self.node_name}" if self.node_name else "all nodes", message)
        self._last_error = message

    def _recovered(self) -> None:
        if self._last_error is not None:
            log.info("watching pods on %s works again", f"node {self.node_name}" if self.node_name else "all nodes")
        self._last_error = None


class ApiPodSource:
    """``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`` (list, then watch) through the official client."""

    def __init__(self, api_client: Any, node_name: str | None, timeout_s: float = 5.0,
                 watch_timeout_s: int = 300) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._field_selector = f"spec.nodeName={node_name}" if node_name else None
        self._timeout_s = timeout_s
        self._watch_timeout_s = watch_timeout_s
        self._watch: Any = None

    def list(self) -> Mapping[str, Any]:
        response = self._core.list_pod_for_all_namespaces(field_selector=self._field_selector, _preload_content=False,
                                                          _request_timeout=self._timeout_s)
        return json.loads(response.data)

    def watch(self, resource_version: str) -> Iterator[Mapping[str, Any]]:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        class RawWatch(watch.Watch):  # events as plain JSON: the client's models validate strictly and cost CPU
            def get_return_type(self, func: Any) -> None:
                return None

        self._watch = RawWatch()
        try:
            # timeout_seconds: the server ends the watch cleanly; the read timeout catches a silently dead peer.
            yield from self._watch.stream(
                self._core.list_pod_for_all_namespaces, field_selector=self._field_selector,
                resource_version=resource_version,
                allow_watch_bookmarks=True, timeout_seconds=self._watch_timeout_s,
                _request_timeout=(self._timeout_s, self._watch_timeout_s + 30))
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(str(exc.reason)) from None
            raise

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()
