"""How many requests the adapter answers at once, and for how long: kube-apiserver's ``--max-requests-inflight`` and
``--request-timeout`` (k8s.io/apiserver ``pkg/server/filters/maxinflight.go`` and ``timeout.go``).

Past the limit a request waits for a seat, in its client's queue, and seats are handed out in turn between clients
(listener.seats: API Priority and Fairness' fair queuing, with the client's address as the flow: the aggregator is one
client, a flooding pod another), at most a quarter of the request timeout (APF's request wait limit,
``RequestTimeout/4`` in pkg/server/config.go). A request that gets no seat in time, or finds the queues full, is
answered 429 with ``Retry-After: 1`` (maxinflight.go's ``retryAfter``, its message "Too many requests, please try
again later."), as a Status: client-go, which the HPA controller calls the aggregator with, waits that long and
sends the request again (rest/with_retry.go). A request whose answer has not begun within the timeout is answered
504 (timeout.go: "request did not complete within the allotted timeout").

Two differences from the apiserver, both because this server's authentication may call the API server
(TokenReview, SubjectAccessReview): a request counts from the moment its head is read, before it is authenticated
(the apiserver authenticates first), so a flood of unauthenticated requests cannot queue unbounded reviews; and
there is no exemption for ``system:masters`` (nobody is known yet). Probes and ``/metrics`` are not counted (API
Priority and Fairness puts probes in its exempt level; the adapter's own metrics must stay readable during a flood).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapter.api.status import ApiError
from adapter.server.lifecycle import EXEMPT_PATH_PREFIXES
from listener.addresses import client_address
from listener.seats import FairSeats

RETRY_AFTER_S = 1  # maxinflight.go: retryAfter = "1"
WAITING_PER_SEAT = 10  # requests that may wait for a seat, per seat (a few KiB each: their headers)
TOO_MANY = "Too many requests, please try again later."
TIMED_OUT = "request did not complete within the allotted timeout"


@dataclass
class RequestLimits:
    """The flags' values, and what the middleware counted under them (read by the self-metrics)."""

    max_in_flight: int = 20  # 0: no limit (the flag's meaning upstream)
    timeout_s: float = 60.0
    in_flight: int = 0
    peak: int = 0
    rejected_total: int = 0
    timed_out_total: int = 0


def _answer(code: int, message: str, details: dict | None = None) -> tuple[list[tuple[bytes, bytes]], bytes]:
    body = orjson.dumps(ApiError(code, message, details).body())
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return headers, body


_TOO_MANY_HEADERS, _TOO_MANY_BODY = _answer(429, TOO_MANY, {"retryAfterSeconds": RETRY_AFTER_S})
_TOO_MANY_HEADERS.append((b"retry-after", str(RETRY_AFTER_S).encode()))
_TIMEOUT_HEADERS, _TIMEOUT_BODY = _answer(504, TIMED_OUT)


class LimitInFlight:
    """ASGI middleware: at most ``counts.max_in_flight`` requests at once, each answered within its timeout."""

    def __init__(self, app: ASGIApp, counts: RequestLimits) -> None:
        self.app = app
        self.counts = counts
        n = counts.max_in_flight
        self.seats = FairSeats(n, n * WAITING_PER_SEAT, counts.timeout_s / 4) if n else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(EXEMPT_PATH_PREFIXES):
            await self.app(scope, receive, send)
            return
        c = self.counts
        if self.seats is not None and not await self.seats.take(flow_of(scope)):
            c.rejected_total += 1
            await _send(send, 429, _TOO_MANY_HEADERS, _TOO_MANY_BODY)
            return
        c.in_flight += 1
        c.peak = max(c.peak, c.in_flight)

        async def tracking(message: Message) -> None:
            if message["type"] == "http.response.start":
                deadline.reschedule(None)  # from here the listener's write timeout bounds the rest
            await send(message)

        try:
            async with asyncio.timeout(c.timeout_s) as deadline:
                await self.app(scope, receive, tracking)
        except TimeoutError:  # only before the answer began: the deadline is lifted once it does
            c.timed_out_total += 1
            await _send(send, 504, _TIMEOUT_HEADERS, _TIMEOUT_BODY)
        finally:
            c.in_flight -= 1
            if self.seats is not None:
                self.seats.give_back()


def flow_of(scope: Scope) -> str:
    """The flow a request belongs to: its client's address."""
    client = scope.get("client")
    return client_address(client[0]) if client else ""


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
