"""The shutdown sequence as a state machine on a fake clock, and the per-request middleware driven as ASGI: when
the listener is due to close, what a request is answered in each phase, what counts for the drain. The sequence
and the exemptions are k8s.io/apiserver's (pkg/server/genericapiserver.go, filters/with_retry_after.go)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from adapter.server.lifecycle import (
    DrainRequests,
    Lifecycle,
    Phase,
    ShutdownSettings,
    exempt,
)

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lifecycle(**settings: Any) -> tuple[Lifecycle, Clock]:
    clock = Clock()
    return Lifecycle(ShutdownSettings(**settings), clock), clock


def test_serving_until_the_signal_then_the_delay_then_the_listener_closes() -> None:
    lc, clock = lifecycle(delay_s=15, drain_timeout_s=10)
    assert lc.phase is Phase.SERVING and not lc.shutting_down
    lc.initiate()
    assert lc.phase is Phase.DELAY and lc.shutting_down and not lc.rejecting
    clock.now += 14.9
    assert lc.due() is False
    clock.now += 0.1
    assert lc.due() is True
    assert lc.phase is Phase.DRAINING and not lc.rejecting
    assert lc.listener_close_timeout_s == 10  # uvicorn's shutdown waits this long for requests in flight


def test_a_second_initiate_changes_nothing() -> None:
    lc, clock = lifecycle(delay_s=15)
    lc.initiate()
    clock.now += 10
    lc.initiate()
    clock.now += 5
    assert lc.due() is True


def test_no_delay_closes_at_the_first_tick() -> None:
    lc, _ = lifecycle(delay_s=0)
    lc.initiate()
    assert lc.due() is True


def test_send_retry_after_keeps_listening_until_drained_or_the_timeout() -> None:
    lc, clock = lifecycle(delay_s=5, drain_timeout_s=10, send_retry_after=True)
    lc.initiate()
    lc.in_flight = 2
    clock.now += 5
    assert lc.due() is False and lc.phase is Phase.DRAINING and lc.rejecting
    lc.in_flight = 0
    assert lc.due() is True
    assert lc.listener_close_timeout_s == 2.0  # upstream's hard-coded server shutdown timeout in this mode

    lc, clock = lifecycle(delay_s=5, drain_timeout_s=10, send_retry_after=True)
    lc.initiate()
    lc.in_flight = 1
    clock.now += 5
    assert lc.due() is False
    clock.now += 9.9
    assert lc.due() is False
    clock.now += 0.1
    assert lc.due() is True  # a request that never ends does not hold the exit


def test_drain_hooks_start_when_the_delay_is_over_with_the_drain_timeout() -> None:
    started: list[float] = []

    async def hook(timeout_s: float) -> None:
        started.append(timeout_s)

    async def scenario() -> None:
        lc, clock = lifecycle(delay_s=3, drain_timeout_s=7)
        lc.on_drain(hook)
        lc.initiate()
        lc.due()
        await asyncio.sleep(0)
        assert started == []
        clock.now += 3
        lc.due()
        await asyncio.sleep(0)
        assert started == [7]

    asyncio.run(scenario())


async def ok_app(scope: dict, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def call(middleware: DrainRequests, path: str, user_agent: str = "") -> list[dict]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "path": path, "method": "GET",
             "headers": [(b"user-agent", user_agent.encode())] if user_agent else []}
    asyncio.run(middleware(scope, receive, send))  # type: ignore[arg-type]
    return sent


# k8s.io/apiserver pkg/server/filters/with_retry_after_test.go, TestWithRetryAfter: (name, path, user agent,
# retry-after window open, handler invoked, status, Retry-After). The ASGI path carries no query string (upstream's
# "/metrics?foo=bar", "/livez?verbose"). One deliberate difference: upstream sends Connection: close only with its 429,
# this server with every response once the shutdown has begun (adapter/server/lifecycle.py says why).
UPSTREAM_RETRY_AFTER = [
    ("retry-after disabled", "/api/v1/namespaces", "foo", False, True, 200, None),
    ("retry-after enabled, request is not exempt", "/api/v1/namespaces", "foo", True, False, 429, b"5"),
    ("retry-after enabled, request is exempt(/metrics)", "/metrics", "foo", True, True, 200, None),
    ("retry-after enabled, request is exempt(/livez)", "/livez", "foo", True, True, 200, None),
    ("retry-after enabled, request is exempt(/readyz)", "/readyz", "foo", True, True, 200, None),
    ("retry-after enabled, request is exempt(/healthz)", "/healthz", "foo", True, True, 200, None),
    ("retry-after enabled, request is exempt(local loopback)", "/api/v1/namespaces", "kube-apiserver/", True, True,
     200, None),
]


@pytest.mark.parametrize(("name", "path", "user_agent", "open_window", "invoked", "status", "retry_after"),
                         UPSTREAM_RETRY_AFTER, ids=[case[0] for case in UPSTREAM_RETRY_AFTER])
def test_upstreams_retry_after_table(name: str, path: str, user_agent: str, open_window: bool, invoked: bool,
                                     status: int, retry_after: bytes | None) -> None:
    lc, clock = lifecycle(delay_s=1, send_retry_after=True)
    calls: list[str] = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        calls.append(scope["path"])
        await ok_app(scope, receive, send)

    if open_window:
        lc.initiate()
        clock.now += 1
        lc.in_flight = 1  # a request in flight keeps the window open
        lc.due()
        assert lc.rejecting
    start = call(DrainRequests(app, lc), path, user_agent)[0]
    assert bool(calls) is invoked and start["status"] == status
    assert dict(start["headers"]).get(b"retry-after") == retry_after
    if open_window:  # served while the window is open: exactly upstream's exemptions
        assert exempt({"path": path, "headers": [(b"user-agent", user_agent.encode())]}) is invoked


def test_responses_tell_clients_to_close_once_the_shutdown_has_begun() -> None:
    lc, clock = lifecycle(delay_s=15)
    app = DrainRequests(ok_app, lc)
    [start, _] = call(app, "/apis")
    assert (b"connection", b"close") not in start["headers"]
    lc.initiate()
    [start, body] = call(app, "/apis")
    assert start["status"] == 200 and (b"connection", b"close") in start["headers"] and body["body"] == b"ok"
    [start, _] = call(app, "/readyz")
    assert (b"connection", b"close") in start["headers"]
    assert lc.told_to_close_total == 2
    clock.now += 15
    lc.due()
    [start, _] = call(app, "/apis")  # without --shutdown-send-retry-after, still answered (in flight at the close)
    assert start["status"] == 200


def test_draining_with_retry_after_answers_429_status_except_to_the_exempt() -> None:
    lc, clock = lifecycle(delay_s=1, send_retry_after=True)
    app = DrainRequests(ok_app, lc)
    lc.initiate()
    clock.now += 1
    lc.in_flight = 1  # something in flight keeps the listener open
    lc.due()
    start, body = call(app, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/util")
    headers = dict(start["headers"])
    assert start["status"] == 429 and headers[b"retry-after"] == b"5" and headers[b"connection"] == b"close"
    status = json.loads(body["body"])
    assert (status["kind"], status["code"], status["reason"], status["details"]) == (
        "Status", 429, "TooManyRequests", {"retryAfterSeconds": 5})
    assert int(headers[b"content-length"]) == len(body["body"])
    assert call(app, "/readyz")[0]["status"] == 200  # the app decides what /readyz says (503 while shutting down)
    assert call(app, "/apis", "kube-apiserver/v1.33.1")[0]["status"] == 200
    assert lc.rejected_total == 1


def test_in_flight_counts_requests_that_are_not_exempt() -> None:
    lc, _ = lifecycle()
    seen: list[int] = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        seen.append(lc.in_flight)
        await ok_app(scope, receive, send)

    middleware = DrainRequests(app, lc)
    call(middleware, "/apis")
    call(middleware, "/metrics")
    assert seen == [1, 0] and lc.in_flight == 0
