"""JSON over the official client's ``Configuration`` and REST layer: its host, auth, TLS and proxy handling, no models.

Deserialising thousands of objects into generated model classes is slow and keeps every field (the cache needs
three per object), so the adapter sends and reads the JSON itself. Every failure becomes a ``KubeApiError`` (the
server answered with an error) or a ``KubeTransportError`` (no usable answer: refused, reset, timed out,
truncated).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import urllib3

from adapter.rules.resources import GroupResource

if TYPE_CHECKING:
    from kubernetes.client import Configuration

# Metadata-only answers (PartialObjectMetadata); a server that does not know the form falls back to plain JSON.
METADATA_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
METADATA_WATCH_ACCEPT = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"
JSON = "application/json"

Query = Sequence[tuple[str, str]]
Timeout = float | tuple[float, float]


class KubeError(Exception):
    pass


class KubeApiError(KubeError):
    """A non-2xx answer (or a watch ``ERROR`` event), with the ``Status`` fields when the body carried one."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message

    @classmethod
    def from_status(cls, code: int, body: Any, fallback: str) -> KubeApiError:
        if isinstance(body, dict) and body.get("kind") == "Status":
            return cls(int(body.get("code") or code), str(body.get("reason") or ""),
                       str(body.get("message") or fallback))
        return cls(code, "", fallback)


class KubeTransportError(KubeError):
    pass


def collection_path(group: str, version: str, resource: str) -> str:
    """The cluster-wide collection URL path: ``/api/v1/pods``, ``/apis/apps/v1/deployments``."""
    return f"/api/{version}/{resource}" if not group else f"/apis/{group}/{version}/{resource}"


USER_AGENT = "gpu-adapter (kubernetes-client-python)"


def request_headers(configuration: Configuration, *, accept: str = JSON, body: bool = False) -> dict[str, str]:
    """A request's headers; the bearer token read through ``get_api_key_with_prefix``, which runs the loaders'
    refresh hook (a rotated service-account token, an exec plugin) first."""
    headers = {"Accept": accept, "User-Agent": USER_AGENT}
    if body:
        headers["Content-Type"] = JSON
    token = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
    if token:
        headers["Authorization"] = token
    return headers


class KubeClient:
    """One API server connection pool: a ``Configuration`` (kubeconfig or in-cluster) and the client's REST layer.

    The bearer token is read through ``Configuration.get_api_key_with_prefix`` on every request, so the loaders'
    refresh hooks (a rotated service-account token, an exec plugin) keep working.
    """

    def __init__(self, configuration: Configuration) -> None:
        from kubernetes.client import rest
        from kubernetes.client.exceptions import ApiException

        self.configuration = configuration
        self._rest = rest.RESTClientObject(configuration)
        self._rest_error = ApiException

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    def close(self) -> None:
        self._rest.pool_manager.clear()

    def request(self, method: str, path: str, query: Query = (), *, body: Any = None, accept: str = JSON,
                timeout: Timeout) -> urllib3.BaseHTTPResponse:
        """Send one request; the unread response whatever its status. Transport failures are ``KubeTransportError``."""
        url = self.host + path + (f"?{urlencode(list(query))}" if query else "")
        headers = request_headers(self.configuration, accept=accept, body=body is not None)
        try:
            return self._rest.request(method, url, headers=headers, body=body, _request_timeout=timeout).response
        except self._rest_error as exc:  # the REST layer turns TLS failures into status-0 ApiExceptions
            raise KubeTransportError(f"{method} {self.host}{path}: {' '.join(str(exc.reason).split())}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeTransportError(f"{method} {self.host}{path}: {_describe(exc)}") from None


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
