"""The suite's one way to wait: poll a condition until it holds or a deadline passes, then fail naming it.

Tests never sleep a guessed time to let something happen; they wait for the counter, event or state that shows
it happened (a collection counter, a log line, a metric, an answer), with a deadline generous enough for a loaded
2-core CI machine. A deadline is an upper bound, never a measurement: it only decides when to give up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout: float = 20.0, what: str = "condition",
               interval: float = 0.05) -> T:
    """Call ``check()`` until it returns something truthy and return that; after ``timeout`` seconds fail the test
    with an AssertionError naming ``what`` and the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g}s (last: {result!r})")
        time.sleep(interval)


async def wait_until_async(check: Callable[[], T | Awaitable[T]], timeout: float = 20.0, what: str = "condition",
                           interval: float = 0.01) -> T:
    """:func:`wait_until` inside an event loop: ``check`` may be a plain function or a coroutine function, and the
    loop keeps running between polls."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g}s (last: {result!r})")
        await asyncio.sleep(interval)


class LoopTicks:
    """Counts the turns a coroutine of its own gets on the running event loop: while a test waits for something
    that must not block the loop, ``await ticks.more()`` passes only if the loop keeps running."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopTicks:
        self._task = asyncio.ensure_future(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0.01)

    async def more(self, turns: int = 20, what: str = "the event loop running") -> None:
        start = self.count
        await wait_until_async(lambda: self.count >= start + turns, what=what)
