"""One named background task per owner (discovery, rules reload, CA refresh): started and cancelled with it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any


class BackgroundTask:
    def __init__(self, name: str) -> None:
        self.name = name
        self._task: asyncio.Task[None] | None = None

    def start(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``run()`` on the current event loop until :meth:`stop`."""
        self._task = asyncio.get_running_loop().create_task(run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def every(interval_s: float, step: Callable[[], Awaitable[object]], log: logging.Logger, what: str) -> None:
    """Await ``step()`` every ``interval_s`` seconds, for ever; a step that raises is logged and the loop goes on
    (a bug in one step must not end the refreshing for good)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await step()
        except Exception:
            log.exception("%s failed", what)
