"""Reading a cluster for the capacity report, read-only, through the official ``kubernetes`` client: the Deployment,
the namespace's pods, events (events.k8s.io/v1, or core v1 where that is refused or not served), HPAs, the nodes and
Karpenter's NodeClaims; and following them (``--watch``), each object as the API server sends it.

A refused read names the verb and resource it needed (from the API server's 403 Status). The Deployment and the
pods are needed (a one-line error); without the rest the report still gives what it can, with a note each."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from loadtest.hpa.watch import KubeError

__all__ = ["ClusterReader", "Forbidden", "Snapshot"]

PAGE = 500
WATCH_SECONDS = 5  # each watch request ends this often, so a stop is seen; it resumes from its resourceVersion
_CANNOT = re.compile(r'cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"')

Obj = dict[str, Any]
Emit = Callable[[str, str, Obj], None]  # (type, resource, object)


class Forbidden(KubeError):
    """The credentials may not ``verb`` ``resource``: the API server's 403."""

    def __init__(self, verb: str, resource: str, scope: str, message: str) -> None:
        self.verb, self.resource = verb, resource
        super().__init__(f"forbidden: {verb} {resource} {scope} ({message})")


@dataclass(frozen=True)
class _Kind:
    """One resource the report reads: its name in the journal, how RBAC names it, its list call."""

    name: str
    rbac: str  # resource.group, as a Role names it
    namespaced: bool
    listing: Callable[..., Any]
    required: bool = False


def _status(exc: ApiException) -> Obj:
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _refusal(exc: ApiException, verb: str, kind: _Kind, namespace: str) -> Forbidden:
    """The verb and resource from the Status' message (``cannot list resource "events" in API group ...``), else
    what was asked."""
    message = str(_status(exc).get("message") or exc.reason or "Forbidden")
    said = _CANNOT.search(message)
    if said:
        verb = said["verb"]
        resource = said["resource"] + (f".{said['group']}" if said["group"] else "")
    else:
        resource = kind.rbac
    scope = f"in namespace {namespace}" if kind.namespaced else "at the cluster scope"
    return Forbidden(verb, resource, scope, message)


@dataclass
class Snapshot:
    """What one read found: objects by journal resource name, the list's resourceVersion of each, notes."""

    objects: dict[str, list[Obj]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    karpenter: bool | None = False
    events_api: str | None = None
    read: list[str] = field(default_factory=list)  # the reader's keys that answered: what --watch follows


class ClusterReader:
    """Blocking calls; the report is one command, so they run on its thread (``watch`` starts its own)."""

    def __init__(self, api: k8s.ApiClient, namespace: str, deployment: str) -> None:
        self.api, self.namespace, self.deployment = api, namespace, deployment
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        ns = namespace
        self.kinds = {
            "pods": _Kind("pods", "pods", True, lambda **kw: core.list_namespaced_pod(ns, **kw), required=True),
            "events": _Kind("events", "events.events.k8s.io", True,
                            lambda **kw: k8s.EventsV1Api(api).list_namespaced_event(ns, **kw)),
            "core-events": _Kind("events", "events", True, lambda **kw: core.list_namespaced_event(ns, **kw)),
            "nodes": _Kind("nodes", "nodes", False, core.list_node),
            "nodeclaims": _Kind("nodeclaims", "nodeclaims.karpenter.sh", False,
                                lambda **kw: custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims",
                                                                               **kw)),
            "hpas": _Kind("hpas", "horizontalpodautoscalers.autoscaling", True,
                          lambda **kw: k8s.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(ns,
                                                                                                           **kw)),
        }

    def _call(self, verb: str, kind: _Kind, call: Callable[..., Any], **kwargs: Any) -> Obj:
        try:
            response = call(_preload_content=False, _request_timeout=30, **kwargs)
            return dict(json.loads(response.data))
        except ApiException as exc:
            if exc.status == 403:
                raise _refusal(exc, verb, kind, self.namespace) from None
            raise
        except (Urllib3Error, OSError) as exc:
            host = self.api.configuration.host
            raise KubeError(f"cannot reach the API server at {host}: {type(exc).__name__}: {exc}") from None

    def list_objects(self, key: str) -> tuple[list[Obj], str]:
        """Every object of a resource (pages of ``PAGE``), and the list's resourceVersion."""
        kind, token = self.kinds[key], None
        items: list[Obj] = []
        while True:
            page = self._call("list", kind, kind.listing, limit=PAGE, **({"_continue": token} if token else {}))
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, str((page.get("metadata") or {}).get("resourceVersion") or "")

    def deployment_object(self) -> Obj | None:
        kind = _Kind("deployments", "deployments.apps", True, k8s.AppsV1Api(self.api).read_namespaced_deployment)
        try:
            return self._call("get", kind, kind.listing, name=self.deployment, namespace=self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise KubeError(f"get deployment {self.namespace}/{self.deployment}: {exc.status} "
                            f"{_status(exc).get('message', exc.reason)}") from None

    def snapshot(self) -> Snapshot:
        """Read everything once; a refused optional read becomes a note, a refused required one an error."""
        snap = Snapshot()
        found = self.deployment_object()
        if found is None:
            snap.notes.append(f"deployment {self.namespace}/{self.deployment} not found: its pods are those whose "
                              f"ReplicaSet is named {self.deployment}-<hash>")
        else:
            snap.objects["deployments"] = [found]
        for key in ("pods", "events", "nodes", "nodeclaims", "hpas"):
            self._read(key, snap)
        return snap

    def _read(self, key: str, snap: Snapshot) -> None:
        try:
            items, version = self.list_objects(key)
        except Forbidden as exc:
            if self.kinds[key].required:
                raise
            if key == "events":
                snap.notes.append(f"{exc}: reading core v1 events instead")
                self._read("core-events", snap)
                return
            snap.notes.append(f"{exc}: {_WITHOUT[key]}")
            if key == "nodeclaims":
                snap.karpenter = None
            return
        except ApiException as exc:
            if exc.status == 404 and key == "nodeclaims":
                snap.karpenter = False
                return
            if exc.status == 404 and key == "events":
                self._read("core-events", snap)
                return
            raise KubeError(f"list {self.kinds[key].rbac}: {exc.status} {_status(exc).get('message', exc.reason)}") \
                from None
        name = self.kinds[key].name
        snap.objects[name], snap.versions[key] = items, version
        snap.read.append(key)
        if key == "nodeclaims":
            snap.karpenter = True
        if name == "events":
            snap.events_api = "core/v1" if key == "core-events" else "events.k8s.io/v1"

    def follow(self, keys: list[str], emit: Emit, stop: threading.Event, versions: dict[str, str]) -> list[str]:
        """Watch ``keys`` (from ``versions``, relisting after a 410) until ``stop``; each event to ``emit``. Returns
        what went wrong, one line each (a watch that fails stops; the others go on)."""
        problems: list[str] = []
        threads = [threading.Thread(target=self._follow_one, args=(key, emit, stop, versions.get(key), problems),
                                    name=f"capacity-watch-{key}", daemon=True) for key in keys]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return problems

    def _follow_one(self, key: str, emit: Emit, stop: threading.Event, version: str | None,
                    problems: list[str]) -> None:
        kind = self.kinds[key]
        while not stop.is_set():
            try:
                if not version:
                    items, version = self.list_objects(key)
                    for item in items:
                        emit("LISTED", kind.name, item)
                for event in self._stream(kind, version, stop):
                    meta = (event.get("object") or {}).get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        emit(event["type"], kind.name, event["object"])
            except ApiException as exc:
                if exc.status == 410:
                    version = None
                    continue
                problems.append(f"watch {kind.rbac}: {exc.status} {_status(exc).get('message', exc.reason)}")
                return
            except KubeError as exc:
                problems.append(f"watch {kind.rbac}: {exc}")
                return
            except (Urllib3Error, OSError) as exc:
                if stop.wait(1.0):
                    return
                problems.append(f"watch {kind.rbac}: {type(exc).__name__}, resumed")

    @staticmethod
    def _stream(kind: _Kind, version: str, stop: threading.Event) -> Iterator[Obj]:
        w = k8s_watch.Watch()
        for event in w.stream(kind.listing, resource_version=version, timeout_seconds=WATCH_SECONDS,
                              allow_watch_bookmarks=True, deserialize=False, _request_timeout=WATCH_SECONDS + 30):
            yield event
            if stop.is_set():
                w.stop()
                return


_WITHOUT = {
    "events": "phases that only events record are unknown",
    "core-events": "phases that only events record are unknown",
    "nodes": "the node's registration and Ready are unknown",
    "nodeclaims": "Karpenter's launch, registration and GPUs are unknown",
    "hpas": "the HPA is taken as the one named by --hpa, else none",
}
