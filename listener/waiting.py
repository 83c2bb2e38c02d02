"""The connections of a listener that hold memory without a request in progress, by client address.

A connection in the TLS handshake, one sending its request head, and one kept alive between requests all cost the
server memory (about 40 KiB each with TLS) and give it nothing to do. Timeouts bound how long each may wait, but
not how many wait at once: 12,000 connections that each send a header every few seconds stay within any
read-header timeout a real client needs. So the room has a budget, in connections and in bytes of unfinished
heads: past it, a connection is closed, and it is taken from the client address that has the most connections
waiting, the one of them that has waited longest. A flooding pod therefore loses its own connections first, and a
real client (the aggregator, Prometheus, a kubelet probe), which sends its whole request within milliseconds of
connecting, keeps its place even while the flood arrives faster than connections finish their handshake. An idle
kept-alive connection may be closed this way; that is what its idle timeout would do later anyway (a Go client
sends the next request on a new connection).

Waiting starts when a connection is accepted or its response is complete, and ends when its next request head is
complete or it closes: within an address the order is by when waiting began, not by the last byte received, so a
trickling client cannot keep its place by sending.
"""

from __future__ import annotations

from typing import Protocol


class Waiter(Protocol):
    @property
    def address(self) -> str:
        """The client's address: the connections of one pod share it."""

    def evict(self) -> None:
        """Close this connection now, with nothing more sent or read (it leaves the room as it closes)."""


class WaitingRoom:
    def __init__(self, max_connections: int, max_head_bytes: int) -> None:
        self.max_connections = max_connections
        self.max_head_bytes = max_head_bytes
        self._bytes: dict[Waiter, int] = {}
        self._by_address: dict[str, dict[Waiter, None]] = {}  # each in the order waiting began
        # Addresses by how many connections they have waiting, and the largest such count: the next to lose one.
        self._by_count: dict[int, dict[str, None]] = {}
        self._most = 0
        self.head_bytes = 0
        self.evicted_total = 0
        self.peak = 0

    def __len__(self) -> int:
        return len(self._bytes)

    def __contains__(self, waiter: object) -> bool:
        return waiter in self._bytes

    def enter(self, waiter: Waiter) -> None:
        """``waiter`` starts waiting (again: it goes to the back of its address' line)."""
        self.leave(waiter)
        self._bytes[waiter] = 0
        line = self._by_address.setdefault(waiter.address, {})
        self._move(waiter.address, len(line), len(line) + 1)
        line[waiter] = None
        self.peak = max(self.peak, len(self._bytes))
        self._keep_budget(waiter)

    def hold(self, waiter: Waiter, nbytes: int) -> None:
        """``waiter`` now holds ``nbytes`` more of an unfinished head."""
        if waiter in self._bytes:
            self._bytes[waiter] += nbytes
            self.head_bytes += nbytes
            self._keep_budget(waiter)

    def leave(self, waiter: Waiter) -> None:
        """``waiter`` stops waiting: its head is complete, or it closed."""
        if waiter not in self._bytes:
            return
        self.head_bytes -= self._bytes.pop(waiter)
        line = self._by_address[waiter.address]
        del line[waiter]
        self._move(waiter.address, len(line) + 1, len(line))
        if not line:
            del self._by_address[waiter.address]

    def _move(self, address: str, before: int, after: int) -> None:
        if before:
            bucket = self._by_count[before]
            del bucket[address]
            if not bucket:
                del self._by_count[before]
        if after:
            self._by_count.setdefault(after, {})[address] = None
        if after > self._most:
            self._most = after
        while self._most and self._most not in self._by_count:
            self._most -= 1

    def _victim(self, spared: Waiter) -> Waiter | None:
        """The longest waiting connection of the address with the most waiting (not ``spared``)."""
        for count in range(self._most, 0, -1):
            for address in self._by_count.get(count, {}):
                for waiter in self._by_address[address]:
                    if waiter is not spared:
                        return waiter
        return None

    def _keep_budget(self, spared: Waiter) -> None:
        """Close connections until within budget, sparing the one that just asked (alone over the byte budget, its
        own head limit bounds it)."""
        while len(self._bytes) > self.max_connections or self.head_bytes > self.max_head_bytes:
            victim = self._victim(spared)
            if victim is None:
                return
            self.leave(victim)
            self.evicted_total += 1
            victim.evict()

    def evict_all(self) -> int:
        """Close every waiting connection (the listener is closing); how many were closed."""
        waiters = list(self._bytes)
        for waiter in waiters:
            self.leave(waiter)
            waiter.evict()
        return len(waiters)
