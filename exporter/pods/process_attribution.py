"""Per-pod values for shared GPUs, once per collection: driver processes -> cgroups -> pods -> families.

PID -> pod UID and container ID come from ``<proc root>/<pid>/cgroup``; UID/container ID -> names from a
:class:`~exporter.pods.directory.PodDirectory`; which containers hold a share of which GPU from PodResources.
The driver reports PIDs in the exporter's PID namespace and hides processes it cannot see there, so all of this
needs the host's PID namespace (``hostPID: true``); without it the shared GPUs keep only their device-level
series and ``gpu_exporter_process_attribution_up`` is 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from exporter.backends.base import Backend, BackendUnavailable, DeviceLost, FieldNotSupported, FieldUnavailable
from exporter.exposition import Family, Labels, labels_of
from exporter.fields.entities import GpuEntity
from exporter.pods.directory import PodDirectory
from exporter.pods.mapping import EntityKey, PodRef
from exporter.pods.procfs import NoPod, ProcFs, Visibility
from exporter.pods.shared_gpu import EntityShares, Owner, Unplaced, attribute, share_families

log = logging.getLogger("exporter.process_attribution")


@dataclass
class SharedGpuResult:
    families: list[Family] = field(default_factory=list)
    visibility: Visibility = Visibility.OK
    unresolved: dict[GpuEntity, int] = field(default_factory=dict)


class ProcessAttribution:
    def __init__(self, proc: ProcFs, directory: PodDirectory) -> None:
        self.proc = proc
        self.directory = directory
        self._no_process_list: set[EntityKey] = set()
        self._warned: Visibility | None = None

    def owners(self, pids: Iterable[int]) -> dict[int, Owner]:
        return {pid: self._owner(pid) for pid in pids}

    def _owner(self, pid: int) -> Owner:
        cgroup = self.proc.pod_of(pid)
        if cgroup is NoPod.HOST:
            return Unplaced.OUTSIDE_PODS
        if isinstance(cgroup, NoPod):  # gone or unreadable: it may be a holder's (hidepid looks like "gone")
            return Unplaced.UNKNOWN_POD
        if cgroup.container_id is not None:
            container = self.directory.container(cgroup.container_id)
            if container is not None:
                return container
        return self.directory.pod(cgroup.pod_uid) or Unplaced.UNKNOWN_POD

    def collect(self, backend: Backend, entities: Iterable[GpuEntity], shares: dict[EntityKey, tuple[PodRef, ...]],
                base_labels: Callable[[GpuEntity], Labels]) -> SharedGpuResult:
        """Per-pod families for the shared ``entities``; BackendUnavailable propagates, other failures only
        leave that entity without per-pod values."""
        visibility = self.proc.visibility()
        if visibility is Visibility.OK:
            self._warned = None
        elif shares and self._warned is not visibility:  # said once, and only where a GPU is shared
            log.warning("per-pod attribution on shared GPUs is off (%s): run the exporter with hostPID: true "
                        "(and --proc-root at a proc filesystem of the host's PID namespace)", visibility.value)
            self._warned = visibility
        result = SharedGpuResult(visibility=visibility)
        if visibility is not Visibility.OK:
            return result
        placed: list[tuple[Labels, EntityShares]] = []
        for entity in entities:
            holders = shares.get(entity.key)
            if holders is None or entity.key in self._no_process_list:
                continue
            try:
                report = backend.processes(entity)
            except FieldNotSupported as exc:
                self._no_process_list.add(entity.key)
                log.info("GPU %d%s: no per-process data (%s); per-pod values omitted", entity.gpu,
                         "" if entity.gpu_instance_id is None else f" GPU instance {entity.gpu_instance_id}", exc)
                continue
            except (FieldUnavailable, DeviceLost):
                continue
            except BackendUnavailable:
                raise
            shared = attribute(holders, report, self.owners(p.pid for p in report.processes))
            result.unresolved[entity] = shared.unresolved
            placed.append((base_labels(entity), shared))
        result.families = share_families(placed)
        return result


def self_metric_families(result: SharedGpuResult) -> list[Family]:
    p = "gpu_exporter_"
    up = Family(p + "process_attribution_up", "gauge",
                "1 when GPU processes can be attributed to pods (host PIDs visible), 0 when shared GPUs get only "
                "device-level series.")
    up.add((), int(result.visibility is Visibility.OK))
    why = Family(p + "process_attribution_unavailable", "gauge",
                 "1 with the reason why per-pod attribution on shared GPUs is off: pids_not_visible (no host PID "
                 "namespace) or proc_unreadable (no proc filesystem at --proc-root).")
    if result.visibility is not Visibility.OK:
        why.add((("reason", result.visibility.value),), 1)
    unresolved = Family(p + "shared_gpu_unresolved_processes", "gauge",
                        "Processes on a shared GPU whose pod could not be identified; while above 0 the GPU's "
                        "per-pod series are withheld.")
    for entity, count in result.unresolved.items():
        where = labels_of([("gpu", str(entity.gpu)),
                           ("GPU_I_ID", None if entity.gpu_instance_id is None else str(entity.gpu_instance_id))])
        unresolved.add(where, count)
    return [up, why, unresolved]
