"""glibc malloc settings for a long-running server whose big allocations come in bursts (relists, LISTs).

Python's own allocator serves small objects; buffers above 512 bytes (a Prometheus answer, a page of a LIST) come
from glibc, which by default (1) gives every thread that allocates its own arena, and (2) raises its mmap threshold
each time such a buffer is freed, so later ones come from the heap, whose freed top is returned only past the
trim threshold and whose middle never is. After a relist or a LIST that memory stayed counted in RSS until the
next one. Here the threshold stays at 128 KiB (big buffers are mmapped and unmapped when freed), threads share two
arenas, and ``trim()`` hands free heap pages back after a burst. Elsewhere (musl, macOS) nothing is changed.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("adapter.malloc")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_THRESHOLD = 128 * 1024
_ARENAS = 2

_libc: ctypes.CDLL | None = None


def configure() -> bool:
    """Apply the settings once, before the server starts its threads; False where malloc is not glibc's."""
    global _libc
    try:
        libc = ctypes.CDLL(None)
        mallopt, malloc_trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = all(mallopt(param, value) == 1 for param, value in (
        (_M_ARENA_MAX, _ARENAS), (_M_MMAP_THRESHOLD, _THRESHOLD), (_M_TRIM_THRESHOLD, _THRESHOLD)))
    if ok:
        malloc_trim.argtypes = [ctypes.c_size_t]
        _libc = libc
    else:
        log.debug("mallopt refused a setting; malloc left as it is")
    return ok


def trim() -> None:
    """Return free heap pages to the system (after a relist or a LIST); nothing where ``configure`` did not apply."""
    if _libc is not None:
        _libc.malloc_trim(0)
