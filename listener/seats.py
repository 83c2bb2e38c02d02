"""Seats for requests, handed out fairly between clients (pure asyncio): the adapter's HTTPS requests
(``--max-requests-inflight``) and the KEDA scaler's calls take them the same way.

A call takes a seat while it runs. When every seat is taken it waits in its client's queue, at most ``wait_s``;
a freed seat goes to the client whose turn it is, one call per client in turn (round robin), so a client with one
call waiting is seated after at most one call of every other waiting client, however many calls those send. At
most ``max_waiting`` calls wait in all: a call that finds the queues full pushes out the newest waiting call of
the longest queue when that queue is longer than its own client's would become, and is refused otherwise. A refused
call is told at once (the scaler answers RESOURCE_EXHAUSTED).

This is the shape of kube-apiserver's API Priority and Fairness (k8s.io/apiserver ``pkg/util/flowcontrol``): a
concurrency limit, queues per flow, fair dispatch, and rejection when a queue is full or waited on too long, with
one priority level and the client's address as the flow (the API server's aggregator is one client, KEDA's operator
another, a flooding pod a third).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class FairSeats:
    def __init__(self, seats: int, max_waiting: int, wait_s: float) -> None:
        if seats < 1:
            raise ValueError("seats must be at least 1")
        self.seats = seats
        self.max_waiting = max_waiting
        self.wait_s = wait_s
        self.in_use = 0
        self.waiting = 0
        # Clients with calls waiting, in turn order (a dict keeps insertion order); each call's future resolves
        # True when it is handed a seat, False when it is pushed out of the queue.
        self._queues: dict[str, deque[asyncio.Future[bool]]] = {}

    async def take(self, client: str, wait_s: float | None = None) -> bool:
        """A seat for one call of ``client`` (True), or a refusal (False) after waiting at most ``wait_s``
        (default: the configured wait). A True must be paired with one :meth:`give_back`."""
        if self.in_use < self.seats and not self._queues:
            self.in_use += 1
            return True
        future = self._enqueue(client)
        if future is None:
            return False
        try:
            await asyncio.wait((future,), timeout=self.wait_s if wait_s is None else wait_s)
        except asyncio.CancelledError:  # the call went away while waiting
            if future.done() and future.result():
                self.give_back()
            else:
                self._leave(client, future)
            raise
        if future.done():
            return future.result()
        self._leave(client, future)
        return False

    def give_back(self) -> None:
        """A seat freed: to the first call of the client whose turn it is (that client then goes last), or free."""
        while self._queues:
            client, queue = next(iter(self._queues.items()))
            future = queue.popleft()
            self.waiting -= 1
            del self._queues[client]
            if queue:
                self._queues[client] = queue
            if not future.done():
                future.set_result(True)
                return
        self.in_use -= 1

    @contextlib.asynccontextmanager
    async def seat(self, client: str, wait_s: float | None = None) -> AsyncIterator[bool]:
        """``async with seats.seat(client) as seated``: the seat (when ``seated``) is given back on leaving."""
        seated = await self.take(client, wait_s)
        try:
            yield seated
        finally:
            if seated:
                self.give_back()

    def _enqueue(self, client: str) -> asyncio.Future[bool] | None:
        own = len(self._queues.get(client, ()))
        if self.waiting >= self.max_waiting:
            longest = max(self._queues, key=lambda c: len(self._queues[c]), default=None)
            if longest is None or len(self._queues[longest]) <= own + 1:
                return None
            pushed_out = self._queues[longest].pop()
            self.waiting -= 1
            pushed_out.set_result(False)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(client, deque()).append(future)
        self.waiting += 1
        return future

    def _leave(self, client: str, future: asyncio.Future[bool]) -> None:
        queue = self._queues.get(client)
        if queue is None or future not in queue:
            return
        queue.remove(future)
        self.waiting -= 1
        if not queue:
            del self._queues[client]
        future.cancel()
