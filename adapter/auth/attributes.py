"""Request → authorisation attributes, the way Kubernetes' RequestInfoFactory derives them
(k8s.io/apiserver pkg/endpoints/request/requestinfo.go). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from adapter.auth.identity import User

_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


@dataclass(frozen=True)
class ResourceAttributes:
    verb: str
    group: str
    version: str
    resource: str
    namespace: str = ""
    subresource: str = ""
    name: str = ""

    def sar(self) -> dict[str, str]:
        fields = {"namespace": self.namespace, "verb": self.verb, "group": self.group, "version": self.version,
                  "resource": self.resource, "subresource": self.subresource, "name": self.name}
        return {k: v for k, v in fields.items() if v or k in ("group", "verb", "resource")}


@dataclass(frozen=True)
class NonResourceAttributes:
    verb: str
    path: str

    def sar(self) -> dict[str, str]:
        return {"path": self.path, "verb": self.verb}


Attributes = ResourceAttributes | NonResourceAttributes


def request_attributes(method: str, path: str, watch: bool = False) -> Attributes:
    """``/apis/<group>/<version>/<resource parts>`` is a resource request; everything else is a path."""
    parts = [unquote(p) for p in path.strip("/").split("/") if p]
    if len(parts) < 4 or parts[0] != "apis":
        return NonResourceAttributes(method.lower(), path)
    group, version, rest = parts[1], parts[2], parts[3:]
    verb = _VERBS.get(method.upper(), method.lower())
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if not name and verb == "get":
        verb = "watch" if watch else "list"
    return ResourceAttributes(verb, group, version, resource, namespace, subresource, name)


def forbidden_message(user: User, attrs: Attributes, reason: str = "") -> tuple[str, dict[str, str]]:
    """kube-apiserver's wording for a 403, and the Status details it sends with it."""
    if isinstance(attrs, NonResourceAttributes):
        message = f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
        details: dict[str, str] = {}
    else:
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        why = (f'User "{user.name}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.group}" '
               f"{scope}")
        qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
        subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
        message = f"{subject} is forbidden: {why}"
        details = {"group": attrs.group, "kind": attrs.resource}
        if attrs.name:
            details["name"] = attrs.name
    if reason:
        message += f": {reason}"
    return message, details
