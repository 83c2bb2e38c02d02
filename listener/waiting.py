"""The connections of a listener that hold memory without a request in progress, oldest first.

A connection in the TLS handshake, one sending its request head, and one kept alive between requests all cost the
server memory (about 30 KiB each with TLS) and give it nothing to do. Timeouts bound how long each may wait, but not
how many wait at once: 12,000 connections that each send a header every few seconds stay within any read-header
timeout a real client needs. So the room has a budget, in connections and in bytes of unfinished heads: past it,
the connection that has waited longest is closed. A real client (the aggregator, Prometheus, a kubelet probe)
sends its whole request within milliseconds of connecting and is never the oldest waiting; an idle kept-alive
connection may be, and closing one is what its idle timeout would do later anyway (a Go client sends the next
request on a new connection).

Waiting starts when a connection is accepted or its response is complete, and ends when its next request head is
complete or it closes: the order is by when waiting began, not by the last byte received, so a trickling client
cannot keep its place by sending.
"""

from __future__ import annotations

from typing import Protocol


class Waiter(Protocol):
    def evict(self) -> None:
        """Close this connection now, with nothing more sent or read (it leaves the room as it closes)."""


class WaitingRoom:
    def __init__(self, max_connections: int, max_head_bytes: int) -> None:
        self.max_connections = max_connections
        self.max_head_bytes = max_head_bytes
        self._bytes: dict[Waiter, int] = {}  # insertion order: the order in which waiting began
        self.head_bytes = 0
        self.evicted_total = 0
        self.peak = 0

    def __len__(self) -> int:
        return len(self._bytes)

    def __contains__(self, waiter: object) -> bool:
        return waiter in self._bytes

    def enter(self, waiter: Waiter) -> None:
        """``waiter`` starts waiting (again: it goes to the back)."""
        self.leave(waiter)
        self._bytes[waiter] = 0
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
        self.head_bytes -= self._bytes.pop(waiter, 0)

    def _keep_budget(self, spared: Waiter) -> None:
        """Close the longest waiting until within budget, sparing the connection that just asked (alone over the
        byte budget, its own head limit bounds it)."""
        while len(self._bytes) > self.max_connections or self.head_bytes > self.max_head_bytes:
            oldest = next((w for w in self._bytes if w is not spared), None)
            if oldest is None:
                return
            self.leave(oldest)
            self.evicted_total += 1
            oldest.evict()

    def evict_all(self) -> int:
        """Close every waiting connection (the listener is closing); how many were closed."""
        waiters = list(self._bytes)
        for waiter in waiters:
            self.leave(waiter)
            waiter.evict()
        return len(waiters)
