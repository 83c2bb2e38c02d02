"""An in-memory index of object metadata (namespace, name, labels), fed by LIST results and watch events.

Pure and thread-safe: the cache's thread writes, request handlers read. Objects are indexed by namespace so a
request scans only its own namespace; label strings are interned because thousands of pods share a few labels.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from adapter.selectors import Requirement, matches

Labels = dict[str, str]
_CLUSTER = ""  # the "namespace" of cluster-scoped objects


def object_meta(obj: Mapping[str, Any]) -> tuple[str, str, Labels] | None:
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


class MetadataStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_namespace: dict[str, dict[str, Labels]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Swap in the result of a LIST in one step: objects absent from it are gone."""
        fresh: dict[str, dict[str, Labels]] = {}
        for obj in objects:
            meta = object_meta(obj)
            if meta is not None:
                namespace, name, labels = meta
                fresh.setdefault(namespace, {})[name] = labels
        count = sum(len(names) for names in fresh.values())
        with self._lock:
            self._by_namespace = fresh
            self._count = count

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply an ``ADDED``, ``MODIFIED`` or ``DELETED`` watch event; other types are not the store's business."""
        meta = object_meta(obj)
        if meta is None or event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        namespace, name, labels = meta
        with self._lock:
            names = self._by_namespace.get(namespace)
            if event_type == "DELETED":
                if names is not None and names.pop(name, None) is not None:
                    self._count -= 1
                    if not names:
                        del self._by_namespace[namespace]
                return
            if names is None:
                names = self._by_namespace[namespace] = {}
            if name not in names:
                self._count += 1
            names[name] = labels

    def names(self, namespace: str | None, selector: tuple[Requirement, ...] = ()) -> list[str]:
        """Sorted names of the objects in ``namespace`` (``None``: cluster-scoped objects) that ``selector`` selects."""
        with self._lock:
            objects = self._by_namespace.get(namespace or _CLUSTER)
            if not objects:
                return []
            if not selector:
                selected = list(objects)
            else:
                selected = [name for name, labels in objects.items() if matches(selector, labels)]
        selected.sort()
        return selected
