"""The rules in force, and hot reload of the ``--config`` file.

The file is checked every few seconds by content hash, not modification time: a Kubernetes ConfigMap update
swaps a symlink (``..data``) and can leave times unchanged. A valid change is applied at once; an invalid one
is refused with one error line naming the file, rule and field, and the rules in force stay. Without a file
(the built-in presets) there is nothing to watch.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from adapter.background import BackgroundTask, every
from adapter.presets.gpu import gpu_presets
from adapter.rules import RulesConfig, RulesError
from adapter.rules.resources import BUILTIN, ResourceTable
from adapter.rulesfile.loader import parse_rules

log = logging.getLogger("adapter.rules")


@dataclass(frozen=True)
class _Read:
    digest: str
    config: RulesConfig | None
    error: RulesError | None


def _read(path: str, known: set[str], table: ResourceTable) -> _Read:
    """Read and hash the file; parse it (names resolved with ``table``) only when its digest is not one of
    ``known``."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        error = RulesError(f"cannot read the rules file: {exc}", source=path)
        return _Read(f"error:{error}", None, error)
    digest = hashlib.sha256(data).hexdigest()
    if digest in known:
        return _Read(digest, None, None)
    try:
        return _Read(digest, parse_rules(data.decode("utf-8"), path, table), None)
    except UnicodeDecodeError as exc:
        return _Read(digest, None, RulesError(f"cannot read the rules file: {exc}", source=path))
    except RulesError as exc:
        return _Read(digest, None, exc)


class RulesSource:
    """Callable: ``source()`` is the current ``RulesConfig`` (what ``Discovery`` takes)."""

    def __init__(self, config: RulesConfig, path: str | None = None, *, interval_s: float = 5.0,
                 digest: str = "") -> None:
        self.path = path
        self.table = config.table  # the resource table the rules in force were parsed with
        self.interval_s = interval_s
        self.applied_total = 0
        self.rejected_total = 0
        self.last_error: str | None = None
        self._current = config
        self._applied_digest = digest
        self._seen_digest = digest  # the last content looked at, valid or not: each version is judged once
        self._listeners: list[Callable[[RulesConfig], None]] = []
        self._task = BackgroundTask("rules-reload")

    @classmethod
    def load(cls, path: str | None, *, interval_s: float = 5.0, table: ResourceTable = BUILTIN) -> RulesSource:
        """The file's rules (``RulesError`` if it is unreadable or invalid), or the presets without a file; names
        resolved with ``table`` (the API's discovery, when there is an API)."""
        if path is None:
            return cls(gpu_presets(table))
        read = _read(path, set(), table)
        if read.error is not None:
            raise read.error
        assert read.config is not None
        return cls(read.config, path, interval_s=interval_s, digest=read.digest)

    @property
    def current(self) -> RulesConfig:
        return self._current

    def __call__(self) -> RulesConfig:
        return self._current

    @property
    def watching(self) -> bool:
        return self.path is not None and self.interval_s > 0

    def on_change(self, listener: Callable[[RulesConfig], None]) -> None:
        """Call ``listener(new_rules)`` after each applied change (e.g. to relist series at once)."""
        self._listeners.append(listener)

    async def poll(self) -> bool:
        """Check the file once; True when new rules were applied."""
        if self.path is None:
            return False
        read = await asyncio.to_thread(_read, self.path, {self._seen_digest, self._applied_digest}, self.table)
        if read.digest == self._seen_digest:
            return False
        self._seen_digest = read.digest
        if read.digest == self._applied_digest:  # back to the rules in force after a refused edit
            log.info("rules file %s is back to the rules in force", self.path)
            self.last_error = None
            return False
        if read.error is not None:
            self.rejected_total += 1
            self.last_error = str(read.error)
            log.error("rules reload refused, keeping the rules in force: %s", read.error)
            return False
        assert read.config is not None
        self._current = read.config
        self._applied_digest = read.digest
        self.applied_total += 1
        self.last_error = None
        log.info("rules reloaded from %s: %d rules, %d externalRules", self.path, len(read.config.rules),
                 len(read.config.external_rules))
        for listener in self._listeners:
            listener(read.config)
        return True

    def use_table(self, table: ResourceTable) -> bool:
        """Parse the rules in force again with a new resource table (the API's discovery changed: a CRD installed
        since); applied, and listeners told, when they parse. True when applied."""
        if self.path is None:
            config = gpu_presets(table)
        else:
            read = _read(self.path, set(), table)
            if read.error is not None:
                log.error("re-reading the rules after an API resource change failed, keeping them: %s", read.error)
                return False
            assert read.config is not None
            config = read.config
            self._applied_digest = self._seen_digest = read.digest
        self.table, self._current = table, config
        for listener in self._listeners:
            listener(config)
        return True

    def start(self) -> None:
        if self.watching:
            self._task.start(self._run)

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        await every(self.interval_s, self.poll, log, "checking the rules file")
