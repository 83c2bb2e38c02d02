"""The busy fraction of one simulated GPU over a sliding window: what ``DCGM_FI_DEV_GPU_UTIL`` reports on a real one
(the share of recent time a kernel was running)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

__all__ = ["BusyWindow"]


class BusyWindow:
    """Records busy intervals (``begin``/``end``, never nested) and reports the busy share of the last
    ``window_s`` seconds, counting an interval still running up to now. Give ``now`` to every call, or rely on
    the ``clock``."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError(f"the window must be positive, got {window_s}")
        self.window_s = window_s
        self._clock = clock
        self._done: deque[tuple[float, float]] = deque()
        self._since: float | None = None

    @property
    def busy(self) -> bool:
        return self._since is not None

    def begin(self, now: float | None = None) -> None:
        if self._since is not None:
            raise RuntimeError("the GPU is already busy")
        self._since = self._clock() if now is None else now

    def end(self, now: float | None = None) -> None:
        if self._since is None:
            raise RuntimeError("the GPU is not busy")
        at = self._clock() if now is None else now
        self._done.append((self._since, at))
        self._since = None
        self._forget(at)

    def fraction(self, now: float | None = None) -> float:
        """Busy share of ``[now - window_s, now]``, in 0..1."""
        at = self._clock() if now is None else now
        self._forget(at)
        start = at - self.window_s
        busy = sum(min(end, at) - max(begin, start) for begin, end in self._done if end > start and begin < at)
        if self._since is not None and self._since < at:
            busy += at - max(self._since, start)
        return min(max(busy / self.window_s, 0.0), 1.0)

    def _forget(self, now: float) -> None:
        start = now - self.window_s
        while self._done and self._done[0][1] <= start:
            self._done.popleft()
