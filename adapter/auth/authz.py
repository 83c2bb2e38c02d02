"""May this user do this: SubjectAccessReview with the Go library's exemptions and 10 s decision cache."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from adapter.auth.attributes import Attributes
from adapter.auth.delegated import AccessResult
from adapter.auth.identity import MASTERS, User
from adapter.prometheus.coalescing import CoalescingCache

DECISION_CACHE_TTL_S = 10.0  # Go: allow and deny both cached 10 s
# k8s.io/apiserver plugin/pkg/authorizer/webhook/webhook.go keeps decisions in an LRUExpireCache(8192).
DECISION_CACHE_ENTRIES = 8192


class AccessReviewer(Protocol):
    async def review_access(self, user: User, attrs: Attributes) -> AccessResult: ...


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
        reviewer = self._reviewer
        key = (user.cache_key(), attrs)
        result, source = await self._cache.lookup(key, lambda: reviewer.review_access(user, attrs))
        return result, source != "miss"
