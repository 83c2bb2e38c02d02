"""The calls delegated auth makes to kube-apiserver: TokenReview, SubjectAccessReview, the front-proxy ConfigMap.

The reviews are small JSON documents sent and read as such, without the client's models, over the adapter's one
async HTTP stack (adapter/kube/asyncapi.py: aiohttp on the serving loop; only a credential refresh, such as a
kubeconfig exec plugin, runs in a worker thread, adapter/kube/credentials.py).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from adapter.auth.attributes import Attributes, ResourceAttributes
from adapter.auth.identity import User
from adapter.auth.requestheader import CONFIGMAP_NAME, CONFIGMAP_NAMESPACE
from adapter.kube.api import KubeApiError, KubeError
from adapter.kube.asyncapi import AsyncKubeApi

if TYPE_CHECKING:
    from adapter.kube.api import KubeClient

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


def access_review_spec(user: User, attrs: Attributes) -> bytes:
    """A SubjectAccessReview's ``spec``, encoded: what the review sends, and the key its decision is kept under, as
    k8s.io/apiserver's webhook authorizer keys its cache by ``json.Marshal(r.Spec)``
    (plugin/pkg/authorizer/webhook/webhook.go). Keys sorted, so one request always encodes the same."""
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    key = "resourceAttributes" if isinstance(attrs, ResourceAttributes) else "nonResourceAttributes"
    spec[key] = attrs.sar()
    return orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)


def access_review(spec: bytes) -> bytes:
    """The SubjectAccessReview document around an encoded ``spec`` (not encoded again)."""
    return b'{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":' + spec + b"}"


def access_result(review: dict[str, Any]) -> AccessResult:
    status = _mapping(review.get("status"))
    allowed = bool(status.get("allowed")) and not status.get("denied")
    return AccessResult(allowed, str(status.get("reason") or status.get("evaluationError") or ""))


class KubeDelegate:
    def __init__(self, client: KubeClient) -> None:
        self._api = AsyncKubeApi(client, REQUEST_TIMEOUT_S)

    async def review_token(self, token: str) -> TokenResult:
        body = orjson.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        return token_result(await _answer(self._api.post_json(TOKEN_REVIEWS, body), "TokenReview"))

    async def review_access(self, spec: bytes) -> AccessResult:
        """``spec`` from ``access_review_spec``."""
        review = await _answer(self._api.post_json(ACCESS_REVIEWS, access_review(spec)), "SubjectAccessReview")
        return access_result(review)

    async def extension_configmap(self) -> dict[str, str]:
        path = f"/api/v1/namespaces/{CONFIGMAP_NAMESPACE}/configmaps/{CONFIGMAP_NAME}"
        cm = await _answer(self._api.get_json(path), f"configmap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}")
        return {str(k): str(v) for k, v in _mapping(cm.get("data")).items()}

    async def aclose(self) -> None:
        await self._api.aclose()


async def _answer(call: Awaitable[T], what: str) -> T:
    """The call's answer; no answer (an error status, refused, reset, timed out, not JSON) is
    ``DelegationUnavailable``, and the request fails closed."""
    try:
        return await call
    except KubeApiError as exc:
        raise DelegationUnavailable(f"{what}: kube-apiserver answered {exc.code} {exc.reason}".rstrip()) from None
    except KubeError as exc:
        raise DelegationUnavailable(f"{what}: {exc}") from None
    except Exception as exc:  # anything else the HTTP layer raises: still no answer, still fail closed
        raise DelegationUnavailable(f"{what}: {exc.__class__.__name__}: {exc}") from None
