"""A watch-backed cache of one resource's object metadata, cluster-wide: LIST once, then WATCH for changes.

Requests read the cache and never call the API server. A daemon thread keeps it current:

- LIST (paged, metadata only) replaces the store atomically and gives the resourceVersion to watch from;
- WATCH from there (``allowWatchBookmarks`` keeps that version fresh, ``timeoutSeconds`` makes watches roll over);
  a watch that ends cleanly is reopened from the last version seen, without a LIST;
- an expired version (HTTP 410 when the watch starts, or an ``ERROR`` event carrying a 410 Status) means
  history was compacted: LIST again;
- any other failure (refused, reset, truncated stream, error status) is retried with capped exponential backoff,
  starting again with a LIST so objects deleted meanwhile disappear.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import urllib3

from adapter.kube.api import (
    METADATA_LIST_ACCEPT,
    METADATA_WATCH_ACCEPT,
    KubeApi,
    KubeApiError,
    KubeClient,
    KubeError,
    json_lines,
    read_json,
)
from adapter.kube.object_store import Labels, Meta, MetadataStore, object_meta, resource_version
from adapter.rules.resources import GroupResource
from adapter.rules.selectors import Requirement

log = logging.getLogger("adapter.kube.cache")


class _Expired(Exception):
    """The resourceVersion we watch from is older than the server's history."""


class MetadataCache:
    def __init__(self, api_client: KubeClient, group_resource: GroupResource, *, watch_timeout: float = 300.0,
                 backoff_initial: float = 0.2, backoff_cap: float = 10.0, request_timeout: float = 30.0,
                 page_size: int = 500, start: bool = True) -> None:
        self.group_resource = group_resource
        self._api = KubeApi(api_client, request_timeout)
        self._watch_timeout = watch_timeout
        self._backoff_initial = backoff_initial
        self._backoff_cap = backoff_cap
        self._page_size = page_size
        self._store = MetadataStore()
        self._state = threading.Condition()
        self._synced = False
        self._stopping = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._response_lock = threading.Lock()
        self._path: str | None = None
        self.resource_version: str | None = None
        self.lists_total = 0
        self.watch_restarts_total = 0
        self.last_error: str | None = None
        self.not_served: str | None = None  # why the API server does not serve this resource (404), if it does not
        self._watched = False
        self._progressed = False
        self._thread = threading.Thread(target=self._run, name=f"kube-cache-{group_resource}", daemon=True)
        if start:
            self.start()

    # -- reading -------------------------------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        """True once a LIST has filled the cache; it then keeps serving, through later outages, what it last saw."""
        return self._synced

    @property
    def objects(self) -> int:
        return len(self._store)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until synced; returns early (False) when the server does not serve the resource, or on stop."""
        with self._state:
            self._state.wait_for(lambda: self._synced or self.not_served is not None or self._stopping.is_set(),
                                 timeout)
            return self._synced

    def names(self, namespace: str | None, selector: tuple[Requirement, ...] = ()) -> list[str]:
        """Sorted names in ``namespace`` (``None`` for cluster-scoped resources); an empty selector selects all."""
        return self._store.names(namespace, selector)

    def labels_of(self, namespace: str | None, names: list[str]) -> dict[str, Labels]:
        return self._store.labels_of(namespace, names)

    def namespaced_names(self, selector: tuple[Requirement, ...] = ()) -> list[tuple[str, str]]:
        """(namespace, name) of the selected namespaced objects in every namespace, sorted."""
        return self._store.namespaced_names(selector)

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        with self._state:
            self._state.notify_all()
        self._interrupt()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    # -- the loop ------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0  # consecutive attempts that got nothing done; sets the backoff
        need_list = True
        while not self._stopping.is_set():
            self._progressed = False
            try:
                if need_list:
                    self._list()
                    need_list = False
                if self._watch():  # the server ended the watch (timeoutSeconds): reopen it, no LIST
                    failures = 0
                    continue
                failures += 1  # ended at once without a single event: do not spin on such a server
            except _Expired as exc:
                log.debug("cache of %s: %s; listing again", self.group_resource, exc)
                need_list = True
                if self._progressed:
                    failures = 0
                    continue  # history moved on while we watched: relist at once
                failures += 1
            except KubeError as exc:
                if self._stopping.is_set():
                    break
                self._record_error(exc)
                need_list = True
                failures = 1 if self._progressed else failures + 1
            except Exception as exc:  # a bug must not end the thread and leave a cache that silently goes stale
                log.exception("cache of %s: unexpected error", self.group_resource)
                self._record_error(exc)
                need_list = True
                failures += 1
            self._stopping.wait(self._delay(failures))

    def _delay(self, failures: int) -> float:
        delay = min(self._backoff_cap, self._backoff_initial * 2 ** max(0, failures - 1))
        return delay * random.uniform(0.8, 1.0)  # spread the reconnects of many adapters after an apiserver restart

    def _record_error(self, exc: BaseException) -> None:
        message = str(exc) or type(exc).__name__
        self.last_error = message
        log.warning("cache of %s: %s", self.group_resource, message)
        if isinstance(exc, KubeApiError) and exc.code == 404:
            self._path = None  # the group's preferred version may have changed: discover again
            with self._state:
                self.not_served = message
                self._state.notify_all()

    # -- LIST ----------------------------------------------------------------------------------------------------
    def _collection(self) -> str:
        if self._path is None:
            self._path = self._api.resource_path(self.group_resource)
        return self._path

    def _list(self) -> None:
        path = self._collection()
        try:
            items, version = self._list_pages(path, self._page_size)
        except KubeApiError as exc:
            if exc.code != 410:
                raise
            items, version = self._list_pages(path, 0)  # continue token expired mid-way: one unpaged LIST
        # Counted before the store shows it: whoever sees the listed objects also sees the LIST counted (a test
        # that waited for the objects and then read the count raced the increment).
        self.lists_total += 1
        self._store.replace_meta(items)
        self.resource_version = version
        with self._state:
            self._synced = True
            self.not_served = None
            self._state.notify_all()
        log.debug("cache of %s: listed %d objects at resourceVersion %s", self.group_resource, len(items), version)

    def _list_pages(self, path: str, limit: int) -> tuple[list[Meta], str | None]:
        """Every page's objects, each reduced to what the store keeps as soon as its page is read: only one page
        of decoded JSON is alive at a time (the whole list's, decoded, was most of a 5,000-pod cache's peak)."""
        items: list[Meta] = []
        token = ""
        while True:
            query = [("limit", str(limit))] if limit else []
            if token:
                query.append(("continue", token))
            page = self._read(path, query, METADATA_LIST_ACCEPT, self._api.request_timeout)
            for item in page.get("items") or ():
                meta = object_meta(item) if isinstance(item, dict) else None
                if meta is not None:
                    items.append(meta)
            metadata = page.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            if not token:
                return items, resource_version(page)

    def _read(self, path: str, query: list[tuple[str, str]], accept: str, timeout: float) -> dict[str, Any]:
        with self._opened(path, query, accept, timeout) as response:
            return read_json(response, f"LIST {path}")

    # -- WATCH ---------------------------------------------------------------------------------------------------
    def _watch(self) -> bool:
        """Follow one watch until the server ends it; False when it ended at once without an event."""
        started = time.monotonic()
        path = self._collection()
        seconds = max(1, round(self._watch_timeout * random.uniform(1.0, 1.25)))
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(seconds))]
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        if self._watched:
            self.watch_restarts_total += 1
        self._watched = True
        # The server ends the watch after timeoutSeconds; the read timeout only catches a silently dead peer.
        timeout = (self._api.request_timeout, seconds + self._api.request_timeout)
        try:
            with self._opened(path, query, METADATA_WATCH_ACCEPT, timeout) as response:
                for event in json_lines(response, f"WATCH {path}"):
                    self._apply(event)
                    self._progressed = True
        except KubeApiError as exc:
            if exc.code == 410:
                raise _Expired(str(exc)) from None
            raise
        return self._progressed or time.monotonic() - started >= 1.0

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            error = KubeApiError.from_status(code, obj, "watch error event")
            if code == 410:
                raise _Expired(str(error))
            raise error
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._store.apply(kind, obj)
        version = resource_version(obj)
        if version and kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            self.resource_version = version

    # -- the open response, so that stop() can interrupt a blocking read -----------------------------------------
    @contextlib.contextmanager
    def _opened(self, path: str, query: list[tuple[str, str]], accept: str,
                timeout: float | tuple[float, float]) -> Iterator[urllib3.BaseHTTPResponse]:
        response = self._api.open(path, query, accept, timeout)
        with self._response_lock:
            self._response = response
        clean = False
        try:
            if self._stopping.is_set():
                raise KubeError("stopping")
            yield response
            clean = True
        finally:
            with self._response_lock:
                self._response = None
            if clean:
                response.release_conn()
            else:
                response.close()  # unread data or a broken stream: the connection cannot be reused

    def _interrupt(self) -> None:
        with self._response_lock:
            response = self._response
        if response is None:
            return
        try:
            response.shutdown()  # wakes a thread blocked reading the socket
        except (AttributeError, ValueError, RuntimeError, OSError):
            with contextlib.suppress(Exception):
                response.close()

