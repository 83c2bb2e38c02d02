"""At most one log line per kind of client misbehaviour per interval: a client that misbehaves ten thousand times a
second must not write ten thousand lines (nor a traceback) into the server's log."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

# uvicorn's own lines for requests its parser refused (httptools_impl.py): one per request otherwise.
UVICORN_CLIENT_ERRORS = ("Invalid HTTP request received.", "Unsupported upgrade request.")


class QuietLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._left_out: dict[str, int] = {}

    def warning(self, kind: str, message: str) -> bool:
        """Log ``message`` unless a line of ``kind`` went out less than the interval ago; whether it was logged."""
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return False
        self._last[kind] = now
        left_out = self._left_out.pop(kind, 0)
        suffix = (f" ({left_out} more like it in the last {now - last:.0f}s not logged)"
                  if left_out and last is not None else "")
        self.logger.warning("%s%s", message, suffix)
        return True


class QuietFilter(logging.Filter):
    """A logging filter that lets through one record per message text per interval (for a library's own lines
    about bad clients, e.g. uvicorn's)."""

    def __init__(self, messages: tuple[str, ...], interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.messages = frozenset(messages)
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message not in self.messages:
            return True
        now = self._clock()
        last = self._last.get(message)
        if last is not None and now - last < self.interval_s:
            return False
        self._last[message] = now
        return True


def quiet_uvicorn_client_errors(interval_s: float = 60.0) -> None:
    """Install :class:`QuietFilter` on uvicorn's error logger (once)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, QuietFilter) for f in logger.filters):
        logger.addFilter(QuietFilter(UVICORN_CLIENT_ERRORS, interval_s))
