"""``ObjectResolver`` over the Kubernetes API: label selectors answered from watch-backed caches, never a LIST."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType

from adapter.api.status import ApiError, unavailable
from adapter.kube.api import KubeClient
from adapter.kube.cache import MetadataCache
from adapter.rules.resources import GroupResource
from adapter.rules.selectors import Requirement

CacheFactory = Callable[[KubeClient, GroupResource], MetadataCache]


class KubeResolver:
    """One cache per group-resource, created on first use; a request waits (off the event loop) for its first sync."""

    def __init__(self, api_client: KubeClient, *, sync_timeout: float = 10.0,
                 cache_factory: CacheFactory = MetadataCache) -> None:
        self._api_client = api_client
        self._sync_timeout = sync_timeout
        self._factory = cache_factory
        self._caches: dict[GroupResource, MetadataCache] = {}
        self._lock = threading.Lock()
        self._closed = False
        # One waiting thread per unsynced cache, shared by the requests that arrive meanwhile.
        self._waits: dict[GroupResource, asyncio.Future[bool]] = {}

    @property
    def caches(self) -> Mapping[GroupResource, MetadataCache]:
        with self._lock:
            return MappingProxyType(dict(self._caches))

    def cache(self, group_resource: GroupResource) -> MetadataCache:
        with self._lock:
            if self._closed:
                raise unavailable("the Kubernetes object caches are shut down")
            found = self._caches.get(group_resource)
            if found is None:
                found = self._caches[group_resource] = self._factory(self._api_client, group_resource)
            return found

    async def names(self, group_resource: GroupResource, namespace: str | None,
                    selector: tuple[Requirement, ...]) -> list[str]:
        cache = self.cache(group_resource)
        if not cache.synced and not await self._wait(group_resource, cache):
            if cache.not_served is not None:
                raise ApiError(404, f"the Kubernetes API does not serve {group_resource}: {cache.not_served}")
            why = cache.last_error or "no answer from the Kubernetes API yet"
            raise unavailable(f"the cache of {group_resource} has not synced with the Kubernetes API "
                              f"within {self._sync_timeout:g}s: {why}")
        return cache.names(namespace, selector)

    async def namespaced_names(self, group_resource: GroupResource,
                               selector: tuple[Requirement, ...]) -> list[tuple[str, str]]:
        """(namespace, name) of the selected objects in all namespaces (``kubectl top pods -A``)."""
        await self.names(group_resource, None, ())  # waits for the sync, with its errors
        return self.cache(group_resource).namespaced_names(selector)

    async def labels(self, group_resource: GroupResource, namespace: str | None,
                     names: list[str]) -> Mapping[str, Mapping[str, str]]:
        """The labels of the named objects the cache holds (metrics.k8s.io items carry them, as metrics-server's)."""
        await self.names(group_resource, namespace, ())  # waits for the sync, with its errors
        return self.cache(group_resource).labels_of(namespace, names)

    async def _wait(self, group_resource: GroupResource, cache: MetadataCache) -> bool:
        future = self._waits.get(group_resource)
        loop = asyncio.get_running_loop()
        if future is None or future.done() or future.get_loop() is not loop:
            future = asyncio.ensure_future(asyncio.to_thread(cache.wait_synced, self._sync_timeout))
            self._waits[group_resource] = future
        try:
            return await asyncio.wait_for(asyncio.shield(future), self._sync_timeout + 1.0)
        except TimeoutError:
            return cache.synced

    def close(self) -> None:
        with self._lock:
            self._closed = True
            caches = list(self._caches.values())
            self._caches.clear()
        for cache in caches:
            cache.stop()
