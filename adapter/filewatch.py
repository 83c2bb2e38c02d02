"""Something built from files, built again when one of the files changes: the serving certificate pair of the
HTTPS API (``adapter.server.certreload``) and of the KEDA scaler's port (``adapter.keda.server``).

A file is taken as changed when its inode, modification time or size changes. ``os.stat`` follows symbolic links,
so the atomic swap of a mounted Secret (the kubelet points ``..data`` at a new directory; ``tls.crt`` links through
it) reads as a change of both files at once. A change that cannot be built (a half-written pair, a key that does
not match) keeps what was built before: it is logged once, and tried again when the files change again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
Stamp = tuple[tuple[int, int, int] | None, ...]


def stamp(paths: Sequence[str]) -> Stamp:
    """(inode, mtime in ns, size) per path; None for a path that cannot be read now."""
    stamps: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(stamps)


class WatchedFiles(Generic[T]):
    """``build()`` reads ``paths``; :meth:`refresh` builds again when they changed since the last build."""

    def __init__(self, paths: Sequence[str | None], build: Callable[[], T], what: str,
                 log: logging.Logger) -> None:
        self.paths = [p for p in paths if p]
        self.what = what
        self._build = build
        self._log = log
        self._seen = stamp(self.paths)
        self._refused: Stamp | None = None
        self.current: T = build()  # at start a failure is the caller's (a one-line usage error)
        self.reloads_total = 0
        self.failures_total = 0

    def refresh(self) -> T | None:
        """The newly built value when the files changed (and could be built), else None: keep ``current``."""
        now = stamp(self.paths)
        if now == self._seen or now == self._refused or None in now:
            return None
        try:
            built = self._build()
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            self._refused = now
            self.failures_total += 1
            self._log.warning("%s changed but cannot be used (%s); still serving the previous one", self.what,
                              getattr(exc, "reason", None) or exc)
            return None
        self._seen, self._refused, self.current = now, None, built
        self.reloads_total += 1
        self._log.info("%s changed: new connections use the new one", self.what)
        return built
