"""May this user do this: SubjectAccessReview with the Go library's exemptions, decision cache and cache keys."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from adapter.auth.attributes import Attributes, NonResourceAttributes
from adapter.auth.delegated import AccessResult, access_review_spec
from adapter.auth.identity import MASTERS, User
from adapter.prometheus.coalescing import CoalescingCache

DECISION_CACHE_TTL_S = 10.0  # Go: allow and deny both cached 10 s (pkg/server/options/authorization.go)
# k8s.io/apiserver plugin/pkg/authorizer/webhook/webhook.go keeps decisions in an LRUExpireCache(8192), keyed by the
# encoded review spec, and does not keep a decision whose requester-controlled attributes add up to 10,000
# bytes or more (shouldCache, maxControlledAttrCacheSize): a caller cannot fill the cache with huge keys.
DECISION_CACHE_ENTRIES = 8192
MAX_CONTROLLED_ATTR_CACHE_SIZE = 10_000


class AccessReviewer(Protocol):
    async def review_access(self, spec: bytes) -> AccessResult:
        """The decision for an encoded SubjectAccessReview spec (``access_review_spec``)."""
        ...


def should_cache(attrs: Attributes) -> bool:
    """webhook.go's shouldCache: the requester-controlled attributes are small enough to key a kept decision.
    webhook.go adds the request path to the sum for resource requests too; these attributes do not carry it, so a
    resource request is kept up to a somewhat larger size than the Go library would keep it."""
    if isinstance(attrs, NonResourceAttributes):
        size = len(attrs.verb) + len(attrs.path)
    else:
        size = sum(map(len, (attrs.namespace, attrs.verb, attrs.group, attrs.version, attrs.resource,
                             attrs.subresource, attrs.name)))
    return size < MAX_CONTROLLED_ATTR_CACHE_SIZE


class Authorizer:
    def __init__(self, reviewer: AccessReviewer, *, always_allow_groups: Iterable[str] = (MASTERS,),
                 ttl_s: float = DECISION_CACHE_TTL_S, denied_ttl_s: float | None = None) -> None:
        """``ttl_s`` keeps allowed decisions, ``denied_ttl_s`` (default: the same) denied ones."""
        self._reviewer = reviewer
        self._always = frozenset(always_allow_groups)
        denied = ttl_s if denied_ttl_s is None else denied_ttl_s
        self._cache: CoalescingCache[AccessResult] = CoalescingCache(lambda r: ttl_s if r.allowed else denied,
                                                                     DECISION_CACHE_ENTRIES)

    async def authorize(self, user: User, attrs: Attributes) -> tuple[AccessResult, bool]:
        """The decision and whether it was reused; raises DelegationUnavailable (callers fail closed)."""
        if self._always & set(user.groups):
            return AccessResult(True, "always allowed group"), False
        spec = access_review_spec(user, attrs)  # encoded once: the decision's key and the review's body
        reviewer = self._reviewer
        if not should_cache(attrs):
            return await reviewer.review_access(spec), False
        result, source = await self._cache.lookup(spec, lambda: reviewer.review_access(spec))
        return result, source != "miss"
