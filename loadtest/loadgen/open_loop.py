"""Open-loop HTTP load: send times come from the profile's rate alone, never from responses.

A slow service therefore still receives the target rate (its queue and latency grow instead of the rate
falling, unlike a closed loop of N clients). In-flight requests are bounded; a request due while the bound is
reached is dropped and counted, never delayed. Latency is measured from the request's *scheduled* send time, so
a lagging sender cannot hide queueing (no coordinated omission).

Per-second buckets: ``sent`` and ``dropped`` count in the second a request was due, ``ok``/``errors`` and the
latencies in the second it finished.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx

from loadtest.clock import REAL_TIME, DemoClock
from loadtest.loadgen.profile import Profile

__all__ = ["Arrivals", "LoadGenerator", "Recorder", "SecondStats", "exchange", "percentile"]

_IDLE_STEP_S = 0.05  # how far the schedule advances while the target rate is 0
_EPSILON_S = 1e-9


class Arrivals(StrEnum):
    UNIFORM = "uniform"  # evenly spaced: 1/rate apart
    POISSON = "poisson"  # exponential gaps with mean 1/rate


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


async def exchange(client: httpx.AsyncClient, method: str, url: str, **options: Any) -> str | None:
    """Send one request and read its answer: ``None`` when it succeeded, else what failed (``HTTP 503``,
    ``timeout``, or the kind of transport error). ``options`` go to ``client.request``."""
    try:
        response = await client.request(method, url, **options)
    except httpx.TimeoutException:
        return "timeout"
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return f"HTTP {response.status_code}" if response.status_code >= 400 else None


@dataclass
class SecondStats:
    sent: int = 0
    dropped: int = 0
    ok: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, successful requests only

    def p(self, q: float) -> float | None:
        return percentile(self.latencies, q)


class Recorder:
    """A load run's per-second buckets and error kinds, as both load generators record them (the open loop here,
    the closed loop of ``loadtest.loadgen.closed_loop``): a request counts as ``sent`` in the second it was sent (or
    due), ``ok``/``errors`` and its latency in the second it finished."""

    def __init__(self) -> None:
        self.seconds: list[SecondStats] = []
        self.error_kinds: Counter[str] = Counter()
        self.started_at: float | None = None  # loop time of t = 0

    def second(self, index: int) -> SecondStats:
        while len(self.seconds) <= index:
            self.seconds.append(SecondStats())
        return self.seconds[index]

    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return asyncio.get_running_loop().time() - self.started_at

    def totals(self) -> SecondStats:
        total = SecondStats()
        for s in self.seconds:
            total.sent += s.sent
            total.dropped += s.dropped
            total.ok += s.ok
            total.errors += s.errors
        return total

    def record(self, since: float, done: float, error: str | None) -> None:
        """A finished request: ``since`` is when its latency counts from, ``done`` when it finished (loop times)."""
        assert self.started_at is not None
        bucket = self.second(max(int(done - self.started_at), 0))
        if error is None:
            bucket.ok += 1
            bucket.latencies.append(max(done - since, 0.0))
        else:
            bucket.errors += 1
            self.error_kinds[error] += 1


class LoadGenerator(Recorder):
    """Drives ``profile`` against the URL ``target()`` returns at each send (``None``: no endpoint is ready,
    counted as an error like a Service without endpoints).

    A compressed ``clock`` (the demo with GPU nodes) makes each second of the profile stand for ``time_scale`` real
    seconds. Poisson arrivals then keep the noise a real-time count has over the same stretch: each second's count is
    a real-time Poisson count of ``time_scale`` seconds divided by ``time_scale`` (rounded at random), its requests
    spread at random over the second. Plain Poisson gaps would make a rate over a few seconds
    vary ``sqrt(time_scale)`` times more than the rate over its real-time span, and every window the HPA, Prometheus
    and the adapter take would read that as load changing.
    """

    def __init__(
        self,
        profile: Profile,
        target: Callable[[], str | None],
        *,
        method: str = "GET",
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        timeout_s: float = 5.0,
        max_inflight: int = 256,
        arrivals: Arrivals = Arrivals.UNIFORM,
        seed: int | None = None,
        clock: DemoClock = REAL_TIME,
    ) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight must be at least 1")
        super().__init__()
        self.profile = profile
        self.target = target
        self.method = method
        self.headers = list(headers)
        self.body = body
        self.timeout_s = timeout_s
        self.max_inflight = max_inflight
        self.arrivals = arrivals
        self.clock = clock
        self.inflight = 0
        self._random = random.Random(seed)
        self._tasks: set[asyncio.Task[None]] = set()

    def has_row(self, index: int) -> bool:
        """Whether second ``index`` has a timeline row: it lies in the profile, or requests sent during the profile
        finished in it (a drain second; its bucket exists once the first of them finished)."""
        return index < self.profile.duration or index < len(self.seconds)

    def _gap(self, rate: float) -> float:
        if self.arrivals is Arrivals.POISSON:
            return self._random.expovariate(rate)
        return 1.0 / rate

    def send_times(self) -> Iterator[float]:
        """When each request is due, in seconds from the start, in order."""
        duration = self.profile.duration
        if self.arrivals is Arrivals.POISSON and self.clock.compressed:
            for second in range(math.ceil(duration - _EPSILON_S)):
                span = min(1.0, duration - second)
                real = self._poisson(self.profile.rate_at(second + span / 2) * self.clock.real_seconds(span))
                count = math.floor(self.clock.demo_count(real))
                count += self._random.random() < self.clock.demo_count(real) - count
                yield from sorted(second + self._random.random() * span for _ in range(count))
            return
        t = 0.0
        while t < duration - _EPSILON_S:
            rate = self.profile.rate_at(t)
            if rate <= 0:
                t += _IDLE_STEP_S
                continue
            yield t
            t += self._gap(rate)

    def _poisson(self, mean: float) -> int:
        """A Poisson draw: by its definition (Knuth) for small means, the normal approximation beyond."""
        if mean <= 0:
            return 0
        if mean > 50:
            return max(0, round(self._random.gauss(mean, math.sqrt(mean))))
        limit, count, product = math.exp(-mean), 0, self._random.random()
        while product > limit:
            count += 1
            product *= self._random.random()
        return count

    async def run(self, client: httpx.AsyncClient | None = None) -> None:
        """Send the whole profile starting now; return once every request has finished."""
        own = client is None
        if client is None:
            limits = httpx.Limits(max_connections=self.max_inflight, max_keepalive_connections=self.max_inflight)
            client = httpx.AsyncClient(timeout=self.timeout_s, limits=limits, trust_env=False)
        loop = asyncio.get_running_loop()
        self.started_at = start = loop.time()
        try:
            duration = self.profile.duration
            for t in self.send_times():
                delay = start + t - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                self._send(client, start + t, t)
            remaining = start + duration - loop.time()
            if remaining > 0:
                await asyncio.sleep(remaining)
            if self._tasks:
                await asyncio.wait(set(self._tasks))
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(set(self._tasks))
            if own:
                await client.aclose()

    def _send(self, client: httpx.AsyncClient, due: float, t: float) -> None:
        bucket = self.second(int(t + _EPSILON_S))  # 20 gaps of 0.05 s may sum to 0.9999999999999999
        if self.inflight >= self.max_inflight:
            bucket.dropped += 1
            return
        bucket.sent += 1
        url = self.target()
        if url is None:
            self.record(due, asyncio.get_running_loop().time(), "no ready endpoint")
            return
        self.inflight += 1
        task = asyncio.create_task(self._request(client, url, due))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _request(self, client: httpx.AsyncClient, url: str, due: float) -> None:
        try:
            error = await exchange(client, self.method, url, headers=self.headers, content=self.body)
        finally:
            self.inflight -= 1
        self.record(due, asyncio.get_running_loop().time(), error)
