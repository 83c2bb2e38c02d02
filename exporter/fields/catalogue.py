"""What a counters-file name means: a DCGM field (by any of its names), one of dcgm-exporter's own counters, or
nothing; and, for a DCGM field this exporter does not produce, why not.

dcgm-exporter accepts a name when go-dcgm knows it (the header's current names, its deprecated aliases and the
1.x lowercase names) or when it is one of its ``DCGM_EXP_*`` counters; anything else stops it. The names and ids
come from ``exporter.fields.dcgm_catalogue`` (generated from DCGM's headers by ``scripts/gen-dcgm-fields.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.fields import dcgm_catalogue
from exporter.fields.table import FIELDS, Field

XID_ERRORS_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
CLOCK_EVENTS_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"
GPU_HEALTH_STATUS = "DCGM_EXP_GPU_HEALTH_STATUS"
P2P_STATUS = "DCGM_EXP_P2P_STATUS"
EXPORTER_COUNTERS = (XID_ERRORS_COUNT, CLOCK_EVENTS_COUNT, GPU_HEALTH_STATUS, P2P_STATUS)
"""dcgm-exporter's own counters (``internal/pkg/counters/const.go``); computed by the exporter, not by DCGM."""

_EXPORTER_COUNTER_GAPS = {
    GPU_HEALTH_STATUS: "needs DCGM's health-watch engine (dcgmHealthCheck), which has no NVML equivalent",
    P2P_STATUS: "NVLink peer-to-peer status per GPU pair is not read by this exporter's NVML backend",
}
_ENTITY_GAPS = {
    "switch": "an NVSwitch field; NVML's GPU API does not reach NVSwitches",
    "link": "a per-NVLink entity field (DCGM_FE_LINK); this exporter reports NVLink per GPU (and links L0-L17)",
    "cpu": "a Grace CPU field; this exporter reads NVIDIA GPUs through NVML",
    "cpu_core": "a Grace CPU core field; this exporter reads NVIDIA GPUs through NVML",
    "connectx": "a ConnectX NIC field; NVML does not read network adapters",
    "vgpu": "a vGPU-instance field; this exporter reports physical GPUs and MIG instances",
}
_PROFILING = range(1000, 1100)


@dataclass(frozen=True)
class DcgmField:
    """One DCGM field as DCGM defines it."""

    id: int
    name: str  # DCGM's current name (4.6 renamed many; the old names stay valid)
    type: str  # int64, double, string, binary, timestamp, unknown
    unit: str
    entity: str  # gpu, gpu_i, gpu_ci, none, switch, link, cpu, cpu_core, connectx, vgpu


def _by_name() -> dict[str, int]:
    names = {row[0]: fid for fid, row in dcgm_catalogue.FIELDS.items()}
    names.update(dcgm_catalogue.OTHER_NAMES)
    names.update(dcgm_catalogue.LEGACY_NAMES)
    return names


_NAMES = _by_name()


def lookup(name: str) -> DcgmField | None:
    """The DCGM field ``name`` means (current, deprecated or 1.x name), or None when DCGM has no such field."""
    fid = _NAMES.get(name)
    if fid is None:
        return None
    canonical, ftype, unit, entity = dcgm_catalogue.FIELDS[fid]
    return DcgmField(fid, canonical, ftype, unit, entity)


def _implemented() -> Mapping[int, Field]:
    by_id: dict[int, Field] = {}
    for field in FIELDS:
        fid = _NAMES.get(field.name)
        if fid is None:  # guarded by tests: every row of the field table is a DCGM field
            raise AssertionError(f"{field.name} is not in the DCGM field catalogue")
        by_id[fid] = field
    return by_id


IMPLEMENTED: Mapping[int, Field] = _implemented()
"""DCGM field id -> the field-table row that produces it."""


def implementation(dcgm: DcgmField) -> Field | None:
    return IMPLEMENTED.get(dcgm.id)


def unsupported_reason(name: str) -> str:
    """Why this exporter does not produce the DCGM field or exporter counter called ``name``."""
    if name in _EXPORTER_COUNTER_GAPS:
        return _EXPORTER_COUNTER_GAPS[name]
    dcgm = lookup(name)
    if dcgm is None:
        return "not a DCGM field"
    if dcgm.entity in _ENTITY_GAPS:
        return _ENTITY_GAPS[dcgm.entity]
    if dcgm.type == "unknown":
        return "a marker id in DCGM's field list, not a measurement"
    if dcgm.id in _PROFILING:
        return "a DCGM profiling-module metric with no NVML GPM equivalent"
    if dcgm.type == "binary":
        return "a binary DCGM structure, not a number or text a Prometheus series can carry"
    return "no NVML reader for this field in this exporter yet"
