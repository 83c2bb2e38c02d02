"""What ``gpu-loadtest``'s commands share: their one-line errors, running a coroutine that Ctrl-C or SIGTERM ends
cleanly, output directories made before a run, and ``Name: value`` header options."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["DemoFailed", "UsageError", "cancellable", "parse_headers", "prepare_outputs"]

T = TypeVar("T")


class UsageError(Exception):
    pass


class DemoFailed(Exception):
    """The demo could not complete (a process failed); exit code 1 after the partial summary."""

    code = 1


def cancellable(factory: Callable[[], Awaitable[T]]) -> T:
    """Run ``factory()``; SIGINT/SIGTERM cancel it once (it then cleans up and reports what it has)."""

    async def main() -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        fired = False

        def stop() -> None:
            nonlocal fired
            if not fired:
                fired = True
                task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        try:
            return await factory()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    return asyncio.run(main())


def prepare_outputs(*paths: Path | None) -> None:
    """Create the output directories now, so a bad path fails before the run rather than after it."""
    for path in paths:
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"{path}: cannot create its directory: {exc.strerror}") from None


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


def parse_headers(items: list[str], flag: str) -> list[tuple[str, str]]:
    """``Name: value`` options as (name, value) pairs, in order."""
    headers = []
    for item in items:
        name, colon, value = item.partition(":")
        if not colon or not _TOKEN.match(name.strip()):
            raise UsageError(f"{flag} {item!r}: expected 'Name: value'")
        if any(ch in value for ch in "\r\n"):
            raise UsageError(f"{flag} {item!r}: a header value cannot span lines")
        headers.append((name.strip(), value.strip()))
    return headers
