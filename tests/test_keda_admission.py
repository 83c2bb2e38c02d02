"""The KEDA scaler's seats (``listener.seats``) and limits (``adapter.keda.limits``), without a server:
who is seated, in which order, who waits and who is refused; the gRPC core arguments each flag becomes; the flags
read into limits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from adapter.cli.flags import SERVE, UsageError
from adapter.cli.serve import keda_flags
from adapter.keda.limits import (
    MAX_METADATA_BYTES,
    MAX_REQUEST_BYTES,
    WAIT_S,
    ScalerLimits,
    admitted,
    channel_args,
)
from adapter.keda.peer import client_of
from clikit.flags import REQUIRED, Options
from listener.seats import FairSeats

pytestmark = pytest.mark.unit


def run(test: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(test())


class Calls:
    """Calls of named clients taking seats in order; ``order`` is who got one, as they got it."""

    def __init__(self, seats: FairSeats) -> None:
        self.seats = seats
        self.order: list[str] = []
        self.refused: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, name: str, client: str | None = None) -> None:
        async def call() -> None:
            if await self.seats.take(client or name[0]):
                self.order.append(name)
            else:
                self.refused.append(name)

        self.tasks.append(asyncio.ensure_future(call()))

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def waiting(self, *names: str) -> Calls:
        """Every seat taken by "x", then ``names`` started (each waits, or is refused)."""
        while self.seats.in_use < self.seats.seats:
            assert await self.seats.take("x")
        for name in names:
            self.start(name)
        await self.settle()
        return self

    async def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def test_free_seats_are_taken_at_once_and_given_back() -> None:
    async def scenario() -> None:
        seats = FairSeats(2, max_waiting=0, wait_s=1)
        assert await seats.take("a") and await seats.take("b")
        assert not await seats.take("c")  # full, and nowhere to wait: refused at once
        seats.give_back()
        assert seats.in_use == 1 and await seats.take("c")
    run(scenario)


def test_freed_seats_go_to_waiting_clients_in_turn() -> None:
    """A flooding client ("a", ten calls waiting) and KEDA ("k", one call waiting later): KEDA's call is seated
    after at most one more of the flood's, not after all ten."""
    async def scenario() -> None:
        seats = FairSeats(1, max_waiting=100, wait_s=5)
        calls = await Calls(seats).waiting(*(f"a{i}" for i in range(10)))
        calls.start("k0")
        await calls.settle()
        for _ in range(4):
            seats.give_back()
            await calls.settle()
        assert calls.order == ["a0", "k0", "a1", "a2"]
        assert seats.in_use == 1 and seats.waiting == 7
        await calls.cancel()
        assert seats.waiting == 0
    run(scenario)


def test_a_full_queue_pushes_out_the_longest_queues_newest_call() -> None:
    async def scenario() -> None:
        seats = FairSeats(1, max_waiting=4, wait_s=5)
        calls = await Calls(seats).waiting("a0", "a1", "a2", "a3")
        calls.start("k0")  # the queues are full: a's newest waiting call makes room
        await calls.settle()
        assert calls.refused == ["a3"] and seats.waiting == 4
        calls.start("a4")  # a (3 waiting) is longer than k (1): its own call is refused, nobody is pushed out
        await calls.settle()
        assert calls.refused == ["a3", "a4"]
        for _ in range(2):
            seats.give_back()
            await calls.settle()
        assert calls.order == ["a0", "k0"]
        await calls.cancel()
    run(scenario)


def test_waiting_is_bounded_in_time() -> None:
    async def scenario() -> None:
        seats = FairSeats(1, max_waiting=10, wait_s=0.05)
        assert await seats.take("x")
        assert not await seats.take("a")
        assert not await seats.take("a", wait_s=0.0)
        assert seats.waiting == 0 and seats.in_use == 1
    run(scenario)


def test_a_call_that_goes_away_while_seated_gives_its_seat_on() -> None:
    """The seat was handed to a waiting call in the same turn of the loop as that call was cancelled."""
    async def scenario() -> None:
        seats = FairSeats(1, max_waiting=10, wait_s=5)
        assert await seats.take("x")
        waiting = asyncio.ensure_future(seats.take("a"))
        later = asyncio.ensure_future(seats.take("b"))
        await asyncio.sleep(0)
        seats.give_back()  # to a...
        waiting.cancel()  # ...which is gone before it ran: b gets it
        await asyncio.gather(waiting, return_exceptions=True)
        assert await later and seats.in_use == 1 and seats.waiting == 0
    run(scenario)


def test_seat_context_gives_back_on_leaving() -> None:
    async def scenario() -> None:
        seats = FairSeats(1, max_waiting=0, wait_s=1)
        async with seats.seat("a") as seated:
            assert seated and seats.in_use == 1
            async with seats.seat("b") as other:
                assert not other
        assert seats.in_use == 0
    run(scenario)


@pytest.mark.parametrize(("peer", "client"), [
    ("ipv4:10.1.2.3:5555", "10.1.2.3"),
    ("ipv6:[fd00::2]:5555", "fd00::2"),
    ("ipv6:[::ffff:10.1.2.3]:5555", "10.1.2.3"),  # a dual-stack listener: the IPv4 client
    ("unix:/run/scaler.sock", "unix:/run/scaler.sock"),
])
def test_a_client_is_its_address_not_its_connection(peer: str, client: str) -> None:
    assert client_of(peer) == client


# -- the gRPC core arguments -----------------------------------------------------------------------------------
def test_limits_become_grpc_core_arguments() -> None:
    args = dict(channel_args(ScalerLimits()))
    assert args == {
        "grpc.so_reuseport": 0,
        "grpc.max_concurrent_streams": admitted(ScalerLimits()),
        "grpc.server_handshake_timeout_ms": 10_000,
        "grpc.max_connection_idle_ms": 300_000,
        "grpc.max_connection_age_ms": 1_800_000,
        "grpc.max_connection_age_grace_ms": 600_000,
        "grpc.http2.min_ping_interval_without_data_ms": 300_000,
        "grpc.http2.max_ping_strikes": 2,
        "grpc.keepalive_permit_without_calls": 0,
        "grpc.keepalive_time_ms": 120_000,
        "grpc.keepalive_timeout_ms": 20_000,
        "grpc.max_receive_message_length": MAX_REQUEST_BYTES,
        "grpc.max_metadata_size": MAX_METADATA_BYTES,
        "grpc.absolute_max_metadata_size": MAX_METADATA_BYTES,
        "grpc.max_allowed_incoming_connections": 1000,
    }


def test_zero_means_no_limit() -> None:
    args = dict(channel_args(ScalerLimits(max_connections=0, max_connection_idle_s=0, max_connection_age_s=0,
                                          max_connection_age_grace_s=0), reuse_port=True))
    assert "grpc.max_allowed_incoming_connections" not in args
    assert args["grpc.max_connection_idle_ms"] == args["grpc.max_connection_age_ms"] == 2**31 - 1
    assert args["grpc.max_connection_age_grace_ms"] == 2**31 - 1 and args["grpc.so_reuseport"] == 1


def test_one_connection_can_use_every_seat() -> None:
    """KEDA sends all its calls and streams over one connection (getClientForConnectionPool): HTTP/2's stream limit
    must not be what stops it before the seats do."""
    limits = ScalerLimits(max_requests_inflight=10, max_streams=7)
    assert dict(channel_args(limits))["grpc.max_concurrent_streams"] >= 10 + 7


@pytest.mark.parametrize(("grace_s", "evaluation_s", "expected"), [
    (600.0, 10.0, ((600 - 10 - WAIT_S) / 2, 600 - 10 - WAIT_S)),
    (0.0, 10.0, None),  # no grace: streams end only when KEDA or the server ends them
])
def test_a_streams_lifetime_ends_within_the_grace(grace_s: float, evaluation_s: float, expected: Any) -> None:
    assert ScalerLimits(max_connection_age_grace_s=grace_s).stream_lifetime_s(evaluation_s) == expected


def test_a_grace_shorter_than_an_evaluation_is_refused() -> None:
    with pytest.raises(ValueError, match="takes up to 15s"):
        ScalerLimits(max_connection_age_grace_s=12).stream_lifetime_s(10)


# -- the flags ---------------------------------------------------------------------------------------------------
def options(**given: Any) -> Options:
    values = {f.attribute: f.default for f in SERVE if f.default is not REQUIRED}
    values.update(prometheus_url="http://127.0.0.1:9090", keda_scaler_port=9443, keda_scaler_insecure=True)
    values.update(given)
    return Options(**values)


def test_flags_become_limits() -> None:
    keda = keda_flags(options(keda_scaler_max_requests_inflight=8, keda_scaler_max_streams=9,
                              keda_scaler_max_connections=0, keda_scaler_handshake_timeout="2s",
                              keda_scaler_max_connection_idle="0", keda_scaler_max_connection_age="1h",
                              keda_scaler_max_connection_age_grace="1m", keda_scaler_keepalive_min_time="30s"))
    assert keda is not None
    assert keda.limits == ScalerLimits(8, 9, 0, 2.0, 0.0, 3600.0, 60.0, 30.0)
    # 60 s less a 5 s stream interval, the 5 s Prometheus timeout and the wait for a seat
    assert keda.stream_lifetime_s == (22.5, 45.0)


def test_the_defaults_are_the_limits_defaults() -> None:
    keda = keda_flags(options())
    assert keda is not None and keda.limits == ScalerLimits()


@pytest.mark.parametrize(("given", "needle"), [
    ({"keda_scaler_handshake_timeout": "0"}, "--keda-scaler-handshake-timeout"),
    ({"keda_scaler_max_connection_age": "soon"}, "--keda-scaler-max-connection-age"),
    ({"keda_scaler_max_connection_age_grace": "10s"}, "--keda-scaler-max-connection-age-grace 10s: too short"),
])
def test_bad_limits_are_refused(given: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        keda_flags(options(**given))
