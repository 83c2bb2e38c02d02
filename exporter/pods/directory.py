"""Pod UID and container ID -> pod name, namespace and container, from the kubelet's log directories.

PodResources v1 names pods but carries no UID, while a process's cgroup carries the UID and container ID but no
names. The kubelet writes both halves into directory names on every node (read-only hostPath mounts suffice):

- ``/var/log/pods/<namespace>_<pod name>_<pod uid>/`` (one directory per pod)
- ``/var/log/containers/<pod name>_<namespace>_<container name>-<container id>.log`` (one symlink per container)

Names and namespaces are DNS labels/subdomains and container names DNS labels, so none contains ``_``; the
kubelet cuts symlink names longer than 255 bytes, which loses the container ID (such entries are skipped).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from exporter.pods.mapping import PodRef

log = logging.getLogger("exporter.pod_directory")

_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")
_CONTAINER_LINK = re.compile(r"([^_]+)_([^_]+)_([^_]+)-([0-9a-f]{64})\.log")


@dataclass(frozen=True)
class PodName:
    namespace: str
    name: str


class PodDirectory(Protocol):
    """Looks up pods by UID and containers by runtime container ID; None when unknown (never blocks long)."""

    def pod(self, uid: str) -> PodName | None: ...

    def container(self, container_id: str) -> PodRef | None: ...


def parse_pod_log_dir(name: str) -> tuple[str, PodName] | None:
    """``<namespace>_<pod>_<uid>`` -> (uid, pod); None for anything else (e.g. the pre-1.14 ``<uid>`` form)."""
    parts = name.split("_")
    if len(parts) != 3 or not all(parts) or not _UID.fullmatch(parts[2]):
        return None
    return parts[2], PodName(parts[0], parts[1])


def parse_container_log_link(name: str) -> tuple[str, PodRef] | None:
    """``<pod>_<namespace>_<container>-<64 hex id>.log`` -> (container id, container); None otherwise."""
    match = _CONTAINER_LINK.fullmatch(name)
    if match is None:
        return None
    pod, namespace, container, container_id = match.groups()
    return container_id, PodRef(pod, namespace, container)


class KubeletLogDirectory:
    """Reads ``<root>/pods`` and ``<root>/containers`` names; re-reads them when a lookup misses, at most every
    ``rescan_after_s`` (new pods appear there before their processes can reach a GPU)."""

    def __init__(self, root: str = "/var/log", rescan_after_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self.rescan_after_s = rescan_after_s
        self._clock = clock
        self._pods: dict[str, PodName] = {}
        self._containers: dict[str, PodRef] = {}
        self._scanned_at: float | None = None
        self._warned = False

    def pod(self, uid: str) -> PodName | None:
        if uid not in self._pods:
            self._rescan_if_due()
        return self._pods.get(uid)

    def container(self, container_id: str) -> PodRef | None:
        if container_id not in self._containers:
            self._rescan_if_due()
        return self._containers.get(container_id)

    def _rescan_if_due(self) -> None:
        now = self._clock()
        if self._scanned_at is not None and now - self._scanned_at < self.rescan_after_s:
            return
        self._scanned_at = now
        self._pods = dict(filter(None, map(parse_pod_log_dir, self._names("pods"))))
        self._containers = dict(filter(None, map(parse_container_log_link, self._names("containers"))))

    def _names(self, sub: str) -> list[str]:
        path = os.path.join(self.root, sub)
        try:
            names = os.listdir(path)
        except OSError as exc:
            if not self._warned:
                log.warning("cannot read the kubelet's %s (mount the host's /var/log/pods and /var/log/containers "
                            "read-only, or use --pod-identity-source kubernetes-api): %s", path, exc.strerror)
                self._warned = True
            return []
        return names
