"""A small async cache that coalesces concurrent lookups of one key and keeps answers for a bounded time."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class CoalescingCache(Generic[V]):
    """``get(key, fetch)``: one ``fetch`` per key at a time; its result is reused while fresh.

    Errors are shared with the callers that waited for them but never kept. An entry lives ``ttl(value)``
    seconds counted from when its fetch *started* (0 = do not keep); at most ``max_entries`` are kept
    (expired ones dropped first, then the oldest).
    """

    def __init__(self, ttl: Callable[[V], float], max_entries: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._values: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Future[V]] = {}
        self.hits = self.coalesced = self.misses = 0

    def __len__(self) -> int:
        return len(self._values)

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[V]]) -> V:
        return (await self.lookup(key, fetch))[0]

    async def lookup(self, key: Hashable, fetch: Callable[[], Awaitable[V]]) -> tuple[V, str]:
        """The value and where it came from: ``hit`` (kept), ``coalesced`` (joined a running fetch) or ``miss``."""
        entry = self._values.get(key)
        if entry is not None:
            if entry[0] > self._clock():
                self.hits += 1
                return entry[1], "hit"
            del self._values[key]
        task = self._inflight.get(key)
        if task is None:
            self.misses += 1
            source = "miss"
            # A task of its own: a caller that gives up (cancelled) does not cancel the others' answer.
            task = asyncio.ensure_future(self._fetch(key, fetch))
            task.add_done_callback(_retrieve)
            self._inflight[key] = task
        else:
            self.coalesced += 1
            source = "coalesced"
        return await asyncio.shield(task), source

    async def _fetch(self, key: Hashable, fetch: Callable[[], Awaitable[V]]) -> V:
        started = self._clock()
        try:
            value = await fetch()
        finally:
            self._inflight.pop(key, None)
        ttl = self._ttl(value)
        if ttl > 0:
            self._store(key, started + ttl)
            self._values[key] = (started + ttl, value)
        return value

    def _store(self, key: Hashable, expires: float) -> None:
        """Make room: expired entries from the front, then the oldest while over the limit."""
        now = self._clock()
        self._values.pop(key, None)
        while self._values:
            oldest = next(iter(self._values))
            if self._values[oldest][0] > now and len(self._values) < self._max:
                break
            del self._values[oldest]

    def clear(self) -> None:
        self._values.clear()


def _retrieve(task: asyncio.Future) -> None:
    """Mark an error seen even when every waiter left, so asyncio does not log it as never retrieved."""
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.exception()
