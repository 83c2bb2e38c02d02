"""A scripted HTTP/1.1 server on loopback for client tests: asyncio streams, answers written as raw bytes, so that
malformed, cut and byte-by-byte answers are possible. Serve it with ``asyncio.start_server(server.handle, ...)``."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Request:
    connection: int  # 1 for the server's first connection
    number: int  # 1 for the first request on that connection
    head: bytes
    body: bytes


# What the server does with a request: (bytes to send, or None to send nothing; then close the connection?)
Script = Callable[[Request], tuple[bytes | None, bool]]


@dataclass
class Server:
    script: Script
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    requests: list[Request] = field(default_factory=list)
    eofs: int = 0  # connections the client closed
    closed: int = 0  # connections whose socket is closed on this side (the client can see their end)
    hold: asyncio.Event | None = None  # when set by a test, every answer waits for it
    byte_by_byte: bool = False  # each answer one byte per write: the client's parser is fed across many reads

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        connection, number = self.connections, 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.eofs += 1
                    return
                match = re.search(rb"(?im)^content-length: *(\d+)", head)
                body = await reader.readexactly(int(match.group(1))) if match else b""
                number += 1
                request = Request(connection, number, head, body)
                self.requests.append(request)
                if self.hold is not None:
                    await self.hold.wait()
                answer, close = self.script(request)
                if answer:
                    await self._write(writer, answer)
                if close:
                    return
        except ConnectionError:
            return
        finally:
            self.open_now -= 1
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.closed += 1

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        for piece in [data[i:i + 1] for i in range(len(data))] if self.byte_by_byte else [data]:
            writer.write(piece)
            await writer.drain()
            if self.byte_by_byte:
                await asyncio.sleep(0)  # a read per byte on the client's side


def answer(data: bytes, close: bool = False) -> Script:
    return lambda request: (data, close)
