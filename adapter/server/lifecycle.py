"""Graceful shutdown, in the order k8s.io/apiserver's servers follow (pkg/server/genericapiserver.go,
``preparedGenericAPIServer.RunWithContext``; the events of pkg/server/lifecycle_signals.go):

- SIGTERM (``ShutdownInitiated``): ``/readyz`` fails at once, so the kubelet marks the pod unready; everything
  else is answered as before for ``--shutdown-delay-duration``, while the endpoint's removal reaches every node
  (kube-proxy) and the aggregator. One addition here: every response in this window carries
  ``Connection: close``. k8s.io/apiserver's clients mostly speak HTTP/2 and are told to go by a GOAWAY when the
  listener closes; this server speaks HTTP/1.1, which has no GOAWAY, so each kept-alive client is sent to open a
  new connection through the Service before the listener closes, rather than racing the close of an idle one.
- The delay is over (``AfterShutdownDelayDuration``, ``NotAcceptingNewRequest``):
  - by default the listener closes (uvicorn's shutdown: idle connections are closed, requests in flight are
    answered with ``Connection: close``) and requests in flight get up to ``--shutdown-drain-timeout`` (upstream
    waits its request timeout, ``ShutdownTimeout``);
  - with ``--shutdown-send-retry-after`` the listener stays open until the requests in flight are done (or the
    drain timeout): every new request is answered 429 with ``Retry-After: 5`` and ``Connection: close``
    (filters/with_retry_after.go), except probes, ``/metrics`` and kube-apiserver's own loopback requests (its
    exemptions); then the listener closes with 2 s for what is left (upstream's hard-coded shutdown timeout in
    that mode).
  - The KEDA scaler drains at the same moment (its drain hook: GOAWAY, open streams end with status OK).
- A second SIGTERM or SIGINT exits at once with status 1, as ``SetupSignalContext`` (pkg/server/signal.go) does:
  nothing more is drained or stopped (its ``os.Exit(1)``), only the log is flushed.

``Lifecycle`` holds the state and its clock (pure, tested with a fake clock); ``DrainRequests`` is the ASGI
middleware that applies it to each request; ``GracefulServer`` is uvicorn's ``Server`` driven by it, through the
hooks uvicorn's server exposes: ``handle_exit`` (its signal handler), ``on_tick`` (called every 0.1 s by its main
loop), ``should_exit`` and ``Config.timeout_graceful_shutdown`` (the drain bound of its shutdown).
tests/test_lifecycle_e2e.py checks the uvicorn behaviour this relies on.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import signal
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import FrameType
from typing import Any

import orjson
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapter.api.status import ApiError
from listener.protocol import Guard
from listener.serving import GuardedServer

log = logging.getLogger("adapter.lifecycle")

RETRY_AFTER_S = 5  # filters/with_retry_after.go: "Retry-After: 5"
FINAL_CLOSE_S = 2.0  # genericapiserver.go: with ShutdownSendRetryAfter, the HTTP server's shutdown timeout is 2 s
# filters/with_retry_after.go pathPrefixesExemptFromRetryAfter, and isKubeApiserverUserAgent's prefix.
EXEMPT_PATH_PREFIXES = ("/readyz", "/livez", "/healthz", "/metrics")
EXEMPT_USER_AGENT_PREFIX = b"kube-apiserver/"
SHUTTING_DOWN = "the adapter is shutting down, please try again later"


class Phase(enum.Enum):
    SERVING = "serving"
    DELAY = "shutdown-delay"  # /readyz fails, requests are served (with Connection: close)
    DRAINING = "draining"  # no new requests; those in flight finish


@dataclass(frozen=True)
class ShutdownSettings:
    delay_s: float = 0.0
    drain_timeout_s: float = 10.0
    send_retry_after: bool = False


class Lifecycle:
    """Where the server is between start and exit, and the counts its self-metrics and logs show."""

    def __init__(self, settings: ShutdownSettings | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or ShutdownSettings()
        self._clock = clock
        self.phase = Phase.SERVING
        self.initiated_at: float | None = None
        self.draining_at: float | None = None
        self.in_flight = 0  # requests that count for the drain (not exempt)
        self.rejected_total = 0  # answered 429 while draining with --shutdown-send-retry-after
        self.told_to_close_total = 0  # responses that carried Connection: close because of the shutdown
        self._drain_hooks: list[Callable[[float], Coroutine[Any, Any, None]]] = []
        self._drain_tasks: set[asyncio.Task[None]] = set()

    # -- events ------------------------------------------------------------------------------------------------
    def on_drain(self, hook: Callable[[float], Coroutine[Any, Any, None]]) -> None:
        """Run ``hook(drain_timeout_s)`` when draining starts (the KEDA scaler's GOAWAY)."""
        self._drain_hooks.append(hook)

    def initiate(self, cause: str = "SIGTERM") -> None:
        """ShutdownInitiated: from now on /readyz fails; serving goes on for the delay."""
        if self.phase is not Phase.SERVING:
            return
        self.phase, self.initiated_at = Phase.DELAY, self._clock()
        s = self.settings
        log.info("[graceful-termination] %s: shutdown initiated; /readyz fails from now, requests are served with "
                 "Connection: close for --shutdown-delay-duration=%gs, then %s (up to %gs)", cause, s.delay_s,
                 "new requests get 429 Retry-After while those in flight finish" if s.send_retry_after
                 else "the listener closes and requests in flight finish", s.drain_timeout_s)

    def force(self, cause: str) -> None:
        """A second signal: the server exits now (say so first)."""
        log.warning("[graceful-termination] %s again: exiting now, without draining", cause)

    def due(self) -> bool:
        """Called periodically while serving: moves to the next phase when its time has come; True once the
        listener should close."""
        now = self._clock()
        if self.phase is Phase.DELAY and now - (self.initiated_at or now) >= self.settings.delay_s:
            self._begin_drain(now)
            if not self.settings.send_retry_after:
                return True
        if self.phase is Phase.DRAINING:
            if not self.settings.send_retry_after:
                return True
            elapsed = now - (self.draining_at or now)
            if self.in_flight == 0 or elapsed >= self.settings.drain_timeout_s:
                log.info("[graceful-termination] %s after %.1fs; closing the listener (%d request(s) answered 429)",
                         "in-flight requests drained" if self.in_flight == 0 else
                         f"drain timeout with {self.in_flight} request(s) in flight", elapsed, self.rejected_total)
                return True
        return False

    def _begin_drain(self, now: float) -> None:
        self.phase, self.draining_at = Phase.DRAINING, now
        log.info("[graceful-termination] shutdown delay over: not accepting new requests; %d in flight get up to "
                 "%gs", self.in_flight, self.settings.drain_timeout_s)
        for hook in self._drain_hooks:
            task = asyncio.get_running_loop().create_task(hook(self.settings.drain_timeout_s))
            self._drain_tasks.add(task)
            task.add_done_callback(self._drain_tasks.discard)

    @property
    def listener_close_timeout_s(self) -> float:
        """How long the server's own shutdown waits for connections once the listener is closed."""
        return FINAL_CLOSE_S if self.settings.send_retry_after else self.settings.drain_timeout_s

    def finished(self) -> None:
        """The server stopped: say how the drain went (its log line and what the metrics last showed)."""
        if self.initiated_at is not None:
            log.info("[graceful-termination] drained %.1fs after the signal (%d request(s) still in flight, %d told "
                     "to close their connection, %d answered 429); exiting", self._clock() - self.initiated_at,
                     self.in_flight, self.told_to_close_total, self.rejected_total)

    # -- per request -------------------------------------------------------------------------------------------
    @property
    def shutting_down(self) -> bool:
        return self.phase is not Phase.SERVING

    @property
    def rejecting(self) -> bool:
        return self.phase is Phase.DRAINING and self.settings.send_retry_after


def exempt(scope: Scope) -> bool:
    """Requests that upstream never rejects nor waits for: probes, /metrics, kube-apiserver's loopback."""
    if scope.get("path", "").startswith(EXEMPT_PATH_PREFIXES):
        return True
    return any(name == b"user-agent" and value.startswith(EXEMPT_USER_AGENT_PREFIX)
               for name, value in scope.get("headers") or ())


_CLOSE = (b"connection", b"close")
_RETRY_AFTER_BODY = orjson.dumps(ApiError(429, SHUTTING_DOWN, {"retryAfterSeconds": RETRY_AFTER_S}).body())


class DrainRequests:
    """ASGI middleware: counts requests in flight, adds ``Connection: close`` to responses once the shutdown has
    begun, and answers 429 Retry-After while draining with ``--shutdown-send-retry-after``."""

    def __init__(self, app: ASGIApp, lifecycle: Lifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        lc = self.lifecycle
        counted = not exempt(scope)
        if lc.rejecting and counted:
            lc.rejected_total += 1
            await _answer_retry_after(send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and lc.shutting_down:
                headers = list(message.get("headers") or ())
                if _CLOSE not in headers:
                    message = {**message, "headers": [*headers, _CLOSE]}
                    lc.told_to_close_total += 1
            await send(message)

        if counted:
            lc.in_flight += 1
        try:
            await self.app(scope, receive, send_closing)
        finally:
            if counted:
                lc.in_flight -= 1


async def _answer_retry_after(send: Send) -> None:
    await send({"type": "http.response.start", "status": 429, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(_RETRY_AFTER_BODY)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()), _CLOSE]})
    await send({"type": "http.response.body", "body": _RETRY_AFTER_BODY})


class GracefulServer(GuardedServer):
    """uvicorn's server (its connections guarded, listener.serving), shut down in the order of :class:`Lifecycle`
    instead of at the first signal."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle, guard: Guard) -> None:
        super().__init__(config, guard)
        self.lifecycle = lifecycle

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        cause = signal.Signals(sig).name
        if self.lifecycle.phase is Phase.SERVING and not self.should_exit:
            self.lifecycle.initiate(cause)
            return
        self.lifecycle.force(cause)
        # Upstream's signal handler exits at once with status 1 (its os.Exit(1)): nothing more drained or stopped.
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)

    async def on_tick(self, counter: int) -> bool:
        if not self.should_exit and self.lifecycle.shutting_down and self.lifecycle.due():
            close_s = self.lifecycle.listener_close_timeout_s
            self.config.timeout_graceful_shutdown = close_s  # type: ignore[assignment]  # uvicorn says int; asyncio.timeout takes float
            self.should_exit = True
        return await super().on_tick(counter)


def run(server: GracefulServer, **kwargs: Any) -> None:
    """Serve until stopped (a second signal ends the process from its handler)."""
    server.run(**kwargs)
    server.lifecycle.finished()
