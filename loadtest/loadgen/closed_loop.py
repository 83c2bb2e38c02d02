"""The closed loop that runs a Taurus plan (``gpu-loadtest run --taurus``): virtual users, each sending one request
at a time and waiting for its answer before it goes on, as the JMeter threads Taurus drives do.

Unlike the open loop of ``--profile`` (``loadtest.loadgen.open_loop``), the offered rate here depends on the
service: when answers slow down, each user sends less often, so a saturated service sees fewer requests rather than
a growing queue. That is what a Taurus test measures, and why its request rate is an outcome, not a setting.

Each user (its start time from ``loadtest.loadgen.taurus.schedule``) repeats the scenario's requests in order; before
each request it waits the request's think time (JMeter runs timers before each sampler they apply to, and Taurus adds
the think time as a timer of every request: ``_get_timer`` in ``bzt/jmx/tools.py``), then, under a ``throughput`` cap,
for the execution's next free slot (slots are spaced ``1 / cap`` apart, the cap read from the shaper schedule); then it
sends and waits for the answer. A user stops at its execution's end (a request in flight still finishes: the run's drain
seconds) or after its ``iterations``. Every user has its own HTTP connection and, unless ``store-cookie: false``, its
own cookie jar, as JMeter's threads each have theirs; unless ``store-cache: false``, its own cache of one pass
(``loadtest.loadgen.taurus.cache``): a GET it holds fresh is not sent and not counted, as JMeter records no sample for
it, and a request of a URL it holds carries ``If-None-Match``/``If-Modified-Since``.

A request carries the file's headers and what JMeter's HttpClient 4 adds itself (``Host``, ``Connection``,
``User-Agent``, the body's ``Content-Length``), but no ``Accept`` or ``Accept-Encoding``: JMeter builds its client
with content compression off (``HTTPHC4Impl``: ``disableContentCompression``), so a server answers uncompressed as
it would to JMeter. The ``User-Agent`` is httpx's.

Latency is from the send to the end of the answer. Counts go into the per-second buckets of ``Recorder`` and, per
request label, into :class:`LabelStats` by the second the request finished in (an interrupted run reports the
seconds it recorded, labels included).
"""

from __future__ import annotations

import asyncio
import math
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx

from loadtest.loadgen.open_loop import Recorder, exchange, percentile
from loadtest.loadgen.taurus.cache import HttpCache
from loadtest.loadgen.taurus.plan import Execution, HttpRequest, Scenario, TaurusPlan
from loadtest.loadgen.taurus.schedule import RateCap

__all__ = ["ClosedLoopShape", "LabelStats", "VirtualUsers"]


@dataclass
class LabelStats:
    """Finished requests of one label."""

    ok: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, successful requests only

    def to_json(self) -> dict[str, Any]:
        def ms(q: float) -> float | None:
            value = percentile(self.latencies, q)
            return None if value is None else round(value * 1000.0, 2)

        return {"requests": self.ok + self.errors, "ok": self.ok, "errors": self.errors, "p50_ms": ms(50),
                "p95_ms": ms(95), "p99_ms": ms(99)}


class _Slots:
    """An execution's throughput cap: each request takes the next free slot, ``1 / cap`` after the previous one."""

    def __init__(self, cap: RateCap, origin: float) -> None:
        self.cap = cap
        self.origin = origin
        self.next = origin

    async def take(self, end_at: float | None) -> bool:
        """Wait for a slot; ``False`` when none comes before the end (the schedule is over)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        slot = max(now, self.next)
        rate = self.cap.rate_at(slot - self.origin)
        if rate <= 0 or (end_at is not None and slot >= end_at):
            return False
        self.next = slot + 1.0 / rate
        if slot > now:
            await asyncio.sleep(slot - now)
        return True


class _UserClient:
    """One virtual user's HTTP client: its connection, its cookie jar and, with ``store-cache``, its cache."""

    NOT_SENT_BY_JMETER = ("Accept", "Accept-Encoding")  # httpx's defaults that JMeter's HttpClient 4 leaves out

    def __init__(self, scenario: Scenario, tls: ssl.SSLContext) -> None:
        # A jar, not httpx.Cookies: the client copies the cookies of a Cookies object into a jar of its own (with
        # the default policy), but keeps a jar it is given.
        jar = CookieJar() if scenario.store_cookie else CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
        self.cache = HttpCache() if scenario.store_cache else None
        self._lookup: list[tuple[str, str]] = []  # the headers of the request on its way (one at a time)
        hooks: dict[str, list[Callable[..., Any]]] = (
            {"request": [self._validators], "response": [self._save]} if self.cache is not None else {})
        self.client = httpx.AsyncClient(verify=tls, cookies=jar, trust_env=False, event_hooks=hooks)
        for name in self.NOT_SENT_BY_JMETER:
            del self.client.headers[name]

    def new_pass(self) -> None:
        """A pass over the requests starts: JMeter's cache manager (clearEachIteration, as Taurus sets it)
        forgets what it held."""
        if self.cache is not None:
            self.cache.clear()

    def from_cache(self, request: HttpRequest) -> bool:
        """Whether ``request`` is a GET its cache holds fresh (not to be sent); notes its headers for the cache."""
        self._lookup = list(request.headers)
        if not any(name.lower() == "connection" for name, _ in self._lookup):
            self._lookup.append(("Connection", "keep-alive"))
        return (self.cache is not None and request.method == "GET"
                and self.cache.fresh(str(httpx.URL(request.url)), self._lookup, time.time()))

    async def _validators(self, request: httpx.Request) -> None:
        assert self.cache is not None
        for name, value in self.cache.validators(str(request.url), self._lookup):
            request.headers[name] = value  # replaces one the file set, as JMeter's setHeader does

    async def _save(self, response: httpx.Response) -> None:
        assert self.cache is not None
        sent = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in response.request.headers.raw]
        self.cache.save(response.request.method, str(response.request.url), response.status_code,
                        response.headers.multi_items(), sent, time.time())


class VirtualUsers(Recorder):
    """Runs ``plan``'s executions concurrently; ``active`` users are running now."""

    def __init__(self, plan: TaurusPlan, *, seed: int | None = None) -> None:
        super().__init__()
        self.plan = plan
        self._labels = list(dict.fromkeys(r.label for e in plan.executions for r in e.scenario.requests))
        self._label_seconds: list[dict[str, LabelStats]] = []  # by the second requests finished in
        self.active = 0
        self.load_end: float | None = None  # seconds in when the last user stopped
        self._changes: list[tuple[float, int]] = []  # (seconds in, users running from then on)
        self._rng = random.Random(seed)
        self._tls = httpx.create_ssl_context()  # one context for every user's client (building one is slow)

    def has_row(self, index: int) -> bool:
        """Second ``index`` has a timeline row: the plan runs then (or ran, when it ends by iterations), or
        requests finished in it."""
        length = self.plan.end_s if self.plan.end_s is not None else self.load_end
        if length is None:
            length = self.elapsed()
        return index < length or index < len(self.seconds)

    def labels(self, seconds: int | None = None) -> dict[str, LabelStats]:
        """Per label (in the file's order), the requests that finished in the first ``seconds`` seconds (all)."""
        totals = {label: LabelStats() for label in self._labels}
        for by_label in self._label_seconds[:seconds]:
            for label, stats in by_label.items():
                total = totals[label]
                total.ok += stats.ok
                total.errors += stats.errors
                total.latencies += stats.latencies
        return totals

    def users_in(self, index: int) -> int:
        """The most users running at once during second ``index``."""
        level = 0
        peak = None
        for at, running in self._changes:
            if at >= index + 1:
                break
            if at < index:
                level = running
            else:
                peak = max(running if peak is None else peak, running)
        return max(level, peak or 0)

    def _running(self, change: int) -> None:
        self.active += change
        self._changes.append((self.elapsed(), self.active))

    async def run(self) -> None:
        """Run every execution from now; return when every user has stopped."""
        loop = asyncio.get_running_loop()
        self.started_at = start = loop.time()
        users = []
        for execution in self.plan.executions:
            origin = start + execution.delay_s
            end = None if execution.end_s is None else origin + execution.end_s
            cap = execution.rate_cap()
            slots = None if cap is None else _Slots(cap, origin)
            users += [asyncio.create_task(self._user(execution, origin + offset, end, slots))
                      for offset in execution.user_starts() if end is None or origin + offset < end]
        try:
            await asyncio.gather(*users)
        finally:
            for task in users:
                task.cancel()
            await asyncio.gather(*users, return_exceptions=True)
            self.load_end = loop.time() - start

    async def _user(self, execution: Execution, start_at: float, end_at: float | None, slots: _Slots | None) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(start_at - loop.time(), 0.0))
        self._running(+1)
        user = _UserClient(execution.scenario, self._tls)
        try:
            passes = 0
            while execution.iterations is None or passes < execution.iterations:
                user.new_pass()
                for request in execution.scenario.requests:
                    if request.think is not None:
                        pause = request.think.sample(self._rng)
                        if end_at is not None and loop.time() + pause >= end_at:
                            return
                        await asyncio.sleep(pause)
                    if slots is not None and not await slots.take(end_at):
                        return
                    if end_at is not None and loop.time() >= end_at:
                        return
                    if not user.from_cache(request):
                        await self._send(user.client, request)
                passes += 1
        finally:
            self._running(-1)
            await user.client.aclose()

    async def _send(self, client: httpx.AsyncClient, request: HttpRequest) -> None:
        assert self.started_at is not None
        loop = asyncio.get_running_loop()
        sent = loop.time()
        self.second(int(sent - self.started_at)).sent += 1
        error = await exchange(client, request.method, request.url, headers=request.headers, content=request.body,
                               timeout=request.timeout_s, follow_redirects=request.follow_redirects)
        done = loop.time()
        self.record(sent, done, error)
        second = max(int(done - self.started_at), 0)
        while len(self._label_seconds) <= second:
            self._label_seconds.append({})
        stats = self._label_seconds[second].setdefault(request.label, LabelStats())
        if error is None:
            stats.ok += 1
            stats.latencies.append(done - sent)
        else:
            stats.errors += 1


@dataclass(frozen=True)
class ClosedLoopShape:
    """The timeline's view of a closed-loop run: the plan's phases and throughput cap, and its length (planned, or
    as long as the users ran when the plan ends by iterations)."""

    plan: TaurusPlan
    users: VirtualUsers

    @property
    def duration(self) -> float:
        """Planned; for a plan that ends by iterations, how long its users ran (infinite while they run)."""
        if self.plan.end_s is not None:
            return self.plan.end_s
        return self.users.load_end if self.users.load_end is not None else math.inf

    def phase_at(self, t: float) -> str:
        return self.plan.phase_at(t)

    def rate_at(self, t: float) -> float | None:
        return self.plan.rate_cap_at(t)

    @property
    def load_step_at(self) -> float | None:
        return self.plan.load_step_at

    @property
    def load_drop_at(self) -> float | None:
        return None

    def text(self) -> str:
        return self.plan.text()
