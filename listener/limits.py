"""A listener's limits, with where each default comes from.

The adapter's defaults are kube-apiserver's (k8s.io/apiserver ``pkg/server/secure_serving.go``): the aggregator
and every HPA already live with them. The exporter's come from its own flags the way Go's ``net/http`` derives them
for dcgm-exporter's server (``ReadTimeout`` and ``WriteTimeout`` only): the read timeout bounds the head and the idle
wait, the handshake takes the smaller of the two (``Server.tlsHandshakeTimeout``).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

# Go's net/http reads MaxHeaderBytes plus this much before it answers 431 (server.go initialReadLimitSize,
# "bufio slop"), so a head of exactly the limit is accepted as Go accepts it.
HEAD_SLOP_BYTES = 4096


class LimitsError(ValueError):
    """A limit a listener cannot run with; one line naming the flag."""


@dataclass(frozen=True)
class Limits:
    # The TLS handshake, and then each request's head from its first byte, must finish within this
    # (secure_serving.go ReadHeaderTimeout: 32 s, "just shy of requestTimeoutUpperBound").
    read_header_timeout_s: float = 32.0
    # A kept-alive connection may wait this long for its next request (IdleTimeout: 90 s, "matches
    # http.DefaultTransport keep-alive timeout", so a Go client drops the connection before the server does).
    idle_timeout_s: float = 90.0
    # From the end of a request's head to the end of its response; past it the connection is dropped (Go's
    # WriteTimeout: a client that stops reading, or a handler that never answers, gives its connection back).
    write_timeout_s: float = 70.0
    # Request line plus header fields (MaxHeaderBytes: 1 MiB, Go's default and kube-apiserver's), answered 431.
    max_header_bytes: int = 1 << 20
    # A longer request line is answered 414 (the limit CPython's http.server applies, 64 KiB: a label selector of
    # a hundred Kubernetes requirements is about 40 KiB).
    max_request_line_bytes: int = 65536
    # More header fields than this are answered 431: each field costs a few hundred bytes of Python objects, so
    # 1 MiB of one-byte fields would cost 30 MiB, not 1. Far above what the front proxy sends (one field per group).
    max_header_fields: int = 1000
    # Connections without a request in progress (in the TLS handshake, sending a head, or idle between requests):
    # past this many, the one waiting longest is closed (listener.waiting).
    max_waiting_connections: int = 1000
    # Bytes of unfinished heads those connections may hold together; past it, likewise.
    max_waiting_head_bytes: int = 32 << 20

    @property
    def handshake_timeout_s(self) -> float:
        """Go's Server.tlsHandshakeTimeout: the smallest of the read-header and write timeouts."""
        return min(self.read_header_timeout_s, self.write_timeout_s)

    @property
    def max_head_bytes(self) -> int:
        return self.max_header_bytes + HEAD_SLOP_BYTES

    def check(self, names: dict[str, str] | None = None) -> Limits:
        """This, or a :class:`LimitsError` naming the flag (``names`` maps a field to its flag) of a bad value."""
        names = names or {}
        for field in ("read_header_timeout_s", "idle_timeout_s", "write_timeout_s"):
            if getattr(self, field) <= 0:
                raise LimitsError(f"{names.get(field, field)}: must be above 0 (a listener without it holds a "
                                  "silent connection forever)")
        for field in ("max_header_bytes", "max_request_line_bytes", "max_header_fields", "max_waiting_connections",
                      "max_waiting_head_bytes"):
            if getattr(self, field) < 1:
                raise LimitsError(f"{names.get(field, field)}: must be at least 1")
        if self.max_request_line_bytes > self.max_header_bytes:
            raise LimitsError(f"{names.get('max_request_line_bytes', 'max_request_line_bytes')}: must not exceed "
                              f"{names.get('max_header_bytes', 'max_header_bytes')} (the request line is part of "
                              "the head)")
        return self


def raise_open_files_limit() -> int:
    """Raise this process' soft limit of open files to its hard limit, as every Go program does at start (Go
    1.19's os package): a server that can take more connections than its soft limit (often 1,024) fails to accept
    at that limit, however little each connection costs. Returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
        except (ValueError, OSError):
            return soft
    return soft
