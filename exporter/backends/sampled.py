"""NVML calls that sample over a window before they answer, started together at the start of a collection.

``nvmlDeviceGetPcieThroughput`` counts PCIe traffic for 20 ms, then answers. On an H200 (driver 580.159.04) one
call took 20.9 ms, TX then RX 41.7 ms, and TX and RX on two threads 21.5 ms, while other NVML calls made meanwhile
from another thread answered as fast as ever (nvml.h: "NVML is thread-safe"). Made one after another, eight GPUs
with both fields would wait a third of a second in every collection. So each call a collection made is started on a
worker thread at the start of the next collection, and the field read takes its answer; a call not started that way
(the first collection, a field or GPU new since the last) is made in place. A call still running since an earlier
collection (a hung driver) is not started again: the read waits on it, as it would wait on the call made in place,
and the collector's hang watch handles that GPU as usual. Within a collection each call is made once: the MIG
instances of a GPU share its answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class SampledCalls:
    def __init__(self, max_workers: int = 32) -> None:
        self._max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._asked: dict[Hashable, Callable[[], Any]] = {}  # by this collection's reads, started by the next
        self._futures: dict[Hashable, Future[Any]] = {}  # started by this collection's begin
        self._answers: dict[Hashable, tuple[Any, Exception | None]] = {}  # this collection's

    def begin(self) -> None:
        """Start every call the previous collection asked for (the first collection asked for none)."""
        with self._lock:
            asked, earlier = self._asked, self._futures
            self._asked, self._futures, self._answers = {}, {}, {}
            for key, call in asked.items():
                running = earlier.get(key)
                if running is not None and not running.done():
                    self._futures[key] = running  # still in the driver: never pile threads up behind a hung call
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="nvml-sampled")
                self._futures[key] = self._pool.submit(call)

    def get(self, key: Hashable, call: Callable[[], Any]) -> Any:
        """The answer of ``call`` (``key`` names it across collections): this collection's if it has one, else from
        the call :meth:`begin` started, else made now. Errors are raised as the call raised them."""
        with self._lock:
            answer = self._answers.get(key)
            if answer is None:
                self._asked[key] = call
                future = self._futures.get(key)
        if answer is None:
            try:
                answer = (call() if future is None else future.result(), None)
            except Exception as exc:
                answer = (None, exc)
            with self._lock:
                self._answers[key] = answer
        value, error = answer
        if error is not None:
            raise error
        return value

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            self._asked, self._futures, self._answers = {}, {}, {}
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
