"""Accepting a listener's connections, each TLS handshake bounded and counted.

The listening socket's connections are accepted here and handed to the event loop one by one
(``loop.connect_accepted_socket``, with the handshake timeout), instead of by ``loop.create_server``: that way a
connection in its TLS handshake is known, and the waiting room can close it. A handshake that stalls costs the
server more than an open connection (about 50 KiB against 30 KiB, measured with uvloop's TLS), and with the event
loop's own server it could not be counted or closed before its 60 s default timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Callable

from listener.addresses import peer_of
from listener.protocol import Guard, GuardedProtocol

log = logging.getLogger("listener")

ProtocolFactory = Callable[[], GuardedProtocol]
# Out of file descriptors or socket memory: the accept is tried again shortly (as Go's Server.Serve backs off).
_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
ACCEPT_BATCH = 64


class Handshake:
    """An accepted connection until its handshake is done: its place in the waiting room."""

    def __init__(self, conn: socket.socket, address: str) -> None:
        self.conn = conn
        self.address = address
        self.evicted = False

    def evict(self) -> None:
        # Ends the handshake at the socket: its read gets end-of-file, the loop's TLS transport closes.
        self.evicted = True
        with contextlib.suppress(OSError):
            self.conn.shutdown(socket.SHUT_RDWR)


class Acceptor:
    """Accepts on one listening socket: when it is readable, up to ``ACCEPT_BATCH`` connections at a time (as the
    event loop's own server does, asyncio's ``_accept_connection``), each handed over in a task of its own. Waiting
    for one connection per wakeup (``loop.sock_accept``) would accept one per turn of a busy loop, and a real
    client's connection would queue behind a flood's reconnects."""

    def __init__(self, sock: socket.socket, guard: Guard, protocol: ProtocolFactory) -> None:
        self.sock = sock
        self.guard = guard
        self.protocol = protocol
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    def start(self, backlog: int = 2048) -> Acceptor:
        self.sock.listen(backlog)  # again on a listening socket: only the backlog is set
        self.sock.setblocking(False)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._accept)
        return self

    def _accept(self) -> None:
        loop = self._loop
        assert loop is not None
        for _ in range(ACCEPT_BATCH):
            try:
                conn, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in _RETRY_ERRNOS:
                    raise
                # Out of descriptors: stop listening a moment (Go's Server.Serve sleeps and retries likewise).
                self.guard.quiet.warning("accept", f"cannot accept a connection: {exc.strerror}; retrying")
                loop.remove_reader(self.sock.fileno())
                loop.call_later(0.1, loop.add_reader, self.sock.fileno(), self._accept)
                return
            conn.setblocking(False)
            task = loop.create_task(self._hand_over(conn, peer_of(address)))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _hand_over(self, conn: socket.socket, address: str) -> None:
        g = self.guard
        pending = Handshake(conn, address)
        context = g.tls() if g.tls is not None else None
        g.handshaking += 1
        g.room.enter(pending)

        def make() -> GuardedProtocol:
            protocol = self.protocol()
            protocol.pending = pending
            return protocol

        loop = asyncio.get_running_loop()
        try:
            if context is None:
                await loop.connect_accepted_socket(make, conn)
            else:
                await loop.connect_accepted_socket(make, conn, ssl=context,
                                                   ssl_handshake_timeout=g.limits.handshake_timeout_s)
        except (OSError, ssl.SSLError, EOFError) as exc:  # the loop has closed the connection
            if not pending.evicted:
                # The loop's handshake timeout aborts with ConnectionAbortedError; a client's failure is anything else.
                g.closed["handshake_timeout" if isinstance(exc, ConnectionAbortedError) else "handshake_failed"] += 1
                log.debug("TLS handshake failed: %r", exc)
        finally:
            g.handshaking -= 1
            g.room.leave(pending)

    def close(self) -> None:
        """Stop accepting, and end the handshakes in progress."""
        if self._loop is not None and self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())
        for task in list(self._handshakes):
            task.cancel()
        with contextlib.suppress(OSError):
            self.sock.close()
