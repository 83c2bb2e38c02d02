"""Who answers "which objects does this label selector select?": the Kubernetes API's caches, a file, or nobody."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from adapter.api.status import bad_request
from adapter.rules.resources import GroupResource
from adapter.rules.selectors import Requirement


class ObjectResolver(Protocol):
    """Turns a request's label selector into object names (the Kubernetes API's job).

    ``None`` means "every object that has series" (only when nothing better is known: no API and no selector).
    """

    async def names(self, group_resource: GroupResource, namespace: str | None,
                    selector: tuple[Requirement, ...]) -> list[str] | None: ...

    async def namespaced_names(self, group_resource: GroupResource,
                               selector: tuple[Requirement, ...]) -> list[tuple[str, str]] | None:
        """(namespace, name) of the selected objects of every namespace; ``None``: every object with series."""
        ...

    async def labels(self, group_resource: GroupResource, namespace: str | None,
                     names: list[str]) -> Mapping[str, Mapping[str, str]]:
        """The labels of the named objects, where known (metrics.k8s.io items carry them)."""
        ...


_NEEDS_API = ("labelSelector needs the Kubernetes API to find the selected objects, and the adapter runs without one "
              "(pass --kubeconfig, run in a pod, or list objects with --standalone-objects)")


class StandaloneResolver:
    """No Kubernetes API: a request without a selector means every object that has series; one with a selector
    is a 400, never a guess."""

    async def names(self, group_resource: GroupResource, namespace: str | None,
                    selector: tuple[Requirement, ...]) -> list[str] | None:
        if selector:
            raise bad_request(_NEEDS_API)
        return None

    async def namespaced_names(self, group_resource: GroupResource,
                               selector: tuple[Requirement, ...]) -> list[tuple[str, str]] | None:
        if selector:
            raise bad_request(_NEEDS_API)
        return None

    async def labels(self, group_resource: GroupResource, namespace: str | None,
                     names: list[str]) -> Mapping[str, Mapping[str, str]]:
        return {}
