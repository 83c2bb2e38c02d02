"""A request's head (request line and header fields) measured as its bytes arrive, before any parser keeps them.

The HTTP parser (llhttp, through httptools) accumulates a header field until it ends, so a 200 MB field would be
held whole before anything saw it; this meter sees each read first and says when the head has gone past a limit,
so the connection is answered and closed after at most one read beyond it. It finds line ends and the blank line
that ends the head; it does not parse fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from listener.limits import Limits


@dataclass(frozen=True)
class Refusal:
    """An answer that ends the connection: the status and the one-line reason sent with it."""

    status: int
    reason: str


URI_TOO_LONG = 414
HEADERS_TOO_LARGE = 431
BODY_NOT_TAKEN = 413

_BLANK_LINES = (b"\n\r\n", b"\n\n")


def _head_end(view: bytes) -> int:
    """Index just past the blank line that ends a head in ``view``, or -1."""
    ends = [i + len(mark) for mark in _BLANK_LINES if (i := view.find(mark)) >= 0]
    return min(ends) if ends else -1


class HeadMeter:
    """Bytes, request-line length and field count of one request head, fed read by read."""

    __slots__ = ("_tail", "complete", "fields", "head_part", "limits", "line_ended", "line_size", "size")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.size = 0  # bytes of the head so far
        self.line_size = 0  # bytes of the request line so far (its line end included)
        self.line_ended = False
        self.fields = 0  # header field lines seen
        self.complete = False
        self.head_part = 0  # how many bytes of the last read belong to the head (the rest: a body, the next request)
        self._tail = b""  # the last bytes fed, for a line end split between two reads

    def feed(self, data: bytes) -> Refusal | None:
        """Count ``data``; a :class:`Refusal` once the head is over a limit. Bytes after the head are not counted."""
        if self.complete or not data:
            return None
        start = len(self._tail)
        view = self._tail + data
        end = _head_end(view)
        stop = end if end >= 0 else len(view)
        self.head_part = stop - start
        self.size += self.head_part
        newlines = view.count(b"\n", start, stop)
        if not self.line_ended:
            nl = view.find(b"\n", start, stop)
            if nl < 0:
                self.line_size += stop - start
            else:
                self.line_size += nl + 1 - start
                self.line_ended = True
                newlines -= 1
        self.fields += newlines
        if end >= 0:
            self.complete = True
            self.fields -= 1  # the blank line
        self._tail = view[max(0, stop - 2):stop]
        return self.verdict()

    def verdict(self) -> Refusal | None:
        limits = self.limits
        if self.line_size > limits.max_request_line_bytes:
            return Refusal(URI_TOO_LONG, f"request line longer than {limits.max_request_line_bytes} bytes")
        if self.size > limits.max_head_bytes:
            return Refusal(HEADERS_TOO_LARGE, f"request head larger than {limits.max_header_bytes} bytes")
        if self.fields > limits.max_header_fields:
            return Refusal(HEADERS_TOO_LARGE, f"more than {limits.max_header_fields} header fields")
        return None
