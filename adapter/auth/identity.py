"""Who is asking: the user a request was authenticated as."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
MASTERS = "system:masters"


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def with_authenticated_group(self) -> User:
        """Every authenticated user is also in ``system:authenticated`` (Go's AuthenticatedGroupAdder)."""
        if AUTHENTICATED in self.groups:
            return self
        return User(self.name, self.uid, (*self.groups, AUTHENTICATED), self.extra)


def anonymous() -> User:
    return User(ANONYMOUS, groups=(UNAUTHENTICATED,))
