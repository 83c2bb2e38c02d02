"""JSON over the official client's ``Configuration`` and REST layer: its host, auth, TLS and proxy handling, no models.

Deserialising thousands of objects into generated model classes is slow and keeps every field (the cache needs
three per object), so the adapter sends and reads the JSON itself. Every failure becomes a ``KubeApiError`` (the
server answered with an error), a ``KubeTransportError`` (no usable answer: refused, reset, timed out,
truncated) or a ``KubeCredentialError`` (no credentials to send: adapter.kube.credentials).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import urllib3

from adapter.kube.credentials import Credential, Credentials, ReloadedConfiguration
from adapter.kube.errors import KubeApiError, KubeError, KubeTransportError
from adapter.rules.resources import GroupResource

if TYPE_CHECKING:
    from kubernetes.client import Configuration
    from kubernetes.client.rest import RESTClientObject

# Metadata-only answers (PartialObjectMetadata); a server that does not know the form falls back to plain JSON.
METADATA_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
METADATA_WATCH_ACCEPT = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"
JSON = "application/json"

Query = Sequence[tuple[str, str]]
Timeout = float | tuple[float, float]


def collection_path(group: str, version: str, resource: str) -> str:
    """The cluster-wide collection URL path: ``/api/v1/pods``, ``/apis/apps/v1/deployments``."""
    return f"/api/{version}/{resource}" if not group else f"/apis/{group}/{version}/{resource}"


USER_AGENT = "gpu-adapter (kubernetes-client-python)"


def request_headers(authorization: str | None, *, accept: str = JSON, body: bool = False) -> dict[str, str]:
    headers = {"Accept": accept, "User-Agent": USER_AGENT}
    if body:
        headers["Content-Type"] = JSON
    if authorization:
        headers["Authorization"] = authorization
    return headers


class KubeClient:
    """One API server: its ``Configuration`` (kubeconfig or in-cluster: host, CA, proxy) and ``Credentials``
    (adapter.kube.credentials: token and client certificate, kept current in a worker thread), over the
    client's REST layer. A client certificate that changes gets a new connection pool.

    Without ``credentials``, those of ``configuration`` are used: its token read through
    ``get_api_key_with_prefix`` (a loader's refresh hook runs there, off the serving loop) every minute and after
    a 401, its client certificate files re-read as often.
    """

    def __init__(self, configuration: Configuration, credentials: Credentials | None = None) -> None:
        from kubernetes.client.exceptions import ApiException

        self.configuration = configuration
        self.credentials = credentials or Credentials(ReloadedConfiguration(
            lambda: configuration, f"the credentials for {configuration.host}"))
        self._rest_error = ApiException
        self._rest: RESTClientObject | None = None
        self._rest_identity = b""
        self._rest_lock = threading.Lock()

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    def close(self) -> None:
        with self._rest_lock:
            if self._rest is not None:
                self._rest.pool_manager.clear()
        self.credentials.close()

    def _rest_for(self, credential: Credential) -> RESTClientObject:
        """The REST layer for ``credential``'s TLS material: a new pool when it changed (the old one's idle
        connections closed; a watch reading on one of its connections goes on until it ends)."""
        from kubernetes.client import rest

        with self._rest_lock:
            if self._rest is None or self._rest_identity != credential.identity:
                old, self._rest = self._rest, rest.RESTClientObject(credential.configuration)
                self._rest_identity = credential.identity
                if old is not None:
                    old.pool_manager.clear()
            return self._rest

    def request(self, method: str, path: str, query: Query = (), *, body: Any = None, accept: str = JSON,
                timeout: Timeout) -> urllib3.BaseHTTPResponse:
        """Send one request; the unread response whatever its status. Transport failures are ``KubeTransportError``,
        no credentials ``KubeCredentialError``."""
        url = self.host + path + (f"?{urlencode(list(query))}" if query else "")
        credential = self.credentials.get(timeout[0] if isinstance(timeout, tuple) else timeout)
        headers = request_headers(credential.authorization, accept=accept, body=body is not None)
        try:
            response = self._rest_for(credential).request(method, url, headers=headers, body=body,
                                                          _request_timeout=timeout).response
        except self._rest_error as exc:  # the REST layer turns TLS failures into status-0 ApiExceptions
            raise KubeTransportError(f"{method} {self.host}{path}: {' '.join(str(exc.reason).split())}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeTransportError(f"{method} {self.host}{path}: {_describe(exc)}") from None
        if response.status == 401:
            self.credentials.invalidate(credential)
        return response


class KubeApi:
    def __init__(self, client: KubeClient, request_timeout: float = 30.0) -> None:
        self._client = client
        self.request_timeout = request_timeout

    @property
    def host(self) -> str:
        return self._client.host

    def open(self, path: str, query: Query = (), accept: str = JSON,
             timeout: Timeout | None = None) -> urllib3.BaseHTTPResponse:
        """GET ``path`` and return the unread response once its status is 2xx (the caller reads and closes it)."""
        return self._checked(self._client.request("GET", path, query, accept=accept,
                                                  timeout=timeout or self.request_timeout), f"GET {path}")

    def post_json(self, path: str, body: dict[str, Any], timeout: Timeout | None = None) -> dict[str, Any]:
        """POST a JSON document (a review) and return the JSON answer."""
        response = self._checked(self._client.request("POST", path, body=body,
                                                      timeout=timeout or self.request_timeout), f"POST {path}")
        return self._read_and_release(response, path)

    @staticmethod
    def _checked(response: urllib3.BaseHTTPResponse, request: str) -> urllib3.BaseHTTPResponse:
        """The response when its status is 2xx; otherwise a ``KubeApiError`` carrying the ``Status`` it sent."""
        if 200 <= response.status < 300:
            return response
        try:
            raw = response.read()
        except (urllib3.exceptions.HTTPError, OSError):
            raw = b""
        finally:
            response.release_conn()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        fallback = raw.decode("utf-8", "replace").strip()[:200] or f"{request} answered HTTP {response.status}"
        raise KubeApiError.from_status(response.status, body, fallback)

    def get_json(self, path: str, query: Query = (), accept: str = JSON) -> dict[str, Any]:
        return self._read_and_release(self.open(path, query, accept), path)

    @staticmethod
    def _read_and_release(response: urllib3.BaseHTTPResponse, path: str) -> dict[str, Any]:
        try:
            document = read_json(response, path)
        except KubeError:
            response.close()
            raise
        response.release_conn()
        return document

    def preferred_version(self, group: str) -> str:
        """The group's preferred version from ``GET /apis/<group>`` (``APIGroup.preferredVersion``)."""
        document = self.get_json(f"/apis/{group}")
        preferred = document.get("preferredVersion") or {}
        version = preferred.get("version") or str(preferred.get("groupVersion", "")).rpartition("/")[2]
        if not version:
            versions = document.get("versions") or []
            version = versions[0].get("version", "") if versions else ""
        if not version:
            raise KubeApiError(404, "NotFound", f"the API group {group} lists no versions")
        return str(version)

    def resource_path(self, gr: GroupResource) -> str:
        version = "v1" if not gr.group else self.preferred_version(gr.group)
        return collection_path(gr.group, version, gr.resource)


def read_json(response: urllib3.BaseHTTPResponse, what: str) -> dict[str, Any]:
    try:
        raw = response.read()
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeTransportError(f"reading {what}: {_describe(exc)}") from None
    return _document(raw, f"reading {what}")


def json_lines(response: urllib3.BaseHTTPResponse, what: str) -> Iterator[dict[str, Any]]:
    """The newline-delimited JSON documents of a watch stream; a stream cut mid-document is a transport error."""
    buffer = b""
    try:
        for chunk in response.stream(64 * 1024):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield _document(line, what)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeTransportError(f"{what}: {_describe(exc)}") from None
    if buffer.strip():
        raise KubeTransportError(f"{what}: stream ended in the middle of an event")


def _document(raw: bytes, what: str) -> dict[str, Any]:
    """One JSON object (a whole answer, or one watch event)."""
    try:
        document = json.loads(raw)
    except ValueError:
        raise KubeTransportError(f"{what}: not JSON ({len(raw)} bytes)") from None
    if not isinstance(document, dict):
        raise KubeTransportError(f"{what}: expected a JSON object")
    return document


def _describe(exc: BaseException) -> str:
    """urllib3 wraps the cause (refused, reset, timed out) in layers; name the innermost one, on one line."""
    cause: BaseException = exc
    while True:
        inner = getattr(cause, "reason", None)
        if not isinstance(inner, BaseException):
            break
        cause = inner
    if isinstance(cause, urllib3.exceptions.NewConnectionError) and isinstance(cause.__context__, OSError):
        cause = cause.__context__
    text = " ".join(str(cause).split())
    name = type(cause).__name__
    return f"{name}: {text}" if text and name not in text else (text or name)
