"""Where the counters come from (``--configmap-data``, else ``-f``), and hot reload of the ``-f`` file.

dcgm-exporter (internal/pkg/counters/counter_config.go) reads the ConfigMap's ``metrics`` key when
``--configmap-data <namespace>:<name>`` is set, else the ``-f`` file. Unlike dcgm-exporter 4.5.x, which exits when
the ConfigMap cannot be read, a ConfigMap that cannot be fetched (missing, forbidden, API unreachable, no
credentials) falls back to the ``-f`` file with one warning line; a ConfigMap that was read but is wrong (no
``metrics`` key, a bad line) is an error naming it, as a bad file is.

dcgm-exporter watches its counters file (fsnotify) and rebuilds on a change or SIGHUP. Here the file is checked
every second by content hash (a ConfigMap volume update swaps a ``..data`` symlink and can leave times
unchanged), and SIGHUP asks for an immediate check. A good new file is switched to between two collections; a bad
one is refused with one error line naming the file and line, and the counters in use stay (dcgm-exporter exits).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.exposition import Family
from exporter.fields.counters import Counter, CountersError, load_counters, parse_counters

log = logging.getLogger("exporter.counters")

CONFIGMAP_UNSET = "none"  # dcgm-exporter's default for --configmap-data
CONFIGMAP_KEY = "metrics"


def parse_configmap_ref(value: str) -> tuple[str, str] | None:
    """``<namespace>:<name>`` -> (namespace, name); None for dcgm-exporter's unset value ``none`` or empty."""
    if value in ("", CONFIGMAP_UNSET):
        return None
    parts = value.split(":")
    if len(parts) != 2 or not all(parts):
        raise CountersError(f"--configmap-data {value!r}: expected <namespace>:<name>")
    return parts[0], parts[1]


class ConfigMapUnavailable(Exception):
    """The ConfigMap could not be fetched (as opposed to fetched and found wrong)."""


def counters_from_configmap(fetch: Callable[[str, str], dict[str, Any]], namespace: str,
                            name: str) -> tuple[Counter, ...]:
    """The counters in the ConfigMap's ``metrics`` key; ``fetch(namespace, name)`` returns the ConfigMap JSON."""
    try:
        configmap = fetch(namespace, name)
    except Exception as exc:  # ApiException, urllib3 and OSError variants, missing credentials
        status = getattr(exc, "status", None)
        reason = getattr(exc, "reason", None) if status else None
        detail = f"HTTP {status} {reason}" if reason else " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigMapUnavailable(f"could not retrieve ConfigMap '{namespace}:{name}': {detail}") from None
    data = configmap.get("data") or {}
    source = f"ConfigMap {namespace}/{name} key {CONFIGMAP_KEY}"
    if CONFIGMAP_KEY not in data:
        raise CountersError(f"ConfigMap {namespace}/{name}: no '{CONFIGMAP_KEY}' key")
    return parse_counters(data[CONFIGMAP_KEY], source)


@dataclass
class CountersSource:
    """Loads the counters the flags name; ``path`` None means the built-in default set."""

    path: str | None
    configmap: tuple[str, str] | None = None
    fetch_configmap: Callable[[str, str], dict[str, Any]] | None = None

    def load(self) -> tuple[Counter, ...]:
        if self.configmap is not None:
            if self.fetch_configmap is None:
                log.warning("--configmap-data %s:%s: no Kubernetes credentials; falling back to metric file '%s'",
                            *self.configmap, self.path or "<built-in default>")
            else:
                try:
                    return counters_from_configmap(self.fetch_configmap, *self.configmap)
                except ConfigMapUnavailable as exc:
                    log.warning("%s; falling back to metric file '%s'", exc, self.path or "<built-in default>")
        return load_counters(self.path)


def api_configmap_fetcher(api_client: Any, timeout_s: float = 5.0) -> Callable[[str, str], dict[str, Any]]:
    """``GET /api/v1/namespaces/<ns>/configmaps/<name>`` through the official client, as JSON."""
    import json

    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def fetch(namespace: str, name: str) -> dict[str, Any]:
        response = core.read_namespaced_config_map(name, namespace, _preload_content=False,
                                                   _request_timeout=timeout_s)
        return json.loads(response.data)

    return fetch


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


class CountersReloader:
    """Re-loads the counters when the ``-f`` file's content changes (or on :meth:`request`, e.g. SIGHUP)."""

    def __init__(self, source: CountersSource, apply: Callable[[Sequence[Counter]], None],
                 current: Sequence[Counter], interval_s: float = 1.0) -> None:
        if source.path is None:
            raise ValueError("nothing to watch without a counters file")
        self.source = source
        self.path = source.path
        self.interval_s = interval_s
        self.checks_total = 0
        self.reloads_total = 0
        self.rejected_total = 0
        self._apply = apply
        self._names = tuple(c.name for c in current)
        self._digest = _digest(self.path)
        self._forced = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="counters-reload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def request(self) -> None:
        """Check now and reload even if the content looks unchanged (SIGHUP)."""
        self._forced = True
        self._wake.set()

    def check(self) -> bool:
        """Reload if the file changed (or a reload was requested); True when new counters were applied."""
        try:
            return self._check()
        finally:
            self.checks_total += 1  # counted once the check is over: a test waits on it to know one ran

    def _check(self) -> bool:
        digest, forced = _digest(self.path), self._forced
        self._forced = False
        if digest is None:  # gone or unreadable, e.g. mid-replacement: keep serving, reload when it is back
            if self._digest is not None:
                log.warning("cannot read counters file %s, still serving the %d fields loaded before",
                            self.path, len(self._names))
            self._digest = None
            return False
        if digest == self._digest and not forced:
            return False
        self._digest = digest
        try:
            counters = self.source.load()
        except CountersError as exc:
            self.rejected_total += 1
            log.error("counters changed but refused, still serving the %d fields loaded before: %s",
                      len(self._names), exc)
            return False
        self._apply(counters)
        self.reloads_total += 1
        names = {c.name for c in counters}
        added = [c.name for c in counters if c.name not in self._names]
        removed = [n for n in self._names if n not in names]
        self._names = tuple(c.name for c in counters)
        log.info("counters reloaded from %s: %d fields (added: %s; removed: %s)", self.path, len(counters),
                 ", ".join(added) or "none", ", ".join(removed) or "none")
        return True

    def self_metrics(self) -> list[Family]:
        """The exporter's own series about reloading: a refused edit keeps the old fields, so alert on it."""
        p = "gpu_exporter_counters_"
        checks = Family(p + "checks_total", "counter", "Checks of the counters file for a change.")
        checks.add((), self.checks_total)
        reloads = Family(p + "reloads_total", "counter",
                         "Changed counters files: applied, or rejected (the fields in use stay).")
        reloads.add((("result", "applied"),), self.reloads_total)
        reloads.add((("result", "rejected"),), self.rejected_total)
        return [checks, reloads]

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            if self._stop.is_set():
                return
            self._wake.clear()
            self.check()
