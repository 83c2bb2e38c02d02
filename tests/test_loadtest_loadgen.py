"""The open-loop load generator: it keeps sending at the target rate when the service stops answering, drops (and
counts) what exceeds its in-flight bound, and counts every failure."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from loadtest.clock import DemoClock
from loadtest.loadgen.open_loop import Arrivals, LoadGenerator, percentile
from loadtest.loadgen.profile import parse_profile
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.unit


class HeldServer:
    """An HTTP server that answers nothing until released, then ``status`` to everything."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.release = asyncio.Event()
        self.received = 0
        self.url = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/infer"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                self.received += 1
                await self.release.wait()
                writer.write(f"HTTP/1.1 {self.status} X\r\nContent-Length: 2\r\n\r\nok".encode())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        self.release.set()



def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def test_rate_is_held_while_the_service_does_not_answer() -> None:
    async def scenario() -> None:
        server = HeldServer()
        await server.start()
        gen = LoadGenerator(parse_profile("1s:20,1s:40"), lambda: server.url, timeout_s=60, max_inflight=1000)
        task = asyncio.create_task(gen.run())
        # Every request of the profile goes out although none has been answered: the loop is open.
        await wait_until_async(lambda: gen.totals().sent == 60)
        assert gen.inflight == 60
        await wait_until_async(lambda: server.received == 60)
        server.release.set()
        await task
        await server.stop()
        assert [s.sent for s in gen.seconds[:2]] == [20, 40]
        totals = gen.totals()
        assert (totals.ok, totals.errors, totals.dropped) == (60, 0, 0)
        assert gen.inflight == 0
        # Latency counts from the scheduled send time, so the first request waited the longest.
        latencies = [lat for s in gen.seconds for lat in s.latencies]
        assert len(latencies) == 60
        assert max(latencies) >= 1.0

    run(scenario())


def test_requests_beyond_the_in_flight_bound_are_dropped_and_counted() -> None:
    async def scenario() -> None:
        server = HeldServer()
        await server.start()
        gen = LoadGenerator(parse_profile("1s:20"), lambda: server.url, timeout_s=60, max_inflight=5)
        task = asyncio.create_task(gen.run())
        await wait_until_async(lambda: gen.totals().sent + gen.totals().dropped == 20)
        server.release.set()
        await task
        await server.stop()
        totals = gen.totals()
        assert (totals.sent, totals.dropped, totals.ok) == (5, 15, 5)

    run(scenario())


def test_failures_are_counted_by_kind() -> None:
    async def scenario() -> None:
        server = HeldServer(status=503)
        server.release.set()
        await server.start()
        gen = LoadGenerator(parse_profile("1s:10"), lambda: server.url, timeout_s=10)
        await gen.run()
        await server.stop()
        none = LoadGenerator(parse_profile("1s:10"), lambda: None)
        await none.run()
        assert (gen.totals().errors, gen.totals().ok) == (10, 0)
        assert dict(gen.error_kinds) == {"HTTP 503": 10}
        assert dict(none.error_kinds) == {"no ready endpoint": 10}

    run(scenario())


def test_timeouts_are_errors_not_latencies() -> None:
    async def scenario() -> None:
        server = HeldServer()
        await server.start()
        gen = LoadGenerator(parse_profile("1s:5"), lambda: server.url, timeout_s=0.2, arrivals=Arrivals.UNIFORM)
        await gen.run()
        await server.stop()
        assert (gen.totals().sent, gen.totals().errors) == (5, 5)
        assert dict(gen.error_kinds) == {"timeout": 5}
        assert not [lat for s in gen.seconds for lat in s.latencies]

    run(scenario())


def test_a_zero_rate_segment_sends_nothing() -> None:
    async def scenario() -> None:
        sent: list[int] = []
        gen = LoadGenerator(parse_profile("1s:0,1s:4"), lambda: sent.append(1) or None)  # type: ignore[func-returns-value]
        await gen.run()
        assert [s.sent for s in gen.seconds[:2]] == [0, 4]
        assert len(sent) == 4

    run(scenario())


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 95) == 95
    assert percentile(values, 100) == 100
    assert percentile([7.0], 95) == 7
    assert percentile([], 50) is None


def _window_counts(times: list[float], seconds: int, window: int) -> list[int]:
    per_second = [0] * seconds
    for t in times:
        per_second[int(t)] += 1
    return [sum(per_second[i:i + window]) for i in range(0, seconds - window + 1, window)]


def test_a_compressed_run_keeps_the_noise_of_its_real_time_span() -> None:
    """At 20 times real time, 6 s of the demo stand for 2 minutes: their count of a 10 requests/s Poisson load must
    vary as 1200 requests do (sd 35, 2.9 %), not as 60 do (sd 7.7, 13 %), or a rate over them reads as load changing."""
    profile = parse_profile("3000s:10")
    compressed = LoadGenerator(profile, lambda: None, arrivals=Arrivals.POISSON, clock=DemoClock(20.0), seed=7)
    plain = LoadGenerator(profile, lambda: None, arrivals=Arrivals.POISSON, seed=7)
    for generator, expected_sd in ((compressed, 60 * (1200 ** 0.5) / 1200), (plain, 60 ** 0.5)):
        times = list(generator.send_times())
        assert times == sorted(times) and times[0] >= 0 and times[-1] < 3000
        counts = _window_counts(times, 3000, 6)
        mean = sum(counts) / len(counts)
        sd = (sum((c - mean) ** 2 for c in counts) / len(counts)) ** 0.5
        assert mean == pytest.approx(60, rel=0.03)
        # within a quarter (rounding each second's count at random adds a little to the compressed one)
        assert sd == pytest.approx(expected_sd, rel=0.25), (generator.clock, sd)


def test_a_compressed_run_follows_ramps_and_idle_spells() -> None:
    profile = parse_profile("100s:0,100s:0..40,100s:40")
    times = list(LoadGenerator(profile, lambda: None, arrivals=Arrivals.POISSON, clock=DemoClock(20.0),
                               seed=3).send_times())
    assert not [t for t in times if t < 100]
    assert len([t for t in times if 100 <= t < 200]) == pytest.approx(2000, rel=0.05)
    assert len([t for t in times if t >= 200]) == pytest.approx(4000, rel=0.05)
    with pytest.raises(ValueError, match="time_scale"):
        LoadGenerator(profile, lambda: None, clock=DemoClock(0.5))
