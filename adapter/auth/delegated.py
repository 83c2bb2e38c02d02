"""The calls delegated auth makes to kube-apiserver: TokenReview, SubjectAccessReview, the front-proxy ConfigMap.

The official client is synchronous; every call runs in a worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from adapter.auth.attributes import Attributes, ResourceAttributes
from adapter.auth.identity import User
from adapter.auth.requestheader import CONFIGMAP_NAME, CONFIGMAP_NAMESPACE

REQUEST_TIMEOUT_S = 10.0  # the Go library's webhook client timeout


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


class KubeDelegate:
    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._authn = k8s.AuthenticationV1Api(api_client)
        self._authz = k8s.AuthorizationV1Api(api_client)
        self._core = k8s.CoreV1Api(api_client)

    async def review_token(self, token: str) -> TokenResult:
        body = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token))
        review = await self._call(self._authn.create_token_review, body, what="TokenReview")
        status = review.status
        if not status or not status.authenticated or not status.user or not status.user.username:
            return TokenResult(None, (status.error if status else "") or "token not authenticated")
        u = status.user
        extra = {k: tuple(v or ()) for k, v in (u.extra or {}).items()}
        return TokenResult(User(u.username, u.uid or "", tuple(u.groups or ()), extra))

    async def review_access(self, user: User, attrs: Attributes) -> AccessResult:
        spec = k8s.V1SubjectAccessReviewSpec(user=user.name, uid=user.uid or None, groups=list(user.groups),
                                             extra={k: list(v) for k, v in user.extra.items()} or None)
        if isinstance(attrs, ResourceAttributes):
            spec.resource_attributes = k8s.V1ResourceAttributes(**attrs.sar())
        else:
            spec.non_resource_attributes = k8s.V1NonResourceAttributes(**attrs.sar())
        review = await self._call(self._authz.create_subject_access_review,
                                  k8s.V1SubjectAccessReview(spec=spec), what="SubjectAccessReview")
        status = review.status
        allowed = bool(status and status.allowed and not status.denied)
        reason = (status.reason or status.evaluation_error or "") if status else ""
        return AccessResult(allowed, reason)

    async def extension_configmap(self) -> dict[str, str]:
        cm = await self._call(self._core.read_namespaced_config_map, CONFIGMAP_NAME, CONFIGMAP_NAMESPACE,
                              what=f"configmap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}")
        return dict(cm.data or {})

    @staticmethod
    async def _call(fn, *args, what: str):  # type: ignore[no-untyped-def]
        try:
            return await asyncio.to_thread(fn, *args, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            raise DelegationUnavailable(f"{what}: kube-apiserver answered {exc.status} {exc.reason}") from None
        except Exception as exc:  # urllib3 connection errors, timeouts, bad TLS
            raise DelegationUnavailable(f"{what}: {exc.__class__.__name__}: {exc}") from None
