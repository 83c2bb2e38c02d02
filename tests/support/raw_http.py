"""A raw HTTP/1.1 client over TLS or plain TCP for tests of what a server does with clients that misbehave: heads
sent in pieces, never finished, oversized; answers read as bytes; how long until the server closes."""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import ssl
import time
from dataclasses import dataclass


@functools.cache
def _client_tls() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # not create_default_context: no CA store to load each time
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def connect(port: int, *, tls: bool = True, host: str = "127.0.0.1", timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    return _client_tls().wrap_socket(sock) if tls else sock


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # names lowercased
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


def read_answer(sock: socket.socket, timeout: float = 10.0) -> Answer:
    """One response (its body by Content-Length); AssertionError if the connection ends first."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before an answer (got {data!r})"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the body"
        rest += chunk
    return Answer(int(lines[0].split()[1]), headers, rest[:length])


def request(port: int, head: bytes, *, tls: bool = True) -> Answer:
    with contextlib.closing(connect(port, tls=tls)) as sock:
        sock.sendall(head)
        return read_answer(sock)


def seconds_until_closed(sock: socket.socket, limit: float = 30.0) -> float:
    """How long until the server ends the connection (end of file or reset), reading and dropping what it sends."""
    start = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        pass
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open for {limit} s") from None
    return time.monotonic() - start


def is_open(sock: socket.socket) -> bool:
    """Whether the server has not ended the connection (nothing to read, no end of file) right now."""
    sock.settimeout(0.05)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK)) if not isinstance(sock, ssl.SSLSocket) else _tls_open(sock)
    except TimeoutError:
        return True
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError, OSError):
        return False


def _tls_open(sock: ssl.SSLSocket) -> bool:
    return bool(sock.recv(1))


def get(path: str = "/healthz", extra: bytes = b"", host: str = "x") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n".encode() + extra + b"\r\n"
