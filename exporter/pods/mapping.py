"""Attribute GPU entities to Kubernetes pods from kubelet PodResources allocations (pure, no I/O).

Device IDs are whatever the device plugin advertised; :func:`parse_device_id` understands the NVIDIA
plugin forms (``GPU-<uuid>``, ``MIG-<uuid>``, legacy ``MIG-GPU-<uuid>/<gi>/<ci>``, ``::N`` replicas) and
the GKE plugin forms (``nvidia0``, ``nvidia0/gi7``, ``nvidia0/vgpu2``, ``nvidia0/gi7/vgpu1``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from exporter.fields.entities import GpuEntity

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

IdType = Literal["uid", "device-name"]
EntityKey = tuple[int, int | None]

_GKE_RE = re.compile(r"nvidia([0-9]+)(?:/gi([0-9]+))?(?:/vgpu([0-9]+))?")
_LEGACY_MIG_RE = re.compile(r"MIG-(GPU-[^/]+)/([0-9]+)/([0-9]+)")


@dataclass(frozen=True)
class PodRef:
    """One container of one pod."""

    name: str
    namespace: str
    container: str


@dataclass(frozen=True)
class DeviceAllocation:
    """One device ID of one resource allocated to one container (a flattened PodResources row)."""

    resource_name: str
    device_id: str
    pod: PodRef


class DeviceIdKind(Enum):
    GPU_UUID = "gpu-uuid"  # GPU-<uuid>[::N]
    MIG_UUID = "mig-uuid"  # MIG-<uuid>[::N]
    MIG_LEGACY = "mig-legacy"  # MIG-GPU-<uuid>/<gi>/<ci>[::N]
    DEVICE_NAME = "device-name"  # nvidiaN[/giK][/vgpuR]
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ParsedDeviceId:
    """A device-plugin ID broken into the parts used for matching; replicas are kept but never matched.

    ``uuid`` is the GPU UUID (``GPU_UUID``, and the parent for ``MIG_LEGACY``) or the MIG device UUID.
    """

    kind: DeviceIdKind
    uuid: str | None = None
    gpu: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    replica: int | None = None


UNKNOWN_DEVICE_ID = ParsedDeviceId(DeviceIdKind.UNKNOWN)


def parse_device_id(device_id: str) -> ParsedDeviceId:
    """Parse any known device-ID form; anything else gives :data:`UNKNOWN_DEVICE_ID` (never raises)."""
    gke = _GKE_RE.fullmatch(device_id)
    if gke:
        gpu, gi, vgpu = gke.groups()
        return ParsedDeviceId(
            DeviceIdKind.DEVICE_NAME,
            gpu=int(gpu),
            gpu_instance_id=None if gi is None else int(gi),
            replica=None if vgpu is None else int(vgpu),
        )
    base, sep, replica_text = device_id.partition("::")
    if sep and not (replica_text.isdigit() and replica_text.isascii()):
        return UNKNOWN_DEVICE_ID
    replica = int(replica_text) if sep else None
    legacy = _LEGACY_MIG_RE.fullmatch(base)
    if legacy:
        parent, gi, ci = legacy.groups()
        return ParsedDeviceId(
            DeviceIdKind.MIG_LEGACY,
            uuid=parent,
            gpu_instance_id=int(gi),
            compute_instance_id=int(ci),
            replica=replica,
        )
    for prefix, kind in (("GPU-", DeviceIdKind.GPU_UUID), ("MIG-", DeviceIdKind.MIG_UUID)):
        rest = base.removeprefix(prefix)
        if rest != base and rest and "/" not in rest and not rest.startswith("GPU-"):
            return ParsedDeviceId(kind, uuid=base, replica=replica)
    return UNKNOWN_DEVICE_ID


def is_gpu_resource(resource_name: str, extra_names: frozenset[str] = frozenset()) -> bool:
    """True for ``nvidia.com/gpu``, ``nvidia.com/mig-*`` and any configured extra resource name."""
    return (
        resource_name == GPU_RESOURCE
        or resource_name.startswith(MIG_RESOURCE_PREFIX)
        or resource_name in extra_names
    )


def _norm_uuid(uuid: str) -> str:
    """Case-insensitive UUID key; MIG UUIDs compare with or without their ``MIG-`` prefix."""
    return uuid.lower().removeprefix("mig-")


class _EntityResolver:
    """Lookup tables from parsed device IDs to entity keys."""

    def __init__(self, entities: Sequence[GpuEntity], id_type: IdType) -> None:
        self.id_type = id_type
        mig_gpus = {e.gpu for e in entities if e.is_mig}
        whole = [e for e in entities if not e.is_mig and e.gpu not in mig_gpus]
        migs = [e for e in entities if e.is_mig]
        self.by_uuid = {_norm_uuid(e.uuid): e.key for e in whole}
        self.by_index = {e.gpu: e.key for e in whole}
        self.by_mig_uuid = {_norm_uuid(u): e.key for e in migs for u in e.mig_uuids}
        self.by_parent_gi = {(_norm_uuid(e.uuid), e.gpu_instance_id): e.key for e in migs}
        self.by_index_gi = {(e.gpu, e.gpu_instance_id): e.key for e in migs}

    def resolve(self, parsed: ParsedDeviceId) -> EntityKey | None:
        kind, uuid = parsed.kind, parsed.uuid
        if kind is DeviceIdKind.MIG_UUID and uuid is not None:
            return self.by_mig_uuid.get(_norm_uuid(uuid))
        if kind is DeviceIdKind.MIG_LEGACY and uuid is not None:
            return self.by_parent_gi.get((_norm_uuid(uuid), parsed.gpu_instance_id))
        if kind is DeviceIdKind.GPU_UUID and uuid is not None and self.id_type == "uid":
            return self.by_uuid.get(_norm_uuid(uuid))
        if kind is DeviceIdKind.DEVICE_NAME and parsed.gpu is not None and self.id_type == "device-name":
            if parsed.gpu_instance_id is None:
                return self.by_index.get(parsed.gpu)
            return self.by_index_gi.get((parsed.gpu, parsed.gpu_instance_id))
        return None


def _sort_key(pod: PodRef) -> tuple[str, str, str]:
    return (pod.namespace, pod.name, pod.container)


def _holders(
    allocations: Iterable[DeviceAllocation],
    entities: Sequence[GpuEntity],
    id_type: IdType,
    extra_resource_names: frozenset[str],
) -> tuple[dict[EntityKey, set[PodRef]], set[EntityKey]]:
    """Containers holding each entity, and the entities allocated through replica IDs (``::N``, ``/vgpuN``)."""
    resolver = _EntityResolver(entities, id_type)
    holders: dict[EntityKey, set[PodRef]] = {e.key: set() for e in entities}
    replicated: set[EntityKey] = set()
    for alloc in allocations:
        if not is_gpu_resource(alloc.resource_name, extra_resource_names):
            continue
        parsed = parse_device_id(alloc.device_id)
        key = resolver.resolve(parsed)
        if key is not None:
            holders[key].add(alloc.pod)
            if parsed.replica is not None:
                replicated.add(key)
    return holders, replicated


def build_pod_index(
    allocations: Iterable[DeviceAllocation],
    entities: Sequence[GpuEntity],
    *,
    id_type: IdType = "uid",
    extra_resource_names: frozenset[str] = frozenset(),
) -> dict[EntityKey, tuple[PodRef, ...]]:
    """Map every entity key to the distinct containers holding it (sorted; empty tuple when unallocated).

    GPU UUIDs match only in ``uid`` mode and ``nvidiaN[/giK]`` only in ``device-name`` mode; MIG UUIDs and
    legacy MIG IDs match in both. Whole-GPU IDs never match a GPU that is exposed as MIG instances.
    """
    holders, _ = _holders(allocations, entities, id_type, extra_resource_names)
    return {key: tuple(sorted(pods, key=_sort_key)) for key, pods in holders.items()}


def build_share_index(
    allocations: Iterable[DeviceAllocation],
    entities: Sequence[GpuEntity],
    *,
    id_type: IdType = "uid",
    extra_resource_names: frozenset[str] = frozenset(),
) -> dict[EntityKey, tuple[PodRef, ...]]:
    """The shared entities only (time-slicing, MPS), each with the containers holding a share (sorted).

    An entity is shared when it was allocated through a replica ID (``GPU-<uuid>::N``, GKE ``/vgpuN``; then even
    a single holder counts, so a workload's per-pod metric exists from its first replica on) or when several
    containers hold it.
    """
    holders, replicated = _holders(allocations, entities, id_type, extra_resource_names)
    return {key: tuple(sorted(pods, key=_sort_key)) for key, pods in holders.items()
            if key in replicated or len(pods) > 1}


def pod_labels_for(pods: tuple[PodRef, ...]) -> dict[str, str] | None:
    """``pod``/``namespace``/``container`` labels when exactly one container holds the device, else None.

    A device shared by several containers (even of one pod) gets no pod labels rather than an arbitrary one.
    """
    if len(set(pods)) != 1:
        return None
    pod = pods[0]
    return {"pod": pod.name, "namespace": pod.namespace, "container": pod.container}
