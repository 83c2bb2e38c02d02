"""A Kubernetes Service as a client sees it, on loopback: kube-proxy's job, done by a TCP proxy.

What it keeps of kube-proxy (pkg/proxy, iptables/nftables modes): each new connection goes to one of the Service's
ready endpoints (round-robin here; kube-proxy picks at random, which only changes which one); an established
connection stays with its endpoint until either side closes it (conntrack), even after the endpoint left the
Service; an endpoint's change (a pod became ready, was deleted, died) takes effect only after a propagation delay
(the EndpointSlice controller, the watch, kube-proxy's sync); a connection to an endpoint whose process is gone
fails (the kernel answers a dial to a closed port with a reset: the client sees its connection fail at once).

TLS passes through untouched. For the lifecycle scenarios it also counts, per endpoint, the connections it made
and the dials that failed, and knows which open connections have a request waiting for its answer (bytes went to
the endpoint after the last bytes came back): the requests in flight there.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Link:
    endpoint: str
    waiting: bool = False  # the client sent bytes the endpoint has not answered yet


@dataclass
class EndpointStats:
    connections: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)


class ServiceProxy:
    """``set_endpoint(name, address, ready)`` changes the Service after ``propagation_s``; ``address`` is where
    clients connect."""

    def __init__(self, propagation_s: float, source: str | None = None) -> None:
        """``source``: the local address its connections to the endpoints come from (a client pod's own IP, which
        kube-proxy keeps for a ClusterIP: 127.0.0.2 stands for another pod than the rest of a test on loopback)."""
        self.propagation_s = propagation_s
        self.source = source
        self.stats = EndpointStats()
        self._addresses: dict[str, tuple[str, int]] = {}
        self._ready: list[str] = []
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # asyncio keeps only weak references to running tasks
        self._turn = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="service-proxy", daemon=True)
        self._thread.start()
        started.wait(10)
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = f"{host}:{port}"
        self.url = f"https://{self.address}"

    # -- the Service's endpoints -------------------------------------------------------------------------------
    def set_endpoint(self, name: str, address: str, ready: bool, *, at_once: bool = False) -> None:
        """A pod became ready (or not, or is gone): kube-proxy applies it ``propagation_s`` later (``at_once``: the
        Service as it is before the scenario starts)."""
        host, port = address.rsplit(":", 1)

        def apply() -> None:
            self._addresses[name] = (host, int(port))
            if ready and name not in self._ready:
                self._ready.append(name)
            elif not ready and name in self._ready:
                self._ready.remove(name)

        if at_once:
            self._loop.call_soon_threadsafe(apply)
        else:
            self._loop.call_soon_threadsafe(self._loop.call_later, self.propagation_s, apply)

    def ready(self) -> list[str]:
        return self._call(lambda: list(self._ready))

    def in_flight(self, name: str) -> int:
        """Connections to ``name`` with a request waiting for its answer, now."""
        return self._call(lambda: sum(1 for link in self._links if link.endpoint == name and link.waiting))

    def open_connections(self, name: str) -> int:
        return self._call(lambda: sum(1 for link in self._links if link.endpoint == name))

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # -- inside the proxy's loop -------------------------------------------------------------------------------
    def _call(self, read):  # type: ignore[no-untyped-def]
        async def on_loop():  # type: ignore[no-untyped-def]
            return read()

        return asyncio.run_coroutine_threadsafe(on_loop(), self._loop).result(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0,
                                                                          backlog=1024))
        started.set()
        self._loop.run_forever()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay(client_reader, client_writer)
        finally:
            self._tasks.discard(task)

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if not self._ready:  # no endpoint: kube-proxy rejects the connection
            client_writer.transport.abort()
            return
        name = self._ready[next(self._turn) % len(self._ready)]
        host, port = self._addresses[name]
        self.stats.connections[name] += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                host, port, local_addr=(self.source, 0) if self.source else None)
        except OSError:
            self.stats.refused[name] += 1
            client_writer.transport.abort()  # a reset, as the kernel answers a dial to a closed port
            return
        link = _Link(name)
        self._links.add(link)
        try:
            await asyncio.gather(self._pipe(client_reader, upstream_writer, link, True),
                                 self._pipe(upstream_reader, client_writer, link, False), return_exceptions=True)
        finally:
            self._links.discard(link)
            for writer in (client_writer, upstream_writer):
                writer.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link, to_endpoint: bool,
                    ) -> None:
        """Copy one direction until it ends; then end the other side's writing (or the whole link on a reset)."""
        try:
            while data := await reader.read(65536):
                link.waiting = to_endpoint
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            writer.transport.abort()
            return
        if writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()
