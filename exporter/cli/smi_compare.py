"""Our values next to ``nvidia-smi --query-gpu``'s: which DCGM field is which query property, how far apart two
readings may be, and the verdict for one field of one GPU. Pure: no subprocess, no NVML (see ``exporter.cli.doctor``).

Values that move on their own (utilisation, power, clocks, temperatures, memory in use) are read by nvidia-smi
twice, just before and just after our collection; ours agrees when it lies within the tolerance of the range the
two nvidia-smi readings span. Everything else must match exactly (counters, identities), sizes to the MiB.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

Reading = float | str


def _number(text: str) -> float:
    return float(text)


def _pstate(text: str) -> float:
    """nvidia-smi prints P-states as ``P0``..``P15``; DCGM_FI_DEV_PSTATE is the number."""
    return float(text.removeprefix("P"))


def _text(text: str) -> str:
    return text


@dataclass(frozen=True)
class Pair:
    """One DCGM field (or identity label) and the nvidia-smi property that reports the same thing."""

    ours: str  # DCGM field name, or a label every series carries (modelName, pci_bus_id)
    smi: str  # nvidia-smi --query-gpu property
    unit: str
    absolute: float = 0.0  # allowed difference in ``unit``
    relative: float = 0.0  # ... or this fraction of the larger reading, whichever is more
    moves: bool = False  # fluctuates: compared against the span of two nvidia-smi readings around ours
    parse: Callable[[str], Reading] = _number

    @property
    def is_text(self) -> bool:
        return self.parse is _text

    def tolerance(self) -> str:
        if self.is_text:
            return "same text"
        parts = [f"±{self.absolute:g} {self.unit}".rstrip()] if self.absolute else []
        if self.relative:
            parts.append(f"±{self.relative * 100:g}% of the reading")
        return " or ".join(parts) if parts else "exact"


_P = Pair
PAIRS: tuple[Pair, ...] = (
    _P("modelName", "name", "", parse=_text),
    _P("pci_bus_id", "pci.bus_id", "", parse=_text),
    _P("DCGM_FI_DRIVER_VERSION", "driver_version", "", parse=_text),
    _P("DCGM_FI_DEV_VBIOS_VERSION", "vbios_version", "", parse=_text),
    _P("DCGM_FI_DEV_SERIAL", "serial", "", parse=_text),
    _P("DCGM_FI_DEV_INFOROM_IMAGE_VER", "inforom.img", "", parse=_text),
    _P("DCGM_FI_DEV_OEM_INFOROM_VER", "inforom.oem", "", parse=_text),
    _P("DCGM_FI_DEV_ECC_INFOROM_VER", "inforom.ecc", "", parse=_text),
    _P("DCGM_FI_DEV_POWER_INFOROM_VER", "inforom.pwr", "", parse=_text),
    _P("DCGM_FI_DEV_GPU_UTIL", "utilization.gpu", "%", absolute=10, moves=True),
    _P("DCGM_FI_DEV_MEM_COPY_UTIL", "utilization.memory", "%", absolute=10, moves=True),
    _P("DCGM_FI_DEV_ENC_UTIL", "utilization.encoder", "%", absolute=10, moves=True),
    _P("DCGM_FI_DEV_DEC_UTIL", "utilization.decoder", "%", absolute=10, moves=True),
    # DCGM truncates bytes to whole MiB; nvidia-smi printed one MiB more for reserved, used and free on an H200
    # (driver 580.159.04: 616 against 615 reserved), so a size may be one MiB apart.
    _P("DCGM_FI_DEV_FB_TOTAL", "memory.total", "MiB", absolute=1),
    _P("DCGM_FI_DEV_FB_RESERVED", "memory.reserved", "MiB", absolute=1),
    _P("DCGM_FI_DEV_FB_USED", "memory.used", "MiB", absolute=2, moves=True),
    _P("DCGM_FI_DEV_FB_FREE", "memory.free", "MiB", absolute=2, moves=True),
    _P("DCGM_FI_DEV_GPU_TEMP", "temperature.gpu", "C", absolute=2, moves=True),
    _P("DCGM_FI_DEV_MEMORY_TEMP", "temperature.memory", "C", absolute=2, moves=True),
    _P("DCGM_FI_DEV_POWER_USAGE", "power.draw", "W", absolute=5, relative=0.10, moves=True),
    _P("DCGM_FI_DEV_POWER_USAGE_INSTANT", "power.draw.instant", "W", absolute=10, relative=0.20, moves=True),
    _P("DCGM_FI_DEV_POWER_MGMT_LIMIT", "power.limit", "W", absolute=0.5),
    _P("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "enforced.power.limit", "W", absolute=0.5),
    _P("DCGM_FI_DEV_SM_CLOCK", "clocks.current.sm", "MHz", relative=0.05, moves=True),
    _P("DCGM_FI_DEV_MEM_CLOCK", "clocks.current.memory", "MHz", relative=0.05, moves=True),
    _P("DCGM_FI_DEV_PSTATE", "pstate", "", moves=True, parse=_pstate),
    _P("DCGM_FI_DEV_FAN_SPEED", "fan.speed", "%", absolute=2, moves=True),
    _P("DCGM_FI_DEV_PCIE_LINK_GEN", "pcie.link.gen.current", "", moves=True),
    _P("DCGM_FI_DEV_PCIE_LINK_WIDTH", "pcie.link.width.current", "lanes", moves=True),
    _P("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "pcie.link.gen.max", ""),
    _P("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "pcie.link.width.max", "lanes"),
    _P("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc.errors.corrected.volatile.total", "errors"),
    _P("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc.errors.uncorrected.volatile.total", "errors"),
    _P("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "ecc.errors.corrected.aggregate.total", "errors"),
    _P("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ecc.errors.uncorrected.aggregate.total", "errors"),
    _P("DCGM_FI_DEV_RETIRED_SBE", "retired_pages.single_bit_ecc.count", "pages"),
    _P("DCGM_FI_DEV_RETIRED_DBE", "retired_pages.double_bit.count", "pages"),
    _P("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "remapped_rows.correctable", "rows"),
    _P("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remapped_rows.uncorrectable", "rows"),
)
IDENTITY = ("index", "uuid")  # queried first: which GPU a row is


class Status(StrEnum):
    AGREE = "agree"
    DIFFER = "DIFFERS"
    BOTH_UNSUPPORTED = "not supported (both)"
    OURS_UNSUPPORTED = "not supported by us"
    SMI_UNAVAILABLE = "nvidia-smi: n/a"
    NO_VALUE = "no value from us"
    SMI_LACKS = "nvidia-smi lacks property"


@dataclass(frozen=True)
class Verdict:
    pair: Pair
    ours: Reading | None
    smi: tuple[str, ...]  # the raw nvidia-smi cells (one, or two for a moving field)
    status: Status
    note: str = ""


def not_available(cell: str) -> bool:
    """nvidia-smi's placeholders: ``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``, ``N/A``, empty."""
    text = cell.strip()
    return not text or text.startswith("[") or text.upper() == "N/A"


def parse_rows(text: str, properties: Sequence[str]) -> list[dict[str, str]]:
    """``--format=csv,noheader,nounits`` output: one row per GPU, cells in the order of ``properties``."""
    rows = []
    for cells in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not cells:
            continue
        if len(cells) != len(properties):
            raise ValueError(f"nvidia-smi printed {len(cells)} values for {len(properties)} properties: "
                             f"{','.join(cells)!r}")
        rows.append({prop: cell.strip() for prop, cell in zip(properties, cells, strict=True)})
    return rows


def judge(pair: Pair, ours: Reading | None, supported: bool, cells: Sequence[str | None]) -> Verdict:
    """The verdict for one field: ``cells`` are nvidia-smi's readings (None: nvidia-smi lacks the property)."""
    if any(cell is None for cell in cells):
        return Verdict(pair, ours, (), Status.SMI_LACKS)
    raw = tuple(c for c in cells if c is not None)
    smi_na = all(not_available(c) for c in raw)
    if not supported:
        return Verdict(pair, None, raw, Status.BOTH_UNSUPPORTED if smi_na else Status.OURS_UNSUPPORTED)
    if ours is None:
        return Verdict(pair, None, raw, Status.NO_VALUE)
    if smi_na:
        return Verdict(pair, ours, raw, Status.SMI_UNAVAILABLE)
    try:
        theirs = [pair.parse(c) for c in raw if not not_available(c)]
    except ValueError:
        return Verdict(pair, ours, raw, Status.DIFFER, "nvidia-smi's value is not a number")
    if pair.is_text:
        same = any(str(ours).strip().lower() == str(t).strip().lower() for t in theirs)
        return Verdict(pair, ours, raw, Status.AGREE if same else Status.DIFFER)
    off = distance(float(ours), [float(t) for t in theirs])
    allowed = max(pair.absolute, pair.relative * max(abs(float(ours)), *(abs(float(t)) for t in theirs)))
    if off <= allowed + 1e-9:
        return Verdict(pair, ours, raw, Status.AGREE)
    return Verdict(pair, ours, raw, Status.DIFFER, f"off by {off:g} {pair.unit}".rstrip())


def distance(value: float, readings: Sequence[float]) -> float:
    """How far ``value`` lies outside the span of ``readings`` (0 inside it)."""
    lo, hi = min(readings), max(readings)
    if math.isnan(value):
        return math.inf
    return 0.0 if lo <= value <= hi else min(abs(value - lo), abs(value - hi))


def ours_of(pair: Pair, values: Mapping[str, float], labels: Mapping[str, str]) -> Reading | None:
    return labels.get(pair.ours) if pair.is_text else values.get(pair.ours)
