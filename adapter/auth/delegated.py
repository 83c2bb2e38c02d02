"""The calls delegated auth makes to kube-apiserver: TokenReview, SubjectAccessReview, the front-proxy ConfigMap.

The reviews are small JSON documents sent and read as such (adapter/kube/api.py), without the client's models.
The REST layer is synchronous; every call runs in a worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from adapter.auth.attributes import Attributes, ResourceAttributes
from adapter.auth.identity import User
from adapter.auth.requestheader import CONFIGMAP_NAME, CONFIGMAP_NAMESPACE
from adapter.kube.api import KubeApi, KubeApiError, KubeClient, KubeError

REQUEST_TIMEOUT_S = 10.0  # the Go library's webhook client timeout
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
T = TypeVar("T")


class DelegationUnavailable(Exception):
    """kube-apiserver could not answer a review; the request fails closed (503), it is never let through."""


@dataclass(frozen=True)
class TokenResult:
    user: User | None  # None: the token did not authenticate
    error: str = ""


@dataclass(frozen=True)
class AccessResult:
    allowed: bool
    reason: str = ""


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def token_result(review: dict[str, Any]) -> TokenResult:
    """A TokenReview answer's ``status``: the user when it authenticated one with a name."""
    status = _mapping(review.get("status"))
    user = _mapping(status.get("user"))
    if not status.get("authenticated") or not user.get("username"):
        return TokenResult(None, str(status.get("error") or "token not authenticated"))
    extra = {str(k): tuple(str(x) for x in v or ()) for k, v in _mapping(user.get("extra")).items()}
    return TokenResult(User(str(user["username"]), str(user.get("uid") or ""),
                            tuple(str(g) for g in user.get("groups") or ()), extra))


def access_review(user: User, attrs: Attributes) -> dict[str, Any]:
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    key = "resourceAttributes" if isinstance(attrs, ResourceAttributes) else "nonResourceAttributes"
    spec[key] = attrs.sar()
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def access_result(review: dict[str, Any]) -> AccessResult:
    status = _mapping(review.get("status"))
    allowed = bool(status.get("allowed")) and not status.get("denied")
    return AccessResult(allowed, str(status.get("reason") or status.get("evaluationError") or ""))


class KubeDelegate:
    def __init__(self, client: KubeClient) -> None:
        self._api = KubeApi(client, REQUEST_TIMEOUT_S)

    async def review_token(self, token: str) -> TokenResult:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        return token_result(await self._call(self._api.post_json, TOKEN_REVIEWS, body, what="TokenReview"))

    async def review_access(self, user: User, attrs: Attributes) -> AccessResult:
        review = await self._call(self._api.post_json, ACCESS_REVIEWS, access_review(user, attrs),
                                  what="SubjectAccessReview")
        return access_result(review)

    async def extension_configmap(self) -> dict[str, str]:
        path = f"/api/v1/namespaces/{CONFIGMAP_NAMESPACE}/configmaps/{CONFIGMAP_NAME}"
        cm = await self._call(self._api.get_json, path, what=f"configmap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}")
        return {str(k): str(v) for k, v in _mapping(cm.get("data")).items()}

    @staticmethod
    async def _call(fn: Callable[..., T], *args: Any, what: str) -> T:
        try:
            return await asyncio.to_thread(fn, *args)
        except KubeApiError as exc:
            raise DelegationUnavailable(f"{what}: kube-apiserver answered {exc.code} {exc.reason}".rstrip()) from None
        except KubeError as exc:  # refused, reset, timed out, bad TLS, not JSON
            raise DelegationUnavailable(f"{what}: {exc}") from None
        except Exception as exc:  # anything else the REST layer raises: still no answer, still fail closed
            raise DelegationUnavailable(f"{what}: {exc.__class__.__name__}: {exc}") from None
