"""Label selectors without a Kubernetes API: objects listed in a file (local runs, demos, tests).

``--standalone-objects FILE`` is JSON (or YAML) mapping a resource to its objects::

    {"pods": [{"namespace": "demo", "name": "infer-0", "labels": {"app": "infer"}}]}

The file is re-read when it changes, so a process that starts and stops workloads can keep it current
(write it atomically: temp file + rename). A bad file keeps the last good one and is reported in the error.
"""

from __future__ import annotations

import json
import logging
import operator
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import yaml

from adapter.rules import GroupResource, ResourceError, normalise_resource
from adapter.selectors import Requirement, matches
from adapter.status import bad_request, unavailable

log = logging.getLogger("adapter.standalone")


class ObjectsFileError(ValueError):
    pass


@dataclass(frozen=True)
class _Object:
    namespace: str | None
    name: str
    labels: Mapping[str, str]


def parse_objects(text: str, source: str) -> dict[GroupResource, tuple[_Object, ...]]:
    """Pure: the file's text → objects per group-resource; errors name the file and the entry."""
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ObjectsFileError(f"{source}: not valid JSON/YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ObjectsFileError(f"{source}: expected a mapping of resource -> list of objects")
    out: dict[GroupResource, tuple[_Object, ...]] = {}
    for resource, items in data.items():
        try:
            gr = normalise_resource(str(resource))
        except ResourceError as exc:
            raise ObjectsFileError(f"{source}: {resource}: {exc}") from None
        if not isinstance(items, list):
            raise ObjectsFileError(f"{source}: {resource}: expected a list of objects")
        objects = []
        for i, item in enumerate(items):
            where = f"{source}: {resource}[{i}]"
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
                raise ObjectsFileError(f"{where}: each object needs a non-empty string 'name'")
            labels = item.get("labels") or {}
            if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in labels.items()):
                raise ObjectsFileError(f"{where}: 'labels' must map strings to strings")
            namespace = item.get("namespace")
            if namespace is not None and not isinstance(namespace, str):
                raise ObjectsFileError(f"{where}: 'namespace' must be a string")
            objects.append(_Object(namespace or None, item["name"], dict(labels)))
        out[gr] = tuple(objects)
    return out


class StandaloneObjects:
    """An ObjectResolver over ``--standalone-objects FILE``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._objects: dict[GroupResource, tuple[_Object, ...]] | None = None
        self._index: dict[tuple[GroupResource, str | None, str, str], _Bucket] = {}
        self._error: str | None = None
        self.load()

    def load(self) -> None:
        """Re-read when the file changed; keep the last good content when the new one is bad."""
        try:
            st = os.stat(self.path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            with open(self.path, encoding="utf-8") as fh:
                objects = parse_objects(fh.read(), self.path)
        except OSError as exc:
            self._fail(f"{self.path}: {exc.strerror}")
            return
        except ObjectsFileError as exc:
            self._stamp = stamp
            self._fail(str(exc))
            return
        self._stamp, self._objects, self._error = stamp, objects, None
        self._index = _label_index(objects)

    def _fail(self, message: str) -> None:
        if message != self._error:
            log.error("standalone objects file refused, keeping the last good one: %s", message)
        self._error = message

    async def labels(self, group_resource: GroupResource, namespace: str | None,
                     names: list[str]) -> dict[str, Mapping[str, str]]:
        """The labels of the named objects the file lists."""
        self.load()
        wanted = set(names)
        return {o.name: o.labels for o in (self._objects or {}).get(group_resource, ())
                if o.namespace == namespace and o.name in wanted}

    async def names(self, group_resource: GroupResource, namespace: str | None,
                    selector: tuple[Requirement, ...]) -> list[str] | None:
        self.load()
        if self._objects is None:
            raise unavailable(f"no usable standalone objects file: {self._error}")
        listed = self._objects.get(group_resource)
        if listed is None:
            if selector:
                raise bad_request(f"labelSelector on {group_resource} needs those objects listed in {self.path} "
                                  "(no Kubernetes API in standalone mode)")
            return None
        # An equality requirement (a Deployment's matchLabels) narrows the scan to the objects of the namespace
        # carrying that label value; only the other requirements are then left to check.
        position = next((i for i, r in enumerate(selector) if r.operator in ("=", "==")), None)
        if position is None:
            return sorted(o.name for o in listed if o.namespace == namespace and matches(selector, o.labels))
        req = selector[position]
        rest = selector[:position] + selector[position + 1:]
        bucket = self._index.get((group_resource, namespace, req.key, req.values[0]))
        if bucket is None:
            return []
        if not rest:
            return list(bucket.names)
        return [o.name for o in bucket.objects if matches(rest, o.labels)]


class _Bucket(NamedTuple):
    """The objects with one label value, sorted by name, and their names (the answer to that one requirement)."""

    objects: tuple[_Object, ...]
    names: tuple[str, ...]


def _label_index(objects: Mapping[GroupResource, tuple[_Object, ...]],
                 ) -> dict[tuple[GroupResource, str | None, str, str], _Bucket]:
    """(group-resource, namespace, label, value) -> the objects with that label value."""
    index: dict[tuple[GroupResource, str | None, str, str], list[_Object]] = {}
    for gr, listed in objects.items():
        for obj in listed:
            for label, value in obj.labels.items():
                index.setdefault((gr, obj.namespace, label, value), []).append(obj)
    buckets = {}
    for key, found in index.items():
        found.sort(key=operator.attrgetter("name"))
        buckets[key] = _Bucket(tuple(found), tuple(o.name for o in found))
    return buckets
