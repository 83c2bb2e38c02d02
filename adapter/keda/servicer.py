"""``externalscaler.ExternalScaler`` over the HTTP APIs' providers: metadata in, the provider's answer out.

Everything that decides a value is shared with custom.metrics.k8s.io and external.metrics.k8s.io: the same
``CustomMetrics``/``ExternalMetrics`` over the one engine, so the same rules, query coalescing and reuse, sample-age
limit and no-invented-value policy. A failure is a gRPC status with the API's message (``adapter.keda.wire``
maps the codes): KEDA then keeps the current scale, or uses the ScaledObject's ``fallback``.

``StreamIsActive`` (trigger type ``external-push``) evaluates the trigger every ``stream_interval_s`` and sends the
activity when it changes (the first evaluation is always sent). KEDA acts on ``true`` only, to scale from zero
at once; deactivation goes through its polling loop (``IsActive``). While the metric has no value (Prometheus down,
no sample, or no seat for the evaluation: each takes one from the same ``calls`` seats as the unary methods, so open
streams cannot query Prometheus past ``--keda-scaler-max-requests-inflight``) nothing is sent and the stream stays
open, so KEDA is not pushed into its reconnect back-off (up to a minute) right when the value comes back; a
metadata map that can never work ends the stream with its status. A stream ends by itself, with status OK and
between two evaluations, after a random time within ``stream_lifetime_s``: KEDA opens it again 2 s later (a clean
end resets its back-off), on the connection then current, so no stream is still open when a connection's
``--keda-scaler-max-connection-age-grace`` runs out (kube-apiserver ends watches after a random 1-2 times
``--min-request-timeout`` for the same reason).
``StreamMetricSpec`` is not implemented: the target comes from the metadata and never changes on its own, and
KEDA treats UNIMPLEMENTED as "use GetMetricSpec".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from prometheus_client import CollectorRegistry, Histogram

from adapter.api.status import ApiError
from adapter.keda import wire
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.metadata import MetadataError, Trigger, parse_metadata
from adapter.keda.peer import client_of
from adapter.provider.custom import CustomMetrics
from adapter.provider.external import ExternalMetrics
from adapter.rules import ResourceError, normalise_resource
from listener.seats import FairSeats

log = logging.getLogger("adapter.keda")
access_log = logging.getLogger("adapter.access")
T = TypeVar("T")


class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    def __init__(self, custom: CustomMetrics, external: ExternalMetrics, stream_interval_s: float,
                 registry: CollectorRegistry | None = None, calls: FairSeats | None = None,
                 stream_lifetime_s: tuple[float, float] | None = None) -> None:
        """``calls``: the seats a stream's evaluations take (None: none needed); ``stream_lifetime_s``: the range a
        stream's lifetime is drawn from (None: streams end only when KEDA or the server ends them)."""
        self.custom = custom
        self.external = external
        self.stream_interval_s = stream_interval_s
        self.calls = calls
        self.stream_lifetime_s = stream_lifetime_s
        self._draining = asyncio.Event()  # set when the server drains: open streams end with status OK
        self._durations = Histogram(
            "gpu_adapter_keda_request_duration_seconds",
            "KEDA external-scaler calls, by method and gRPC status code (streams: their whole life).",
            ["method", "code"], registry=registry) if registry is not None else None

    async def value(self, trigger: Trigger, namespace: str) -> float:
        """The trigger's one number, as the HTTP API would answer it; an ``ApiError`` when there is none."""
        query = wire.provider_query(trigger, namespace)
        if isinstance(query, wire.CustomQuery):
            if trigger.zero_when_none_selected and await self._none_selected(query):
                return 0.0
            objects = await self.custom.values(query.path, query.label_selector, query.metric_label_selector)
            return wire.combine(trigger, [item.value for item in objects])
        series = await self.external.values(query.namespace, query.metric, query.label_selector)
        return wire.combine(trigger, [item.value for item in series])

    async def _none_selected(self, query: wire.CustomQuery) -> bool:
        """Whether the label selector selects no object at all (from the same resolver the API uses)."""
        try:
            group_resource = normalise_resource(query.path.resource)
        except ResourceError:
            return False  # the provider answers it
        return await self.custom.engine.select(group_resource, query.path.namespace, query.label_selector) == []

    def end_streams(self) -> None:
        """Draining: every open ``StreamIsActive`` ends with status OK at once. KEDA reads that as a clean end
        (io.EOF in pkg/scalers/external_scaler.go runStreamIsActive: no error logged, its back-off reset to 2 s)
        and opens the stream again, on a connection to another replica once the GOAWAY has arrived."""
        self._draining.set()

    async def _pause(self) -> bool:
        """Wait one stream interval; True when the server drains meanwhile."""
        try:
            await asyncio.wait_for(self._draining.wait(), self.stream_interval_s)
        except TimeoutError:
            return False
        return True

    # -- the service's methods -------------------------------------------------------------------------------
    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context: Any) -> pb.GetMetricSpecResponse:
        async def answer() -> pb.GetMetricSpecResponse:
            wire.namespace_of(request)
            return wire.metric_spec(parse_metadata(request.scalerMetadata))

        return await self._unary("GetMetricSpec", request, context, answer)

    async def GetMetrics(self, request: pb.GetMetricsRequest, context: Any) -> pb.GetMetricsResponse:
        ref = request.scaledObjectRef

        async def answer() -> pb.GetMetricsResponse:
            trigger = parse_metadata(ref.scalerMetadata)
            name = wire.requested_metric(trigger, request)
            return wire.metric_values(name, await self.value(trigger, wire.namespace_of(ref)))

        return await self._unary("GetMetrics", ref, context, answer)

    async def IsActive(self, request: pb.ScaledObjectRef, context: Any) -> pb.IsActiveResponse:
        async def answer() -> pb.IsActiveResponse:
            trigger = parse_metadata(request.scalerMetadata)
            value = await self.value(trigger, wire.namespace_of(request))
            return pb.IsActiveResponse(result=wire.active(trigger, value))

        return await self._unary("IsActive", request, context, answer)

    async def StreamIsActive(self, request: pb.ScaledObjectRef, context: Any) -> AsyncIterator[pb.IsActiveResponse]:
        started, code = time.perf_counter(), grpc.StatusCode.OK
        try:
            trigger = parse_metadata(request.scalerMetadata)
            namespace = wire.namespace_of(request)
        except MetadataError as exc:
            code = grpc.StatusCode.INVALID_ARGUMENT
            self._observe("StreamIsActive", request, code, started, str(exc))
            await context.abort(code, str(exc))
        client = client_of(context.peer())
        ends_at = time.monotonic() + random.uniform(*self.stream_lifetime_s) if self.stream_lifetime_s else None
        last: bool | None = None
        try:
            while True:
                try:
                    now = await self._evaluate(trigger, namespace, client)
                except ApiError as exc:  # the request itself is wrong: polling again cannot help
                    code = wire.status_code(exc)
                    await context.abort(code, exc.message)
                except Exception as exc:  # never a stack trace to the caller
                    log.exception("KEDA StreamIsActive failed")
                    code = grpc.StatusCode.INTERNAL
                    await context.abort(code, f"internal error: {exc.__class__.__name__}")
                if now is not None and now != last:
                    last = now
                    yield pb.IsActiveResponse(result=now)
                if self._draining.is_set() or _over(ends_at) or await self._pause() or _over(ends_at):
                    log.debug("StreamIsActive %s/%s ended (%s)", namespace, request.name,
                              "the server drains" if self._draining.is_set() else "its lifetime is over")
                    return
        except (asyncio.CancelledError, GeneratorExit):  # KEDA closed the stream, or the server stops
            code = grpc.StatusCode.CANCELLED
            raise
        finally:
            self._observe("StreamIsActive", request, code, started)

    async def _evaluate(self, trigger: Trigger, namespace: str, client: str) -> bool | None:
        """One evaluation of a stream's trigger: its activity, or None when there is no value this time (no seat,
        or the provider has none: sent nothing, tried again). An ``ApiError`` only for a request that is wrong."""
        if self.calls is None:
            seat: Any = contextlib.nullcontext(True)
        else:
            seat = self.calls.seat(client)
        async with seat as seated:
            if not seated:
                log.debug("StreamIsActive %s: no seat for this evaluation; nothing sent", namespace)
                return None
            try:
                return wire.active(trigger, await self.value(trigger, namespace))
            except ApiError as exc:
                if exc.code == 400:
                    raise
                log.debug("StreamIsActive %s: no value (%s); nothing sent", namespace, exc.message)
                return None

    # -- shared ----------------------------------------------------------------------------------------------
    async def _unary(self, method: str, ref: pb.ScaledObjectRef, context: Any, answer: Callable[[], Awaitable[T]],
                     ) -> T:
        started = time.perf_counter()
        try:
            result = await answer()
        except MetadataError as exc:
            code, message = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
        except ApiError as exc:
            code, message = wire.status_code(exc), exc.message
        except Exception as exc:  # never a stack trace to the caller
            log.exception("KEDA %s failed", method)
            code, message = grpc.StatusCode.INTERNAL, f"internal error: {exc.__class__.__name__}"
        else:
            self._observe(method, ref, grpc.StatusCode.OK, started)
            return result
        self._observe(method, ref, code, started, message)
        await context.abort(code, message)
        raise AssertionError("unreachable: abort raises")

    def _observe(self, method: str, ref: pb.ScaledObjectRef, code: grpc.StatusCode, started: float,
                 message: str = "") -> None:
        seconds = time.perf_counter() - started
        if self._durations is not None:
            self._durations.labels(method, code.name).observe(seconds)
        if access_log.isEnabledFor(logging.INFO):
            extra = {"method": f"keda/{method}", "code": code.name, "duration_ms": round(seconds * 1000, 3),
                     "scaledobject": f"{ref.namespace}/{ref.name}", "metric": ref.scalerMetadata.get("metric", "")}
            if message:
                extra["error"] = message
            access_log.info("request", extra=extra)


def _over(ends_at: float | None) -> bool:
    """Whether a stream's lifetime is over (checked before and after each pause, never during an evaluation)."""
    return ends_at is not None and time.monotonic() >= ends_at
