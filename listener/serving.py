"""uvicorn serving through a guard (:mod:`listener.protocol`), its connections accepted by :mod:`listener.accept`.

``uvicorn_config`` gives uvicorn the guarded protocol and no TLS of its own: no ``Server`` header (a listener does
not advertise its software and version to whoever connects), no WebSocket upgrades (nothing here serves one), uvloop.
``GuardedServer`` is uvicorn's server with the listening sockets accepted by the guard's acceptor instead of the
event loop's own server; everything else (lifespan, graceful shutdown, connection bookkeeping) is uvicorn's.
"""

from __future__ import annotations

import asyncio
import math
import socket
from typing import Any

import uvicorn

from listener.accept import Acceptor
from listener.logs import quiet_uvicorn_client_errors
from listener.protocol import Guard, GuardedProtocol


def uvicorn_config(app: Any, host: str, port: int, guard: Guard, **settings: Any) -> uvicorn.Config:
    quiet_uvicorn_client_errors()
    options: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "on", "loop": "uvloop"}
    options.update(settings)
    # uvicorn's own keep-alive timer closes a connection idle this long; the guard's (a second earlier) acts first.
    options["timeout_keep_alive"] = math.ceil(guard.limits.idle_timeout_s) + 1
    return uvicorn.Config(app, host=host, port=port, ws="none", server_header=False, **options,
                          http=guard.protocol)  # type: ignore[arg-type]  # uvicorn calls it as it would a class


class GuardedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, guard: Guard) -> None:
        super().__init__(config)
        self.guard = guard
        self.acceptors: list[Acceptor] = []

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=[])  # the lifespan; uvicorn listens on nothing itself
        if self.should_exit:
            return
        listening = sockets if sockets is not None else [self.config.bind_socket()]
        self.acceptors = [Acceptor(sock, self.guard, self._protocol).start(self.config.backlog) for sock in listening]

    def _protocol(self) -> GuardedProtocol:
        # As uvicorn's own startup builds each connection's protocol.
        return self.guard.protocol(  # the config's http (uvicorn_config)
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state,
            _loop=asyncio.get_running_loop())

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for acceptor in self.acceptors:
            acceptor.close()
        await super().shutdown(sockets=sockets)
