"""The resource table from the Kubernetes API's discovery documents, refreshed in the background.

What client-go's discovery REST mapper knows (prometheus-adapter normalises resource names with it, refreshed
every ``--discovery-interval`` by custom-metrics-apiserver's regenerating mapper): every resource of
``/api/v1`` and of each group in ``/apis``, the preferred version first, with its kind, singular name (the
lowercased kind when discovery leaves it empty), short names and scope. Subresources (``pods/log``) are not
resources. A group whose discovery fails (an aggregated API that is down, this adapter's own groups while it
starts) is left out of that refresh rather than failing it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

from adapter.background import BackgroundTask, every
from adapter.kube.api import KubeApi, KubeError
from adapter.rules.resources import BUILTIN, ResourceKind, ResourceTable

log = logging.getLogger("adapter.kube.restmapper")


def kinds_of(resource_list: dict[str, Any], group: str, version: str) -> Iterator[ResourceKind]:
    """The resources of one ``APIResourceList``."""
    for entry in resource_list.get("resources") or []:
        name = str(entry.get("name") or "")
        kind = str(entry.get("kind") or "")
        if not name or "/" in name or not kind:
            continue
        yield ResourceKind(name, str(entry.get("singularName") or "") or kind.lower(), kind, group, version,
                           bool(entry.get("namespaced", True)), tuple(str(s) for s in entry.get("shortNames") or ()))


def discover(api: KubeApi) -> ResourceTable:
    """Read discovery once. ``KubeError`` when the core group or the group list cannot be read."""
    kinds = list(kinds_of(api.get_json("/api/v1"), "", "v1"))
    for group in api.get_json("/apis").get("groups") or []:
        name = str(group.get("name") or "")
        versions = [str(v.get("version")) for v in group.get("versions") or [] if v.get("version")]
        preferred = str((group.get("preferredVersion") or {}).get("version") or (versions[0] if versions else ""))
        for version in [preferred, *(v for v in versions if v != preferred)]:
            try:
                kinds.extend(kinds_of(api.get_json(f"/apis/{name}/{version}"), name, version))
            except KubeError as exc:
                log.debug("API discovery of %s/%s failed, leaving it out: %s", name, version, exc)
    return ResourceTable(kinds)


class ResourceDiscovery:
    """Keeps ``table`` in step with the API's discovery; tells its listeners the new table after it changes."""

    def __init__(self, api: KubeApi, interval_s: float) -> None:
        self.api = api
        self.interval_s = interval_s
        self._listeners: list[Callable[[ResourceTable], object]] = []
        self.table = BUILTIN  # until the first refresh
        self.failures_total = 0
        self._task = BackgroundTask("api-discovery")

    def on_change(self, listener: Callable[[ResourceTable], object]) -> None:
        """Call ``listener(table)`` after each change (e.g. to parse the rules again with the new resources)."""
        self._listeners.append(listener)

    def refresh(self) -> bool:
        """Read discovery; True when its table differs from the one in force (then ``table`` is the new one)."""
        table = discover(self.api)
        if table == self.table:
            return False
        self.table = table
        return True

    def start(self) -> None:
        if self.interval_s > 0:
            self._task.start(self._run)

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        await every(self.interval_s, self._step, log, "API discovery")

    async def _step(self) -> None:
        try:
            changed = await asyncio.to_thread(self.refresh)
        except KubeError as exc:
            self.failures_total += 1
            log.warning("API discovery failed, keeping the resources known so far: %s", exc)
            return
        if changed:
            log.info("API resources changed (%d known): re-reading the rules", len(self.table.kinds))
            for listener in self._listeners:
                listener(self.table)
