"""The scaler's calls admitted before their request is read: a seat first, then the request within a time limit.

gRPC hands a unary method its request only once the whole message has arrived, and until then the call is
already running: a client that opens calls and never sends their message would hold them (and everything a call
holds) for as long as it likes. So this interceptor serves every method as a request-streaming one (the same bytes
on the wire): it runs as soon as the call's headers arrive, takes a seat for the call's client
(``listener.seats``; none in time: RESOURCE_EXHAUSTED, as kube-apiserver answers 429), then reads the one
request message within ``read_timeout_s`` (else DEADLINE_EXCEEDED) and calls the method with it.

Unary methods (``IsActive``, ``GetMetrics``, ``GetMetricSpec``) take seats from ``calls``; a ``StreamIsActive`` or
``StreamMetricSpec`` takes one from ``streams`` for its whole life (its evaluations take ``calls`` seats, in the
servicer), as kube-apiserver keeps long-running requests (watches) out of ``--max-requests-inflight``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from grpc import aio
from prometheus_client import CollectorRegistry, Counter

from adapter.keda.peer import client_of
from listener.logs import QuietLog
from listener.seats import FairSeats

log = logging.getLogger("adapter.keda")
LOG_EVERY_S = 10.0  # one line per reason at most this often: a flood is counted, not logged call by call


class Refusals:
    """Refused calls: counted by method and reason, and logged one line per reason every ``LOG_EVERY_S``."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self._counter = Counter(
            "gpu_adapter_keda_refused_calls_total",
            "KEDA external-scaler calls refused before they ran, by method and reason (busy: no seat in time; "
            "slow-request: no request message in time).", ["method", "reason"],
            registry=registry) if registry is not None else None
        self._quiet = QuietLog(log, LOG_EVERY_S)
        self.total = 0

    def note(self, method: str, reason: str, client: str, detail: str) -> None:
        self.total += 1
        if self._counter is not None:
            self._counter.labels(method, reason).inc()
        self._quiet.warning(reason, f"KEDA scaler refused {method} from {client}: {detail} (further refusals for "
                                    f"{LOG_EVERY_S:g}s only counted in gpu_adapter_keda_refused_calls_total)")


class Guard(aio.ServerInterceptor):
    def __init__(self, calls: FairSeats, streams: FairSeats, read_timeout_s: float,
                 registry: CollectorRegistry | None = None) -> None:
        self.calls = calls
        self.streams = streams
        self.read_timeout_s = read_timeout_s
        self.refusals = Refusals(registry)

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: Any) -> Any:
        handler = await continuation(details)
        if handler is None or handler.request_streaming:
            return handler
        method = details.method.rsplit("/", 1)[-1]
        if handler.unary_unary is not None:
            return grpc.stream_unary_rpc_method_handler(self._unary(method, handler.unary_unary),
                                                        handler.request_deserializer, handler.response_serializer)
        return grpc.stream_stream_rpc_method_handler(self._stream(method, handler.unary_stream),
                                                     handler.request_deserializer, handler.response_serializer)

    def _unary(self, method: str, behaviour: Callable[[Any, Any], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(requests: AsyncIterator[Any], context: Any) -> Any:
            client = client_of(context.peer())
            async with self.calls.seat(client, _wait(self.calls, context)) as seated:
                if not seated:
                    await self._refuse(context, method, client, self.calls, "calls")
                return await behaviour(await self._request(requests, context, method, client), context)

        return call

    def _stream(self, method: str, behaviour: Callable[[Any, Any], AsyncIterator[Any]],
                ) -> Callable[..., AsyncIterator[Any]]:
        async def call(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            client = client_of(context.peer())
            async with self.streams.seat(client, _wait(self.streams, context)) as seated:
                if not seated:
                    await self._refuse(context, method, client, self.streams, "streams")
                request = await self._request(requests, context, method, client)
                async for response in behaviour(request, context):
                    yield response

        return call

    async def _request(self, requests: AsyncIterator[Any], context: Any, method: str, client: str) -> Any:
        try:
            request = await asyncio.wait_for(anext(requests, None), self.read_timeout_s)
        except TimeoutError:
            detail = f"no request message within {self.read_timeout_s:g}s"
            self.refusals.note(method, "slow-request", client, detail)
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, detail)
        if request is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without a request message")
        return request

    async def _refuse(self, context: Any, method: str, client: str, seats: FairSeats, kind: str) -> None:
        detail = f"{seats.in_use} {kind} running (the limit), {seats.waiting} waiting (at most {seats.max_waiting})"
        self.refusals.note(method, "busy", client, detail)
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"the scaler is busy: {detail}; try again later")


def _wait(seats: FairSeats, context: Any) -> float:
    """The configured wait, or less when the call's own deadline comes first."""
    remaining = context.time_remaining()
    return seats.wait_s if remaining is None else max(0.0, min(seats.wait_s, remaining))
