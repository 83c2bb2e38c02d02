"""glibc malloc settings for a long-running server whose big allocations come in bursts (relists, LISTs).

Python's own allocator serves small objects; buffers above 512 bytes (a Prometheus answer, a page of a LIST) come
from glibc, which by default (1) gives every thread that allocates its own arena, and (2) raises its mmap threshold
each time such a buffer is freed, so later ones come from the heap, whose freed pages stay counted in RSS. Here
threads share two arenas, and ``trim()`` hands free heap pages back after a burst (``malloc_trim`` releases the
free pages in the middle of the heap as well as at its top). glibc's own thresholds are left as they are: fixing
the mmap threshold at 128 KiB, as an earlier version did, made every answer over it (a 1,500-item answer is
~300 KB) an mmap, page faults and an munmap, and cost a 1,500-item cache hit ~40 % of its CPU
(bench/adapter_load.py), for 1-2 MiB less RSS after a load run and the same peak. Elsewhere (musl, macOS)
nothing is changed.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("adapter.malloc")

_M_ARENA_MAX = -8
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
    ok = mallopt(_M_ARENA_MAX, _ARENAS) == 1
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
