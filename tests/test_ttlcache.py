"""CoalescingCache's edges: what its callers see when they leave, when the fetch fails or is cancelled, and that
nothing is left behind for asyncio to complain about; and what ``lookup`` says about where a value came from.
(Sharing and reuse are also tested through QueryCache in test_querycache.py and through the token and access
caches in test_auth_units.py.)"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from adapter.prometheus.coalescing import CoalescingCache

pytestmark = pytest.mark.unit


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def run_collecting_loop_errors(scenario: Any) -> list[dict[str, Any]]:
    """Run ``scenario()`` on a fresh loop; return what reached the loop's exception handler (e.g. "exception was
    never retrieved"), collected after the garbage collector has seen every future."""
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: seen.append(context))
        await scenario()
        await settle()
        gc.collect()
        await settle()

    asyncio.run(main())
    return seen


def test_a_failure_that_every_caller_left_is_not_reported_as_never_retrieved() -> None:
    async def scenario() -> None:
        cache: CoalescingCache[int] = CoalescingCache(lambda _: 0)
        gate = asyncio.Event()

        async def fetch() -> int:
            await gate.wait()
            raise RuntimeError("Prometheus said no")

        callers = [asyncio.create_task(cache.get("k", fetch)) for _ in range(3)]
        await settle()
        for caller in callers:
            caller.cancel()
        await settle()
        gate.set()
        await settle()
        assert all(caller.cancelled() for caller in callers)

    assert run_collecting_loop_errors(scenario) == []


def test_a_failure_reaches_each_caller_still_waiting_and_is_not_reported() -> None:
    async def scenario() -> None:
        cache: CoalescingCache[int] = CoalescingCache(lambda _: 60)
        gate = asyncio.Event()
        calls = 0

        async def fetch() -> int:
            nonlocal calls
            calls += 1
            await gate.wait()
            raise RuntimeError("Prometheus said no")

        leaving = asyncio.create_task(cache.get("k", fetch))
        staying = [asyncio.create_task(cache.get("k", fetch)) for _ in range(2)]
        await settle()
        leaving.cancel()
        gate.set()
        for caller in staying:
            with pytest.raises(RuntimeError, match="said no"):
                await asyncio.wait_for(caller, timeout=5)
        assert calls == 1 and len(cache) == 0  # shared, never kept

    assert run_collecting_loop_errors(scenario) == []


def test_a_cancelled_fetch_cancels_its_callers_instead_of_leaving_them_waiting() -> None:
    async def scenario() -> None:
        cache: CoalescingCache[int] = CoalescingCache(lambda _: 0)
        started = asyncio.Event()

        async def fetch() -> int:
            started.set()
            await asyncio.Event().wait()  # never answers
            return 1

        callers = [asyncio.create_task(cache.get("k", fetch)) for _ in range(2)]
        await started.wait()
        (fetching,) = [t for t in asyncio.all_tasks() if t not in callers and t is not asyncio.current_task()]
        fetching.cancel()  # as at shutdown, when the loop cancels every task
        done, _ = await asyncio.wait(callers, timeout=5)
        assert done == set(callers) and all(caller.cancelled() for caller in callers)

        async def answer() -> int:
            return 2

        assert await cache.get("k", answer) == 2  # the key is free again

    assert run_collecting_loop_errors(scenario) == []


def test_a_failure_after_the_fetch_reaches_the_callers() -> None:
    def ttl(_value: int) -> float:
        raise ValueError("no lifetime for this value")

    async def scenario() -> None:
        cache: CoalescingCache[int] = CoalescingCache(ttl)

        async def fetch() -> int:
            await asyncio.sleep(0)
            return 1

        results = await asyncio.wait_for(asyncio.gather(cache.get("k", fetch), cache.get("k", fetch),
                                                        return_exceptions=True), timeout=5)
        assert [type(r) for r in results] == [ValueError, ValueError]
        assert cache.misses == 1 and cache.coalesced == 1

    assert run_collecting_loop_errors(scenario) == []


def test_a_value_is_shared_and_kept_for_its_ttl() -> None:
    now = [100.0]

    async def scenario() -> None:
        cache: CoalescingCache[int] = CoalescingCache(lambda _: 10, clock=lambda: now[0])
        calls = 0

        async def fetch() -> int:
            nonlocal calls
            calls += 1
            await asyncio.sleep(0)
            return calls

        assert await asyncio.gather(*(cache.lookup("k", fetch) for _ in range(3))) == [
            (1, "miss"), (1, "coalesced"), (1, "coalesced")]
        assert await cache.lookup("k", fetch) == (1, "hit")
        now[0] += 10  # counted from when the fetch started
        assert await cache.lookup("k", fetch) == (2, "miss")

    assert run_collecting_loop_errors(scenario) == []
