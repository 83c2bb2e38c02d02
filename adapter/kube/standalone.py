"""Label selectors without a Kubernetes API: objects listed in a file (local runs, demos, tests).

``--standalone-objects FILE`` is JSON (or YAML) mapping a resource to its objects::

    {"pods": [{"namespace": "demo", "name": "infer-0", "labels": {"app": "infer"}}]}

The file is re-read when it changes, so a process that starts and stops workloads can keep it current
(write it atomically: temp file + rename). A bad file keeps the last good one and is reported in the error.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

import yaml

from adapter.api.status import bad_request, unavailable
from adapter.kube.object_store import Meta, MetadataStore
from adapter.rules import GroupResource, ResourceError, normalise_resource
from adapter.rules.selectors import Requirement

log = logging.getLogger("adapter.standalone")


class ObjectsFileError(ValueError):
    pass


def parse_objects(text: str, source: str) -> dict[GroupResource, list[Meta]]:
    """Pure: the file's text → (namespace, name, labels) per group-resource, ``""`` for no namespace (as the
    Kubernetes store keeps cluster-scoped objects); errors name the file and the entry."""
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ObjectsFileError(f"{source}: not valid JSON/YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ObjectsFileError(f"{source}: expected a mapping of resource -> list of objects")
    out: dict[GroupResource, list[Meta]] = {}
    for resource, items in data.items():
        try:
            gr = normalise_resource(str(resource))
        except ResourceError as exc:
            raise ObjectsFileError(f"{source}: {resource}: {exc}") from None
        if not isinstance(items, list):
            raise ObjectsFileError(f"{source}: {resource}: expected a list of objects")
        objects: list[Meta] = []
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
            objects.append((namespace or "", item["name"], dict(labels)))
        out[gr] = objects
    return out


class StandaloneObjects:
    """An ObjectResolver over ``--standalone-objects FILE``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._stores: dict[GroupResource, MetadataStore] | None = None  # what the last good file lists
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
        stores = {}
        for group_resource, metas in objects.items():
            stores[group_resource] = store = MetadataStore()
            store.replace_meta(metas)
        self._stamp, self._stores, self._error = stamp, stores, None

    def _fail(self, message: str) -> None:
        if message != self._error:
            log.error("standalone objects file refused, keeping the last good one: %s", message)
        self._error = message

    async def labels(self, group_resource: GroupResource, namespace: str | None,
                     names: list[str]) -> Mapping[str, Mapping[str, str]]:
        """The labels of the named objects the file lists."""
        self.load()
        store = (self._stores or {}).get(group_resource)
        return store.labels_of(namespace, names) if store is not None else {}

    async def names(self, group_resource: GroupResource, namespace: str | None,
                    selector: tuple[Requirement, ...]) -> list[str] | None:
        store = self._store(group_resource, selector)
        return store.names(namespace, selector) if store is not None else None

    async def namespaced_names(self, group_resource: GroupResource,
                               selector: tuple[Requirement, ...]) -> list[tuple[str, str]] | None:
        store = self._store(group_resource, selector)
        return store.namespaced_names(selector) if store is not None else None

    def _store(self, group_resource: GroupResource, selector: tuple[Requirement, ...]) -> MetadataStore | None:
        """The listed objects of ``group_resource`` (the same label index as the Kubernetes API's cache); None when
        the file lists none of them and there is no selector (every object with series)."""
        self.load()
        if self._stores is None:
            raise unavailable(f"no usable standalone objects file: {self._error}")
        store = self._stores.get(group_resource)
        if store is None and selector:
            raise bad_request(f"labelSelector on {group_resource} needs those objects listed in {self.path} "
                              "(no Kubernetes API in standalone mode)")
        return store
