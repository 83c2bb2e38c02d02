"""An in-memory index of object metadata (namespace, name, labels): the Kubernetes cache's, fed by LIST results and
watch events (``adapter/kube/cache.py``), and ``--standalone-objects``' per resource (``adapter/standalone.py``).

Pure and thread-safe: the cache's thread writes, request handlers read. Objects are indexed by namespace so a
request scans only its own namespace, and by (namespace, label, value) so a selector with an equality requirement
(a Deployment's matchLabels) examines only the objects carrying that value. Label strings are interned, and objects
with the same labels (a ReplicaSet's pods) share one label map, because thousands of pods share a few labels.
Each index bucket is a sorted list of names: answers are sorted, so a selector served from one bucket needs no
sort per request, and most buckets hold one or two names, for which a list is a third of a set's memory.
"""

from __future__ import annotations

import bisect
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from adapter.rules.selectors import Requirement, matches

Labels = dict[str, str]
Meta = tuple[str, str, Labels]  # namespace ("" when cluster-scoped), name, labels
_CLUSTER = ""  # the "namespace" of cluster-scoped objects


def object_meta(obj: Mapping[str, Any]) -> Meta | None:
    """``(namespace, name, labels)`` of a full or ``PartialObjectMetadata`` object; ``None`` without a name."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = metadata.get("namespace") or _CLUSTER
    raw = metadata.get("labels")
    labels = ({sys.intern(str(k)): sys.intern(str(v)) for k, v in raw.items()}
              if isinstance(raw, Mapping) else {})
    return sys.intern(str(namespace)), name, labels


def resource_version(obj: Mapping[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    value = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    return str(value) if value else None


def _shared(maps: dict[frozenset[tuple[str, str]], Labels], labels: Labels) -> Labels:
    """The one map held for this label set (the store never changes a map in place)."""
    return maps.setdefault(frozenset(labels.items()), labels)


_IndexKey = tuple[str, str, str]  # namespace, label key, label value
_INDEXED = ("=", "==")


def _index_add(index: dict[_IndexKey, list[str]], namespace: str, name: str, labels: Labels,
               insert: Callable[[list[str], str], None] = bisect.insort) -> None:
    """Add ``name`` (not in them yet) to its buckets; ``insert=list.append`` when the caller sorts them after."""
    for key, value in labels.items():
        bucket = index.get((namespace, key, value))
        if bucket is None:
            index[(namespace, key, value)] = [name]
        else:
            insert(bucket, name)


def _index_discard(index: dict[_IndexKey, list[str]], namespace: str, name: str, labels: Labels) -> None:
    for key, value in labels.items():
        bucket = index.get((namespace, key, value))
        if bucket is not None:
            position = bisect.bisect_left(bucket, name)
            if position < len(bucket) and bucket[position] == name:
                del bucket[position]
            if not bucket:
                del index[(namespace, key, value)]


class MetadataStore:
    """Invariant, kept under ``_lock``: ``name in _index[(ns, k, v)]`` iff ``_by_namespace[ns][name].get(k) == v``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_namespace: dict[str, dict[str, Labels]] = {}
        self._index: dict[_IndexKey, list[str]] = {}
        self._count = 0
        self._shared: dict[frozenset[tuple[str, str]], Labels] = {}  # one map per distinct label set

    def __len__(self) -> int:
        return self._count

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Swap in the result of a LIST in one step: objects absent from it are gone."""
        self.replace_meta(meta for meta in map(object_meta, objects) if meta is not None)

    def replace_meta(self, metas: Iterable[Meta]) -> None:
        """``replace`` from objects already reduced by ``object_meta`` (a LIST reduces each page as it arrives)."""
        fresh: dict[str, dict[str, Labels]] = {}
        shared: dict[frozenset[tuple[str, str]], Labels] = {}
        for namespace, name, labels in metas:
            fresh.setdefault(namespace, {})[name] = _shared(shared, labels)
        index: dict[_IndexKey, list[str]] = {}
        for namespace, objects_of_namespace in fresh.items():  # built after de-duplication: the last copy wins
            for name, labels in objects_of_namespace.items():
                _index_add(index, namespace, name, labels, list.append)
        for bucket in index.values():
            bucket.sort()
        count = sum(len(names) for names in fresh.values())
        with self._lock:
            self._by_namespace = fresh
            self._index = index
            self._count = count
            self._shared = shared

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply an ``ADDED``, ``MODIFIED`` or ``DELETED`` watch event; other types are not the store's business."""
        meta = object_meta(obj)
        if meta is None or event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        namespace, name, labels = meta
        with self._lock:
            names = self._by_namespace.get(namespace)
            old = names.get(name) if names is not None else None
            if event_type == "DELETED":
                if names is not None and old is not None:
                    del names[name]
                    _index_discard(self._index, namespace, name, old)  # the stored labels, not the event's
                    self._count -= 1
                    if not names:
                        del self._by_namespace[namespace]
                return
            if names is None:
                names = self._by_namespace[namespace] = {}
            if len(self._shared) > 2 * self._count + 1024:  # label sets of objects long gone: start over
                self._shared = {}
            labels = _shared(self._shared, labels)
            if old is None:
                self._count += 1
                _index_add(self._index, namespace, name, labels)
            elif old != labels:  # most updates leave the labels alone: touch only the pairs that changed
                _index_discard(self._index, namespace, name,
                               {k: v for k, v in old.items() if labels.get(k) != v})
                _index_add(self._index, namespace, name, {k: v for k, v in labels.items() if old.get(k) != v})
            names[name] = labels

    def labels(self, namespace: str | None, name: str) -> Labels | None:
        """The labels of one object as last seen; ``None`` when the store does not hold it."""
        with self._lock:
            return self._by_namespace.get(namespace or _CLUSTER, {}).get(name)

    def labels_of(self, namespace: str | None, names: Iterable[str]) -> dict[str, Labels]:
        """The labels of those of ``names`` the store holds, by name (one lock for a whole answer's objects)."""
        with self._lock:
            objects = self._by_namespace.get(namespace or _CLUSTER, {})
            return {name: found for name in names if (found := objects.get(name)) is not None}

    def namespaces(self) -> list[str]:
        """The namespaces that hold objects, sorted (``""`` for cluster-scoped ones)."""
        with self._lock:
            return sorted(self._by_namespace)

    def names(self, namespace: str | None, selector: tuple[Requirement, ...] = ()) -> list[str]:
        """Sorted names of the objects in ``namespace`` (``None``: cluster-scoped objects) that ``selector`` selects."""
        namespace = namespace or _CLUSTER
        position = next((i for i, req in enumerate(selector) if req.operator in _INDEXED), None)
        with self._lock:
            objects = self._by_namespace.get(namespace)
            if not objects:
                return []
            if position is not None:
                # The bucket holds exactly the objects the indexed requirement selects, sorted: check only the others.
                req = selector[position]
                candidates = self._index.get((namespace, req.key, req.values[0]), ())
                rest = selector[:position] + selector[position + 1:]
                if not rest:
                    return list(candidates)
                return [name for name in candidates if matches(rest, objects[name])]
            if not selector:
                selected = list(objects)
            else:
                selected = [name for name, labels in objects.items() if matches(selector, labels)]
        selected.sort()
        return selected

    def namespaced_names(self, selector: tuple[Requirement, ...] = ()) -> list[tuple[str, str]]:
        """(namespace, name) of the selected namespaced objects in every namespace, sorted."""
        return [(ns, name) for ns in self.namespaces() if ns for name in self.names(ns, selector)]
