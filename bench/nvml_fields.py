"""Every field of the exporter's table read through the NVML backend on this machine's GPUs, one at a time.

For each GPU (or MIG instance) and field: what the read gave (a value, NotSupported, unavailable, device lost, or
an unexpected error with its type) and what it cost, in collection order over ``--rounds`` collections (the
first primes rates and GPM samples and is not timed; reads that share an NVML call are memoised within a
collection, as in the exporter, so the first field of a group carries the call). Also times enumeration and
the process lists. Needs real GPUs; prints figures and never asserts them.
Usage: ``python bench/nvml_fields.py [--rounds 3] [--gap-s 1.1] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.backends.base import BackendUnavailable, DeviceLost, FieldNotSupported, FieldUnavailable  # noqa: E402
from exporter.backends.nvml import NvmlBackend, NvmlMissing  # noqa: E402
from exporter.fields.entities import GpuEntity  # noqa: E402
from exporter.fields.table import FIELDS  # noqa: E402

_OUTCOMES = ((FieldNotSupported, "not supported"), (FieldUnavailable, "unavailable"), (DeviceLost, "device lost"),
             (BackendUnavailable, "backend down"))


class Read(NamedTuple):
    outcome: str  # "value", "not supported", "unavailable", "device lost", "backend down" or "error <type>"
    value: Any  # the value, or the error's message
    ms: float


class Collection(NamedTuple):
    enumeration_ms: float
    entities: list[GpuEntity]
    reads: dict[tuple[str, str], Read]  # by (entity, field)
    processes: dict[str, Read]  # by entity


def timed(call: Callable[[], Any]) -> Read:
    t0 = time.perf_counter()
    try:
        value, outcome = call(), "value"
    except Exception as exc:
        outcome = next((name for kind, name in _OUTCOMES if isinstance(exc, kind)), f"error {type(exc).__name__}")
        value = str(exc)
    return Read(outcome, value, (time.perf_counter() - t0) * 1000.0)


def process_list(backend: NvmlBackend, entity: GpuEntity) -> list[Any]:
    report = backend.processes(entity)
    return [(p.pid, p.fb_used_bytes, p.sm_util) for p in report.processes] + [
        f"sm_util supported: {report.sm_util_supported}"]


def one_collection(backend: NvmlBackend) -> Collection:
    backend.begin_collection()
    t0 = time.perf_counter()
    entities = backend.entities("f")
    enumeration_ms = (time.perf_counter() - t0) * 1000.0
    reads: dict[tuple[str, str], Read] = {}
    processes: dict[str, Read] = {}
    for entity in entities:
        name = f"gpu{entity.gpu}" + (f"/gi{entity.gpu_instance_id}" if entity.is_mig else "")
        for field in FIELDS:
            read = backend.label if field.is_label else backend.read
            reads[(name, field.name)] = timed(partial(read, entity, field))
        processes[name] = timed(partial(process_list, backend, entity))
    return Collection(enumeration_ms, entities, reads, processes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=3, help="collections; the first is not timed (default 3)")
    p.add_argument("--gap-s", type=float, default=1.1, help="seconds between collections (GPM needs ~1 s)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write every read here")
    args = p.parse_args(argv)

    backend = NvmlBackend(gpm_min_gap_s=1.0)
    try:
        backend.open()
    except (NvmlMissing, BackendUnavailable) as exc:
        print(f"nvml_fields: {exc}", file=sys.stderr)
        return 2
    collections = []
    try:
        for i in range(max(2, args.rounds)):
            if i:
                time.sleep(args.gap_s)
            collections.append(one_collection(backend))
    finally:
        backend.close()

    timed_ones, last = collections[1:], collections[-1]
    print(f"{len(last.entities)} entities, {len(FIELDS)} fields; enumeration "
          f"{statistics.median(c.enumeration_ms for c in timed_ones):.2f} ms (median of {len(timed_ones)} collections)")
    per_read = {key: statistics.median(c.reads[key].ms for c in timed_ones if key in c.reads) for key in last.reads}
    by_entity: dict[str, float] = {}
    for (entity, _), ms in per_read.items():
        by_entity[entity] = by_entity.get(entity, 0.0) + ms
    for entity, ms in by_entity.items():
        procs = last.processes[entity]
        print(f"{entity}: all fields {ms:.2f} ms per collection; process lists {procs.ms:.2f} ms: "
              f"{procs.outcome} {procs.value}")
    counts = Counter(read.outcome for read in last.reads.values())
    print("outcomes (last collection):", ", ".join(f"{n} {o}" for o, n in counts.most_common()))
    print("\nslowest reads (median ms):")
    for (entity, name), ms in sorted(per_read.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {ms:8.3f}  {entity} {name}")
    print("\nanything but a value (last collection):")
    for (entity, name), read in last.reads.items():
        if read.outcome != "value":
            print(f"  {entity} {name}: {read.outcome}: {read.value}")
    print("\nvalues (last collection):")
    for (entity, name), read in last.reads.items():
        if read.outcome == "value":
            print(f"  {entity} {name} = {read.value!r}")
    if args.json:
        args.json.write_text(json.dumps({
            "entities": [dataclasses.asdict(e) for e in last.entities],
            "enumeration_ms": [c.enumeration_ms for c in timed_ones],
            "reads": [{"entity": entity, "field": name, "outcome": read.outcome, "value": read.value,
                       "ms": per_read[(entity, name)]} for (entity, name), read in last.reads.items()],
            "processes": {entity: read._asdict() for entity, read in last.processes.items()},
        }, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
