"""The minimal HTTP/1.1 the demo's servers speak (the inference replica, the gateway): one request at a time per
connection, ``Content-Length`` bodies, keep-alive. asyncio streams, no framework: these servers sit on the request
path of every load-test request and must add next to nothing to its latency."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

__all__ = ["MAX_BODY", "MAX_HEAD", "Request", "read_request", "response"]

MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            415: "Unsupported Media Type", 500: "Internal Server Error", 502: "Bad Gateway",
            503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclass
class Request:
    method: str
    path: str
    keep_alive: bool
    headers: dict[str, str]  # names lower-cased
    body: bytes


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """One request (head and body); ``None`` when the client closed the connection. A malformed or oversized
    request raises ``ValueError`` (the caller closes the connection)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        raise ValueError("chunked request bodies are not supported")
    length = int(headers.get("content-length", "0") or 0)
    if length > MAX_BODY:
        raise ValueError("request body too large")
    body = await reader.readexactly(length) if length else b""
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return Request(method, target, keep_alive, headers, body)


def response(status: int, body: bytes, keep_alive: bool, content_type: str | None = None) -> bytes:
    """The response's bytes; without ``content_type``, JSON, Prometheus text or plain text by the body's start."""
    if content_type is None:
        if body.startswith(b"{"):
            content_type = "application/json"
        elif body.startswith(b"# HELP"):
            content_type = "text/plain; version=0.0.4; charset=utf-8"
        else:
            content_type = "text/plain; charset=utf-8"
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
    return head.encode("latin-1") + body
