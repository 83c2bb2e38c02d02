"""A small fake Kubernetes API server on loopback for tests: plain HTTP, one thread per connection.

It serves what the adapter calls and nothing else: LIST/WATCH/GET of objects (with resourceVersions, bookmarks,
compaction and 410 expiry, paging, metadata-only answers), API discovery, TokenReview and SubjectAccessReview, and
403 Forbidden for the requests a test's ``forbid`` names.
Test controls reproduce what a real API server does to its clients: compaction, expired or cut watches, restarts.
Nothing at run time imports this module; it is a pytest plugin (``fake_kube`` fixture).
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import copy
import json
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
import yaml

from adapter.rules.selectors import SelectorError, matches, parse_selector

Obj = dict[str, Any]
Authorizer = Callable[[Obj], "bool | tuple[bool, str]"]


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool = True
    singular: str = ""  # discovery's singularName; real servers leave it empty for many built-in types
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


DEFAULT_TYPES = (
    ResourceType("", "v1", "pods", "Pod", short_names=("po",)),
    ResourceType("", "v1", "services", "Service", short_names=("svc",)),
    ResourceType("", "v1", "configmaps", "ConfigMap"),
    ResourceType("", "v1", "nodes", "Node", namespaced=False),
    ResourceType("", "v1", "namespaces", "Namespace", namespaced=False),
    ResourceType("apps", "v1", "deployments", "Deployment", short_names=("deploy",)),
    ResourceType("apps", "v1", "statefulsets", "StatefulSet"),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet"),
)


class RecordedRequest(NamedTuple):
    method: str
    path: str
    query: dict[str, str]


@dataclass(frozen=True)
class Received:
    """A request as the fake saw it, with its headers (names lowercased); ``requests`` holds it without them."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    client_cn: str = ""  # the common name of the client certificate the connection presented (TLS only)

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


@dataclass(frozen=True)
class _Event:
    rv: int
    rtype: ResourceType
    type: str
    obj: Obj
    prev: Obj | None


@dataclass(eq=False)
class _OpenWatch:
    rtype: ResourceType
    action: str | None = None  # set by a test control: "expire", "drop" or "end"


@dataclass
class _Page:
    items: list[Obj]
    rv: int
    offset: int = 0


def status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                 "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


# -- object builders ---------------------------------------------------------------------------------------------

def pod(namespace: str, name: str, labels: dict[str, str] | None = None, phase: str = "Running", *,
        node_name: str | None = None, uid: str | None = None) -> Obj:
    obj: Obj = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
                "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
                "status": {"phase": phase}}
    if node_name is not None:
        obj["spec"]["nodeName"] = node_name
    if uid is not None:
        obj["metadata"]["uid"] = uid
    return obj


def node(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {}, "status": {}}


def namespace_object(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {}, "status": {"phase": "Active"}}


def deployment(namespace: str, name: str, labels: dict[str, str] | None = None, replicas: int = 1) -> Obj:
    selector = dict(labels or {"app": name})
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": selector},
                                  "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]}}}}


def configmap(namespace: str, name: str, data: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": dict(data)}


# -- request filters ---------------------------------------------------------------------------------------------

_POD_FIELDS = ("spec.nodeName", "status.phase")  # of the pod field labels a real API server accepts


def _field_filter(text: str, resource: str = "") -> Callable[[Obj], bool]:
    """``metadata.name`` / ``metadata.namespace`` (and for pods ``spec.nodeName`` / ``status.phase``) with ``=``,
    ``==``, ``!=`` (what clients use on these objects)."""
    allowed = ("metadata.name", "metadata.namespace", *(_POD_FIELDS if resource == "pods" else ()))
    checks: list[tuple[tuple[str, str], bool, str]] = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        negate = "!=" in term
        key, _, value = term.partition("!=" if negate else "==" if "==" in term else "=")
        if key not in allowed:
            raise SelectorError(f'field label not supported: "{key}"')
        section, _, name = key.partition(".")
        checks.append(((section, name), negate, value))

    def accept(obj: Obj) -> bool:
        return all(((obj.get(section) or {}).get(name, "") == v) != negate for (section, name), negate, v in checks)

    return accept


def _wants_partial(accept: str, as_kind: str) -> bool:
    """Content negotiation: the first media type the server can produce wins; ``as=`` asks for a transformation."""
    for media in accept.split(","):
        parts = [p.strip() for p in media.split(";")]
        if parts[0] not in ("application/json", "application/*", "*/*"):
            continue
        params = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        if "as" not in params:
            return False
        if params["as"] == as_kind and params.get("g") == "meta.k8s.io" and params.get("v") == "v1":
            return True
    return False


def _partial(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": copy.deepcopy(obj["metadata"])}


# -- the HTTP layer ----------------------------------------------------------------------------------------------

class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], fake: FakeKube) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        """With TLS, the connection is wrapped here and its handshake done in the handler's thread (``setup``)."""
        connection, address = super().get_request()
        if self.fake.tls is not None:
            connection = self.fake.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return connection, address

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A response is written as its head, then its body: with Nagle's algorithm on, the body waits for the client's
    # delayed ACK of the head (~40 ms on Linux) on every kept-alive request. kube-apiserver is served by Go's net
    # package, whose TCP connections have Nagle off by default (TCPConn.SetNoDelay: "The default is true").
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        self.handshake_failed = False
        if isinstance(self.request, ssl.SSLSocket):
            try:
                self.request.settimeout(10)
                self.request.do_handshake()
                self.request.settimeout(None)
            except OSError:  # ssl.SSLError included: a refused client certificate ends the connection here
                self.handshake_failed = True
        super().setup()

    def handle(self) -> None:
        if not self.handshake_failed:
            super().handle()

    def client_cn(self) -> str:
        if not isinstance(self.connection, ssl.SSLSocket):
            return ""
        subject = (self.connection.getpeercert() or {}).get("subject") or ()
        return next((value for rdn in subject for key, value in rdn if key == "commonName"), "")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            self.server.fake._handle(self, method, url.path, query, body)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    # -- responses ---------------------------------------------------------------------------------------------
    def send_json(self, code: int, document: Obj) -> None:
        data = json.dumps(document).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_status(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        self.send_json(code, status(code, reason, message, details))

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_event(self, event_type: str, obj: Obj) -> None:
        self.send_chunk(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def abort(self) -> None:
        """Cut the connection mid-stream, in the middle of an event, as a crashing server or a broken proxy does."""
        self.close_connection = True
        try:
            self.send_chunk(b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"truncated-')
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# -- the fake API server -----------------------------------------------------------------------------------------

@dataclass
class FakeKube:
    """The fake server; ``start()`` it (the ``fake_kube`` fixture does), then ``put``/``delete`` objects."""

    host: str = "127.0.0.1"
    port: int = 0
    tokens: dict[str, Obj] = field(default_factory=dict)  # bearer token -> {"username", "uid", "groups", "extra"}
    authorize: Authorizer = field(default=lambda spec: (False, "the fake API server denies by default"))
    require_token: str | None = None  # when set, every request must carry "Authorization: Bearer <token>"
    # HTTPS with this server context (a test's CA and serving certificate; CERT_OPTIONAL or CERT_REQUIRED to ask
    # for client certificates); None: plain HTTP
    tls: ssl.SSLContext | None = None
    require_client_cn: str | None = None  # when set, every request must come with a client certificate of this CN
    bookmark_interval: float | None = 0.5  # seconds between BOOKMARK events on watches that allow them
    honour_metadata_accept: bool = True  # answer PartialObjectMetadata(List) when asked; False: ignore the ask
    expire_with_http_status: bool = False  # a too-old watch answers HTTP 410 instead of 200 + an ERROR event
    default_watch_timeout: float = 1800.0
    preferred_versions: dict[str, str] = field(default_factory=dict)  # group -> version, else the first registered
    # group -> base URL of an aggregated API server (HTTPS, any certificate): the fake forwards GETs under
    # /apis/<group> there and lists the group, as the kube-aggregator does for an APIService
    aggregated: dict[str, str] = field(default_factory=dict)
    # (method, path) -> None to serve the request, or the message of a 403 Forbidden Status (RBAC denying the caller)
    forbid: Callable[[str, str], str | None] = field(default=lambda method, path: None)
    # RBAC the caller lacks, as (verb, group, resource): answered with the 403 Status kube-apiserver writes
    # (``deny``); ``user`` is the name its message gives the caller
    denied: set[tuple[str, str, str]] = field(default_factory=set)
    user: str = "system:serviceaccount:ml:capacity-report"

    def __post_init__(self) -> None:
        self.token_reviews: list[Obj] = []
        self.access_reviews: list[Obj] = []
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._objects: dict[ResourceType, dict[tuple[str, str], Obj]] = {}
        self._history: list[_Event] = []
        self._rv = 1
        self._compacted_rv = 0
        self._pages: dict[str, _Page] = {}
        self._watches: set[_OpenWatch] = set()
        self._cond = threading.Condition()
        self._log: list[Received] = []
        self._log_lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        for rtype in DEFAULT_TYPES:
            self.register(rtype.group, rtype.version, rtype.resource, rtype.kind, rtype.namespaced,
                          rtype.singular, rtype.short_names)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        if self._server is not None:
            return
        with self._cond:
            self._stopping = False
        self._server = _Server((self.host, self.port), self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-kube-server", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and cut every connection; the objects and their history stay (etcd survives)."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        server.shutdown()
        server.close_connections()
        server.server_close()  # joins the connection threads
        thread.join()
        self._server = self._thread = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def write_kubeconfig(self, path: str | Path, token: str = "fake-token", *, user: Obj | None = None,
                         ca_pem: bytes | None = None) -> str:
        """A kubeconfig for this server; ``user`` replaces the user section (an exec plugin, client certificate
        files), ``ca_pem`` is the CA that signed the server's certificate (HTTPS)."""
        cluster: Obj = {"server": self.url}
        if ca_pem is not None:
            cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [{"name": "fake-user", "user": user if user is not None else {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake-user", "namespace": "default"}}],
            "current-context": "fake",
        }
        Path(path).write_text(yaml.safe_dump(config), encoding="utf-8")
        return str(path)

    # -- the object store --------------------------------------------------------------------------------------
    def register(self, group: str, version: str, resource: str, kind: str, namespaced: bool = True,
                 singular: str = "", short_names: tuple[str, ...] = ()) -> ResourceType:
        """Serve a resource type (a CRD installed, when called while running), in discovery too."""
        rtype = ResourceType(group, version, resource, kind, namespaced, singular, short_names)
        with self._cond:
            existing = self._types.setdefault((group, version, resource), rtype)
            self._objects.setdefault(existing, {})
        return existing

    @property
    def resource_version(self) -> int:
        return self._rv

    def put(self, group: str, version: str, resource: str, obj: Obj) -> Obj:
        """Create or update; assigns ``metadata.resourceVersion`` and tells open watches (ADDED/MODIFIED)."""
        rtype = self._types.get((group, version, resource))
        if rtype is None:
            if "kind" not in obj:
                raise KeyError(f"unknown resource {group}/{version}/{resource}: register() it or give obj a kind")
            rtype = self.register(group, version, resource, obj["kind"], "namespace" in obj.get("metadata", {}))
        obj = copy.deepcopy(obj)
        obj["kind"], obj["apiVersion"] = rtype.kind, rtype.api_version
        meta = obj.setdefault("metadata", {})
        if rtype.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        key = (meta.get("namespace", ""), meta["name"])
        with self._cond:
            store = self._objects[rtype]
            prev = store.get(key)
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            meta["uid"] = prev["metadata"]["uid"] if prev else meta.get("uid") or str(uuid.uuid4())
            meta.setdefault("creationTimestamp", prev["metadata"]["creationTimestamp"] if prev
                            else datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            store[key] = obj
            self._history.append(_Event(self._rv, rtype, "MODIFIED" if prev else "ADDED", obj, prev))
            self._cond.notify_all()
        return copy.deepcopy(obj)

    def delete(self, group: str, version: str, resource: str, namespace: str | None, name: str) -> None:
        """Delete (``KeyError`` when absent) and tell open watches (DELETED)."""
        rtype = self._types[(group, version, resource)]
        with self._cond:
            prev = self._objects[rtype].pop(((namespace or "") if rtype.namespaced else "", name))
            self._rv += 1
            final = copy.deepcopy(prev)
            final["metadata"]["resourceVersion"] = str(self._rv)
            self._history.append(_Event(self._rv, rtype, "DELETED", final, prev))
            self._cond.notify_all()

    def get(self, group: str, version: str, resource: str, namespace: str | None, name: str) -> Obj | None:
        rtype = self._types[(group, version, resource)]
        with self._cond:
            found = self._objects[rtype].get(((namespace or "") if rtype.namespaced else "", name))
            return copy.deepcopy(found) if found else None

    # -- test controls -----------------------------------------------------------------------------------------
    def deny(self, verb: str, resource: str, group: str = "") -> None:
        """RBAC does not grant the caller ``verb`` on ``resource`` of ``group``: such requests get kube-apiserver's
        403 (``k8s.io/apiserver`` ``pkg/endpoints/handlers/responsewriters/errors.go``)."""
        self.denied.add((verb, group, resource))

    def _rbac(self, method: str, path: str, query: dict[str, str]) -> tuple[str, Obj] | None:
        from adapter.auth.attributes import ResourceAttributes, forbidden_message
        from adapter.auth.identity import User

        split = _api_path(path)
        if split is None or not split[2]:
            return None
        group, version, rest = split
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        name = rest[1] if len(rest) > 1 else ""
        verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
        if verb == "get" and not name:
            verb = "watch" if query.get("watch") in ("true", "1") else "list"
        if (verb, group, rest[0]) not in self.denied:
            return None
        attrs = ResourceAttributes(verb, group, version, rest[0], namespace, "", name)
        return forbidden_message(User(self.user), attrs)

    def compact(self) -> None:
        """Compact history up to now: a new watch from an older resourceVersion, or an old continue token, gets
        410 Expired. Watches already open keep receiving every event, as from a real API server's watch cache."""
        with self._cond:
            self._compacted_rv = self._rv
            self._pages.clear()

    def expire_watches(self) -> int:
        """Send every open watch an ERROR event with a 410 Expired Status and end it; returns how many."""
        return self._signal_watches("expire")

    def drop_watches(self) -> int:
        """Cut every open watch mid-event without ending the stream properly; returns how many."""
        return self._signal_watches("drop")

    def end_watches(self) -> int:
        """End every open watch cleanly, as its ``timeoutSeconds`` running out does; returns how many."""
        return self._signal_watches("end")

    def open_watches(self, resource: str | None = None) -> int:
        with self._cond:
            return sum(1 for w in self._watches if resource is None or w.rtype.resource == resource)

    def _signal_watches(self, action: str) -> int:
        with self._cond:
            for watch in self._watches:
                watch.action = action
            self._cond.notify_all()
            return len(self._watches)

    # -- the request log ---------------------------------------------------------------------------------------
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._log_lock:
            return [RecordedRequest(r.method, r.path, r.query) for r in self._log]

    @property
    def received(self) -> list[Received]:
        with self._log_lock:
            return list(self._log)

    def count(self, method: str, path: str, watch: bool | None = None) -> int:
        """Requests with this method and path; ``watch`` True/False counts only watches / only non-watches."""
        with self._log_lock:
            return sum(1 for r in self._log
                       if r.method == method and r.path == path and (watch is None or r.watch == watch))

    def clear_requests(self) -> None:
        with self._log_lock:
            self._log.clear()

    # -- request handling --------------------------------------------------------------------------------------
    def _handle(self, h: _Handler, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        client_cn = h.client_cn()
        with self._log_lock:
            self._log.append(Received(method, path, query, {k.lower(): v for k, v in h.headers.items()}, client_cn))
        if self.require_client_cn is not None and client_cn != self.require_client_cn:
            h.send_status(401, "Unauthorized", "Unauthorized")
            return
        if self.require_token is not None:
            scheme, _, token = (h.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or token.strip() != self.require_token:
                h.send_status(401, "Unauthorized", "Unauthorized")
                return
        denied = self.forbid(method, path)
        if denied is not None:
            h.send_status(403, "Forbidden", denied)
            return
        refused = self._rbac(method, path, query)
        if refused is not None:
            h.send_status(403, "Forbidden", *refused)
            return
        delegate = next((base for group, base in self.aggregated.items()
                         if path == f"/apis/{group}" or path.startswith(f"/apis/{group}/")), None)
        if delegate is not None and method == "GET":
            self._forward(h, delegate, path, query)
        elif method == "POST":
            self._post(h, path, body)
        elif method != "GET":
            h.send_status(405, "MethodNotAllowed", f"the fake API server does not implement {method}")
        elif path in ("/api", "/apis", "/version") or (path.count("/") <= 2 and path.startswith("/apis/")):
            self._discovery(h, path)
        else:
            self._get(h, path, query)

    def _discovery(self, h: _Handler, path: str) -> None:
        if path == "/version":
            h.send_json(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake", "platform": "linux/amd64"})
        elif path == "/api":
            h.send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}]})
        elif path == "/apis":
            groups = [self._api_group(g) for g in sorted({t.group for t in self._types.values() if t.group})]
            for group, base in self.aggregated.items():
                answer = httpx.get(f"{base}/apis/{group}", verify=False, timeout=5.0)
                if answer.status_code == 200:
                    groups.append(answer.json())
            h.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1",
                              "groups": [{k: v for k, v in g.items() if k not in ("kind", "apiVersion")}
                                         for g in groups]})
        else:
            group = path.removeprefix("/apis/")
            if not any(t.group == group for t in self._types.values()):
                h.send_status(404, "NotFound", "the server could not find the requested resource")
                return
            h.send_json(200, self._api_group(group))

    @staticmethod
    def _forward(h: _Handler, base: str, path: str, query: dict[str, str]) -> None:
        answer = httpx.get(base + path, params=query, verify=False, timeout=10.0)
        h.send_json(answer.status_code, answer.json())

    def _api_group(self, group: str) -> Obj:
        versions = list(dict.fromkeys(t.version for t in self._types.values() if t.group == group))
        preferred = self.preferred_versions.get(group, versions[0])
        entry = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entry,
                "preferredVersion": {"groupVersion": f"{group}/{preferred}", "version": preferred}}

    def _get(self, h: _Handler, path: str, query: dict[str, str]) -> None:
        split = _api_path(path)
        if split is None:
            h.send_status(404, "NotFound", "the server could not find the requested resource")
            return
        group, version, rest = split
        if not rest:
            self._resource_list(h, group, version)
            return
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        rtype = self._types.get((group, version, rest[0]))
        if rtype is None or len(rest) > 2 or (ns is not None and not rtype.namespaced) or (
                len(rest) == 2 and rtype.namespaced and ns is None):
            h.send_status(404, "NotFound", "the server could not find the requested resource")
            return
        if len(rest) == 2:
            self._get_one(h, rtype, ns, rest[1], query)
            return
        try:
            accept = _filter(rtype, ns, query)
        except SelectorError as exc:
            h.send_status(400, "BadRequest", str(exc))
            return
        if query.get("watch") in ("true", "1"):
            self._watch(h, rtype, accept, query)
        else:
            self._list(h, rtype, accept, query)

    def _resource_list(self, h: _Handler, group: str, version: str) -> None:
        types = [t for t in self._types.values() if t.group == group and t.version == version]
        if not types:
            h.send_status(404, "NotFound", "the server could not find the requested resource")
            return
        h.send_json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": types[0].api_version,
                          "resources": [{"name": t.resource, "singularName": t.singular, "namespaced": t.namespaced,
                                         "kind": t.kind, "verbs": ["get", "list", "watch"],
                                         **({"shortNames": list(t.short_names)} if t.short_names else {})}
                                        for t in types]})

    def _get_one(self, h: _Handler, rtype: ResourceType, ns: str | None, name: str, query: dict[str, str]) -> None:
        with self._cond:
            found = self._objects[rtype].get((ns or "", name))
            found = copy.deepcopy(found) if found else None
        if found is None:
            details: Obj = {"name": name, "kind": rtype.resource}
            if rtype.group:
                details["group"] = rtype.group
            h.send_status(404, "NotFound", f'{rtype.qualified} "{name}" not found', details)
            return
        partial = self.honour_metadata_accept and _wants_partial(h.headers.get("Accept", ""), "PartialObjectMetadata")
        h.send_json(200, _partial(found) if partial else found)

    def _list(self, h: _Handler, rtype: ResourceType, accept: Callable[[Obj], bool], query: dict[str, str]) -> None:
        limit = int(query.get("limit") or 0)
        token = query.get("continue", "")
        with self._cond:
            if token:
                page = self._pages.pop(token, None)
                if page is None:
                    h.send_status(410, "Expired", "the continue token is too old or unknown; start a new list")
                    return
            else:
                items = [o for _, o in sorted(self._objects[rtype].items()) if accept(o)]
                page = _Page(items, self._rv)
            chunk = page.items[page.offset:page.offset + limit] if limit else page.items[page.offset:]
            page.offset += len(chunk)
            metadata: Obj = {"resourceVersion": str(page.rv)}
            if page.offset < len(page.items):
                token = uuid.uuid4().hex
                self._pages[token] = page
                metadata["continue"] = token
                metadata["remainingItemCount"] = len(page.items) - page.offset
        if self.honour_metadata_accept and _wants_partial(h.headers.get("Accept", ""), "PartialObjectMetadataList"):
            h.send_json(200, {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                              "metadata": metadata, "items": [_partial(o) for o in chunk]})
            return
        items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in chunk]
        h.send_json(200, {"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version, "metadata": metadata,
                          "items": items})

    def _watch(self, h: _Handler, rtype: ResourceType, accept: Callable[[Obj], bool], query: dict[str, str]) -> None:
        requested = query.get("resourceVersion", "")
        timeout = float(query.get("timeoutSeconds") or self.default_watch_timeout)
        interval = self.bookmark_interval if query.get("allowWatchBookmarks") in ("true", "1") else None
        partial = self.honour_metadata_accept and _wants_partial(h.headers.get("Accept", ""), "PartialObjectMetadata")
        watch = _OpenWatch(rtype)
        with self._cond:
            start = int(requested) if requested not in ("", "0") else None
            if start is not None and start < self._compacted_rv:
                expired = status(410, "Expired", f"too old resource version: {start} ({self._compacted_rv})")
                initial: list[tuple[str, Obj]] = []
            else:
                expired = None
                # No version (or "0"): the current state as ADDED events, then changes.
                initial = [] if start is not None else [
                    ("ADDED", o) for _, o in sorted(self._objects[rtype].items()) if accept(o)]
                sent = start if start is not None else self._rv
                self._watches.add(watch)
        if expired is not None:
            if self.expire_with_http_status:
                h.send_json(410, expired)
            else:
                h.start_stream()
                h.send_event("ERROR", expired)
                h.end_stream()
            return

        def shown(obj: Obj) -> Obj:
            return _partial(obj) if partial else obj

        try:
            h.start_stream()
            for event_type, obj in initial:
                h.send_event(event_type, shown(obj))
            now = time.monotonic()
            deadline = now + timeout
            next_bookmark = now + interval if interval is not None else float("inf")
            while True:
                with self._cond:
                    self._cond.wait_for(
                        lambda seen=sent: watch.action is not None or self._stopping or self._rv > seen,
                        max(0.0, min(deadline, next_bookmark) - time.monotonic()))
                    first = bisect.bisect_right(self._history, sent, key=lambda e: e.rv)
                    events = [e for e in self._history[first:] if e.rtype == rtype]
                    sent = self._rv
                    action, stopping = watch.action, self._stopping
                for event in events:
                    visible = _visible(event, accept)
                    if visible is not None:
                        h.send_event(visible[0], shown(visible[1]))
                if action == "drop" or stopping:
                    h.abort()
                    return
                if action == "expire":
                    h.send_event("ERROR", status(410, "Expired", f"too old resource version: {sent} ({sent + 1})"))
                    h.end_stream()
                    return
                now = time.monotonic()
                if action == "end" or now >= deadline:
                    h.end_stream()
                    return
                if now >= next_bookmark and interval is not None:
                    h.send_event("BOOKMARK", {"kind": "PartialObjectMetadata" if partial else rtype.kind,
                                              "apiVersion": "meta.k8s.io/v1" if partial else rtype.api_version,
                                              "metadata": {"resourceVersion": str(sent)}})
                    next_bookmark = now + interval
        except OSError:
            h.close_connection = True
        finally:
            with self._cond:
                self._watches.discard(watch)

    # -- reviews -----------------------------------------------------------------------------------------------
    def _post(self, h: _Handler, path: str, body: bytes) -> None:
        try:
            review = json.loads(body or b"{}")
        except ValueError:
            h.send_status(400, "BadRequest", "the request body is not JSON")
            return
        spec = review.get("spec") if isinstance(review, dict) else None
        if not isinstance(spec, dict):
            h.send_status(400, "BadRequest", "the review has no spec")
            return
        if path == "/apis/authentication.k8s.io/v1/tokenreviews":
            self.token_reviews.append(review)
            user = self.tokens.get(str(spec.get("token", "")))
            result: Obj = ({"authenticated": True, "user": copy.deepcopy(user)} if user is not None
                           else {"authenticated": False, "user": {}, "error": "invalid bearer token"})
            if spec.get("audiences"):
                result["audiences"] = list(spec["audiences"])
            h.send_json(201, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {},
                              "spec": spec, "status": result})
        elif path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
            self.access_reviews.append(spec)
            decision = self.authorize(spec)
            allowed, reason = decision if isinstance(decision, tuple) else (decision, "")
            h.send_json(201, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
                              "spec": spec, "status": {"allowed": bool(allowed), "reason": reason}})
        else:
            h.send_status(404, "NotFound", "the server could not find the requested resource")


def _api_path(path: str) -> tuple[str, str, list[str]] | None:
    """``(group, version, the rest)`` of ``/api/<version>/...`` or ``/apis/<group>/<version>/...``."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 2:
        return "", parts[1], parts[2:]
    if parts[0] == "apis" and len(parts) >= 3:
        return parts[1], parts[2], parts[3:]
    return None


def _filter(rtype: ResourceType, ns: str | None, query: dict[str, str]) -> Callable[[Obj], bool]:
    labels = parse_selector(query.get("labelSelector", ""))
    fields = _field_filter(query.get("fieldSelector", ""), rtype.resource)

    def accept(obj: Obj) -> bool:
        meta = obj.get("metadata", {})
        return ((ns is None or meta.get("namespace") == ns) and matches(labels, meta.get("labels") or {})
                and fields(obj))

    return accept


def _visible(event: _Event, accept: Callable[[Obj], bool]) -> tuple[str, Obj] | None:
    """What a filtered watch shows: objects entering the selection are ADDED, objects leaving it DELETED."""
    now = accept(event.obj)
    before = event.prev is not None and accept(event.prev)
    if event.type == "ADDED":
        return ("ADDED", event.obj) if now else None
    if event.type == "DELETED":
        return ("DELETED", event.obj) if before else None
    if now and before:
        return ("MODIFIED", event.obj)
    if now:
        return ("ADDED", event.obj)
    return ("DELETED", event.obj) if before else None


@pytest.fixture
def fake_kube() -> Iterator[FakeKube]:
    fake = FakeKube()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
