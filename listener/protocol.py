"""uvicorn's HTTP/1.1 protocol (httptools, its fastest parser) with a listener's limits applied to each connection.

A connection's life, and what bounds each part (as Go's ``net/http`` server bounds it for kube-apiserver):

- accepted -> TLS handshake: within the handshake timeout (Go's ``tlsHandshakeTimeout``), counted and closable
  while it lasts (:mod:`listener.accept`).
- head: the request line and header fields within the read-header timeout of the first byte (of the handshake's
  end for a new connection), within the head limits (:mod:`listener.head`: 414 or 431 and closed, the rest unread).
  A head that announces a body is answered 413 and closed: no endpoint here takes one.
- busy: from the end of the head to the end of the response within the write timeout, else the connection is
  dropped (a client that stopped reading, a handler that never answers).
- idle: a kept-alive connection waits for its next request within the idle timeout, then is closed.
While handshaking, in the head or idle, the connection is in the listener's waiting room (:mod:`listener.waiting`).
A refused or timed-out connection is closed at once (aborted: no TLS close_notify wait to hold its memory), an idle
one politely. Each closing reason is counted; a line about a client is logged at most once a minute per kind.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import Counter
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from listener.addresses import peer_of
from listener.head import BODY_NOT_TAKEN, HeadMeter, Refusal
from listener.limits import Limits
from listener.logs import QuietLog
from listener.waiting import Waiter, WaitingRoom

log = logging.getLogger("listener")

RST_AVOIDANCE_S = 0.5  # Go's net/http rstAvoidanceDelay: how long a refused connection stays for its answer

RefusalBody = Callable[[Refusal], tuple[bytes, bytes]]
"""A refusal's content type and body, in the listener's own format (a Kubernetes Status, plain text)."""


def plain_refusal(refusal: Refusal) -> tuple[bytes, bytes]:
    text = f"{refusal.status} {HTTPStatus(refusal.status).phrase}: {refusal.reason}\n"
    return b"text/plain; charset=utf-8", text.encode()


class Guard:
    """What the connections of one listener share: its limits, waiting room, TLS, refusal format and counts."""

    def __init__(self, limits: Limits, *, tls: Callable[[], ssl.SSLContext] | None = None,
                 refusal_body: RefusalBody = plain_refusal, name: str = "listener",
                 protocol_class: type[GuardedProtocol] | None = None) -> None:
        self.limits = limits
        self.room = WaitingRoom(limits.max_waiting_connections, limits.max_waiting_head_bytes)
        self.tls = tls  # the context for the next handshake (called per connection), or None for plain HTTP
        self.refusal_body = refusal_body
        self.handshaking = 0  # connections accepted, in their TLS handshake
        self.open = 0  # connections past the handshake, not yet closed
        self.closed: Counter[str] = Counter()  # connections the listener closed, by reason
        self.quiet = QuietLog(logging.getLogger(name))
        self.protocol_class = protocol_class or GuardedProtocol

    def protocol(self, **uvicorn_kwargs: Any) -> GuardedProtocol:
        """uvicorn's ``http`` protocol factory: ``Config(http=guard.protocol)``."""
        return self.protocol_class(guard=self, **uvicorn_kwargs)


class GuardedProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, guard: Guard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self.pending: Waiter | None = None  # the accepted connection's place in the room until it is handed here
        self.address = ""  # the client's (listener.addresses), known once connected
        self._raw: asyncio.Transport | None = None
        self._phase = "head"  # head | busy | idle | closing
        self._timer: asyncio.TimerHandle | None = None
        self._meter = HeadMeter(guard.limits)
        self._busy = 0  # requests whose head is complete and response is not
        self._refusal: Refusal | None = None
        self._gone = False

    # -- the connection's life ---------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's: a stream protocol gets a Transport
        # Called once the TLS handshake is done (listener.accept bounded it), with the connection to read.
        g = self.guard
        if g.tls is not None and transport.get_extra_info("sslcontext") is None:
            log.error("a TLS listener was handed a plain connection (served by uvicorn.Server instead of "
                      "listener.serving.GuardedServer?); closed")
            transport.abort()
            return
        self._raw = transport
        self.address = peer_of(transport.get_extra_info("peername"))
        g.open += 1
        if self.pending is not None:
            g.room.leave(self.pending)
        g.room.enter(self)
        self._phase = "head"
        self._arm(g.limits.read_header_timeout_s, "header_timeout")
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost()
        if self.transport is not None:
            super().connection_lost(exc)

    def _lost(self) -> None:
        if self._gone or self._raw is None:
            return
        self._gone = True
        self._cancel_timer()
        self.guard.room.leave(self)
        self.guard.open -= 1

    def evict(self) -> None:
        """The waiting room is full and this connection has waited longest."""
        self.guard.closed["evicted"] += 1
        self._abort()

    # -- reading a request ---------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._phase == "closing":
            return
        if self._busy == 0:
            if self._phase == "idle":
                self._phase = "head"
                self._arm(self.guard.limits.read_header_timeout_s, "header_timeout")
            refusal = self._meter.feed(data)
            if refusal is not None:
                self._refuse(refusal)
                return
            if not self._meter.complete:
                self.guard.room.hold(self, len(data))
            elif self._meter.head_part < len(data):
                # The head ends inside this read: it goes to the parser alone first, so a head that is refused
                # (a body announced) is answered before any of what follows it is parsed.
                head, data = data[:self._meter.head_part], data[self._meter.head_part:]
                super().data_received(head)
                if self._refusal is not None and self._phase != "closing":
                    self._refuse(self._refusal)
                if self._phase == "closing":
                    return
        super().data_received(data)
        if self._refusal is not None and self._phase != "closing":
            self._refuse(self._refusal)

    def on_headers_complete(self) -> None:
        if self._refusal is not None or self._phase == "closing":
            return
        if self._announces_body():
            self._refusal = Refusal(BODY_NOT_TAKEN, "this server takes no request body")
            return
        self._busy += 1
        if self._phase != "busy":
            self._phase = "busy"
            self.guard.room.leave(self)
            self._arm(self.guard.limits.write_timeout_s, "write_timeout")
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._refusal is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refusal is None:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._busy = max(0, self._busy - 1)
        if self.transport.is_closing() or self._phase == "closing":
            return
        limits = self.guard.limits
        if self._busy:  # a pipelined request started: its own write deadline
            self._arm(limits.write_timeout_s, "write_timeout")
            return
        self._phase = "idle"
        self._meter = HeadMeter(limits)
        self.guard.room.enter(self)
        self._arm(limits.idle_timeout_s, "idle_timeout")

    def _announces_body(self) -> bool:
        for name, value in self.headers:
            if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"0", b"")):
                return True
        return False

    # -- ending a connection -----------------------------------------------------------------------------------
    def _refuse(self, refusal: Refusal) -> None:
        """Answer ``refusal`` and close; nothing more is read. As Go's closeWriteAndWait: the answer goes out, the
        connection waits half a second (rstAvoidanceDelay) so the client can read it before the close, then is
        dropped, with no TLS close_notify exchange that would read whatever the client still sends."""
        g = self.guard
        self._phase = "closing"
        self._cancel_timer()
        content_type, body = g.refusal_body(refusal)
        head = (f"HTTP/1.1 {refusal.status} {HTTPStatus(refusal.status).phrase}\r\n"
                f"content-type: {content_type.decode()}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n")
        self.transport.write(head.encode() + body)
        self.transport.pause_reading()
        self._timer = self.loop.call_later(RST_AVOIDANCE_S, self._abort)
        g.closed[f"refused_{refusal.status}"] += 1
        g.quiet.warning(f"refused_{refusal.status}",
                        f"{_peer(self.transport)}: answered {refusal.status} and closed: {refusal.reason}")

    def _arm(self, seconds: float, reason: str) -> None:
        self._cancel_timer()
        self._timer = self.loop.call_later(seconds, self._expire, reason)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, reason: str) -> None:
        self._timer = None
        self.guard.closed[reason] += 1
        if reason == "idle_timeout" and self.transport is not None:
            self._phase = "closing"
            self.transport.close()  # politely: a client between requests did nothing wrong
            return
        self._abort()

    def _abort(self) -> None:
        self._phase = "closing"
        self._cancel_timer()
        if self._raw is not None:
            self._raw.abort()
        self._lost()


def _peer(transport: asyncio.BaseTransport | None) -> str:
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return "a client"
