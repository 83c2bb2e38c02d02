"""One collection's ``/metrics`` text, kept in per-GPU runs so a scrape can leave out GPUs whose values are too old.

The full body is rendered once per collection. When some GPU's values have outlived ``--max-value-age`` (its
NVML calls hang, or the whole collector is stuck), the scrape serves a copy without that GPU's sample lines,
built by joining the kept runs (no re-rendering) and cached per set of left-out GPUs.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.exposition import Family, format_labels, format_value, render_header

GpuRuns = tuple[tuple[int | None, str], ...]
"""A family's sample lines in runs, each run the consecutive samples of one GPU (None: no ``gpu`` label)."""


@dataclass(frozen=True)
class FamilyText:
    header: str
    runs: GpuRuns


def gpu_of(labels: tuple[tuple[str, str], ...]) -> int | None:
    for key, value in labels:
        if key == "gpu":
            return int(value)
    return None


def render_runs(families: Iterable[Family]) -> tuple[FamilyText, ...]:
    """Families with samples, their lines grouped into per-GPU runs (order kept)."""
    out: list[FamilyText] = []
    for fam in families:
        if not fam.samples:
            continue
        runs: list[tuple[int | None, str]] = []
        current: int | None = None
        lines: list[str] = []
        for labels, value in fam.samples:
            gpu = gpu_of(labels)
            if lines and gpu != current:
                runs.append((current, "".join(lines)))
                lines = []
            current = gpu
            lines.append(f"{fam.name}{format_labels(labels)} {format_value(value)}\n")
        runs.append((current, "".join(lines)))
        out.append(FamilyText(render_header(fam), tuple(runs)))
    return tuple(out)


def join_runs(families: Iterable[FamilyText], leave_out: frozenset[int] = frozenset()) -> str:
    parts: list[str] = []
    for fam in families:
        kept = [text for gpu, text in fam.runs if gpu is None or gpu not in leave_out]
        if kept:
            parts.append(fam.header)
            parts.extend(kept)
    return "".join(parts)


def carry_runs(families: tuple[FamilyText, ...], previous: tuple[FamilyText, ...],
               gpus: frozenset[int]) -> tuple[FamilyText, ...]:
    """``families`` plus the runs of ``gpus`` from ``previous`` (matched by family header)."""
    merged = {fam.header: list(fam.runs) for fam in families}
    for fam in previous:
        kept = [(gpu, text) for gpu, text in fam.runs if gpu is not None and gpu in gpus]
        if kept:
            merged.setdefault(fam.header, []).extend(kept)
    return tuple(FamilyText(header, tuple(runs)) for header, runs in merged.items())


@dataclass(frozen=True)
class Snapshot:
    body: bytes
    created: float  # unix time the collection finished
    read_at: Mapping[int, float] = field(default_factory=dict)
    """Per GPU: monotonic time its values in this body were read (older than ``created`` for a hung GPU)."""
    gpu_families: tuple[FamilyText, ...] = ()
    tail: str = ""  # the exporter's own metrics: never left out
    _gzipped: list[bytes] = field(default_factory=list, repr=False, compare=False)
    _without: dict[frozenset[int], Snapshot] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, gpu_families: Iterable[Family], tail: str, created: float, read_at: Mapping[int, float],
              carry: tuple[Snapshot, frozenset[int]] | None = None) -> Snapshot:
        """Render a collection; ``carry`` = (previous snapshot, GPUs not read this time whose previous lines and
        read times are kept)."""
        runs = render_runs(gpu_families)
        read_at = dict(read_at)
        if carry is not None and carry[1]:
            previous, gpus = carry
            runs = carry_runs(runs, previous.gpu_families, gpus)
            read_at.update({gpu: previous.read_at[gpu] for gpu in gpus if gpu in previous.read_at})
        return cls((join_runs(runs) + tail).encode(), created, read_at, runs, tail)

    def gzipped(self) -> bytes:
        """Compressed once per snapshot, on first demand (benign race: two threads may both compress)."""
        if not self._gzipped:
            self._gzipped.append(gzip.compress(self.body, compresslevel=5))
        return self._gzipped[0]

    def stale_gpus(self, now: float, max_age_s: float) -> frozenset[int]:
        return frozenset(gpu for gpu, at in self.read_at.items() if now - at > max_age_s)

    def without(self, gpus: frozenset[int]) -> Snapshot:
        """This snapshot minus the sample lines of ``gpus`` (cached; benign race as for ``gzipped``)."""
        if not gpus:
            return self
        found = self._without.get(gpus)
        if found is None:
            body = join_runs(self.gpu_families, gpus) + self.tail
            found = Snapshot(body.encode(), self.created,
                             {gpu: at for gpu, at in self.read_at.items() if gpu not in gpus})
            self._without[gpus] = found
        return found
