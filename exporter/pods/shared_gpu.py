"""Per-pod values on shared GPUs (time-slicing, MPS): sum each share holder's processes (pure).

What is physically attributable is attributed: framebuffer memory and SM utilisation per process, from the
driver. Device-level values (power, temperature, clocks, energy, utilisation of the whole GPU) have no
per-process breakdown and are never split or copied onto pods.

A holder's value is only reported when every process on the entity has been placed: one process in a pod
that cannot be identified could belong to any holder, so then the entity gets no per-pod values at all
(rather than a wrong 0) and the unresolved count says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from exporter.backends.base import GpuProcess, ProcessReport
from exporter.exposition import Family, Labels
from exporter.pods.directory import PodName
from exporter.pods.mapping import PodRef

SM_UTILIZATION = "gpu_pod_sm_utilization_ratio"
FRAMEBUFFER_USED = "gpu_pod_framebuffer_used_bytes"
_SM_HELP = ("SM utilisation of this pod's processes on a shared GPU (0-1): NVML per-process SM utilisation, "
            "newest sample per process since the previous collection, summed over the container's processes.")
_FB_HELP = ("Framebuffer memory used by this pod's processes on a shared GPU (in bytes): NVML per-process "
            "used memory summed over the container's processes.")


class Unplaced(Enum):
    """Process owners that are not a known container."""

    OUTSIDE_PODS = "outside-pods"  # a host process (e.g. an MPS server), or a pod that holds no share here
    UNKNOWN_POD = "unknown-pod"  # possibly in a pod, but which pod (or container) could not be found


Owner = PodRef | PodName | Unplaced


@dataclass(frozen=True)
class PodShare:
    pod: PodRef
    fb_used_bytes: int | None  # None: the driver did not report memory for one of its processes
    sm_util_ratio: float | None  # None: no per-process utilisation on this entity (MIG)


@dataclass(frozen=True)
class EntityShares:
    shares: tuple[PodShare, ...]  # one per holder; empty when withheld because of unresolved processes
    unresolved: int


def _holder(owner: Owner, holders: tuple[PodRef, ...]) -> PodRef | Unplaced:
    """The holder a process belongs to; OUTSIDE_PODS when it belongs to no holder, UNKNOWN_POD when unsure."""
    if isinstance(owner, PodRef):
        return owner if owner in holders else Unplaced.OUTSIDE_PODS
    if isinstance(owner, PodName):
        same_pod = {h for h in holders if (h.namespace, h.name) == (owner.namespace, owner.name)}
        if len(same_pod) == 1:
            return same_pod.pop()
        return Unplaced.UNKNOWN_POD if same_pod else Unplaced.OUTSIDE_PODS
    return owner


def _framebuffer(processes: list[GpuProcess]) -> int | None:
    total = 0
    for proc in processes:
        if proc.fb_used_bytes is None:
            return None
        total += proc.fb_used_bytes
    return total


def attribute(holders: tuple[PodRef, ...], report: ProcessReport, owners: Mapping[int, Owner]) -> EntityShares:
    """Sum each holder's processes; every holder gets a value (0 when it runs nothing on the GPU).

    Processes of pods that hold no share here (for instance a pod that sees every GPU through
    NVIDIA_VISIBLE_DEVICES=all) and host processes are left out: they cannot be part of any holder's usage.
    """
    mine: dict[PodRef, list[GpuProcess]] = {h: [] for h in holders}
    unresolved = 0
    for proc in report.processes:
        holder = _holder(owners.get(proc.pid, Unplaced.UNKNOWN_POD), holders)
        if holder is Unplaced.UNKNOWN_POD:
            unresolved += 1
        elif isinstance(holder, PodRef):
            mine[holder].append(proc)
    if unresolved:
        return EntityShares((), unresolved)
    return EntityShares(tuple(
        PodShare(pod, _framebuffer(procs),
                 sum(p.sm_util for p in procs) / 100.0 if report.sm_util_supported else None)
        for pod, procs in mine.items()), 0)


def share_families(entities: Iterable[tuple[Labels, EntityShares]]) -> list[Family]:
    """``gpu_pod_sm_utilization_ratio`` and ``gpu_pod_framebuffer_used_bytes``: the entity's labels plus the
    holder's ``container``/``namespace``/``pod``; a value the driver did not give is left out, never 0."""
    sm = Family(SM_UTILIZATION, "gauge", _SM_HELP)
    fb = Family(FRAMEBUFFER_USED, "gauge", _FB_HELP)
    for base, result in entities:
        for share in result.shares:
            labels = (*base, ("container", share.pod.container), ("namespace", share.pod.namespace),
                      ("pod", share.pod.name))
            if share.sm_util_ratio is not None:
                sm.add(labels, share.sm_util_ratio)
            if share.fb_used_bytes is not None:
                fb.add(labels, share.fb_used_bytes)
    return [sm, fb]
