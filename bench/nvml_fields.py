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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.backends.base import BackendUnavailable, DeviceLost, FieldNotSupported, FieldUnavailable  # noqa: E402
from exporter.backends.nvml import NvmlBackend, NvmlMissing  # noqa: E402
from exporter.entities import GpuEntity  # noqa: E402
from exporter.fields import FIELDS, Field  # noqa: E402

_OUTCOMES = ((FieldNotSupported, "not supported"), (FieldUnavailable, "unavailable"), (DeviceLost, "device lost"),
             (BackendUnavailable, "backend down"))


def read_one(backend: NvmlBackend, entity: GpuEntity, field: Field) -> tuple[str, Any, float]:
    """(outcome, value or message, milliseconds) of one read."""
    t0 = time.perf_counter()
    try:
        value: Any = backend.label(entity, field) if field.is_label else backend.read(entity, field)
        outcome = "value"
    except Exception as exc:
        outcome = next((name for kind, name in _OUTCOMES if isinstance(exc, kind)), f"error {type(exc).__name__}")
        value = str(exc)
    return outcome, value, (time.perf_counter() - t0) * 1000.0


def one_round(backend: NvmlBackend) -> tuple[float, list[GpuEntity], dict[tuple[str, str], tuple[str, Any, float]],
                                            dict[str, tuple[str, Any, float]]]:
    """(enumeration ms, entities, (entity, field) -> read, entity -> process-list read) for one collection."""
    backend.begin_collection()
    t0 = time.perf_counter()
    entities = backend.entities("f")
    enum_ms = (time.perf_counter() - t0) * 1000.0
    reads: dict[tuple[str, str], tuple[str, Any, float]] = {}
    procs: dict[str, tuple[str, Any, float]] = {}
    for entity in entities:
        name = f"gpu{entity.gpu}" + (f"/gi{entity.gpu_instance_id}" if entity.is_mig else "")
        for field in FIELDS:
            reads[(name, field.name)] = read_one(backend, entity, field)
        t1 = time.perf_counter()
        try:
            report = backend.processes(entity)
            procs[name] = ("value", [(p.pid, p.fb_used_bytes, p.sm_util) for p in report.processes]
                           + [f"sm_util supported: {report.sm_util_supported}"],
                           (time.perf_counter() - t1) * 1000.0)
        except Exception as exc:
            procs[name] = (type(exc).__name__, str(exc), (time.perf_counter() - t1) * 1000.0)
    return enum_ms, entities, reads, procs


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
    rounds = []
    try:
        for i in range(max(2, args.rounds)):
            if i:
                time.sleep(args.gap_s)
            rounds.append(one_round(backend))
    finally:
        backend.close()

    timed = rounds[1:]
    _, entities, last, procs = rounds[-1]
    enum_ms = statistics.median(r[0] for r in timed)
    print(f"{len(entities)} entities, {len(FIELDS)} fields; enumeration {enum_ms:.2f} ms "
          f"(median of {len(timed)} collections)")
    per_read = {key: statistics.median(r[2][key][2] for r in timed) for key in last}
    by_entity: dict[str, float] = {}
    for (entity, _), ms in per_read.items():
        by_entity[entity] = by_entity.get(entity, 0.0) + ms
    for entity, ms in by_entity.items():
        print(f"{entity}: all fields {ms:.2f} ms per collection; process lists {procs[entity][2]:.2f} ms: "
              f"{procs[entity][0]} {procs[entity][1]}")
    counts = Counter(outcome for outcome, _, _ in last.values())
    print("outcomes (last collection):", ", ".join(f"{n} {o}" for o, n in counts.most_common()))
    print("\nslowest reads (median ms):")
    for (entity, name), ms in sorted(per_read.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {ms:8.3f}  {entity} {name}")
    print("\nanything but a value (last collection):")
    for (entity, name), (outcome, value, _) in last.items():
        if outcome != "value":
            print(f"  {entity} {name}: {outcome}: {value}")
    print("\nvalues (last collection):")
    for (entity, name), (outcome, value, _) in last.items():
        if outcome == "value":
            print(f"  {entity} {name} = {value!r}")
    if args.json:
        args.json.write_text(json.dumps({
            "entities": [dataclasses.asdict(e) for e in entities],
            "enumeration_ms": [r[0] for r in timed],
            "reads": [{"entity": entity, "field": name, "outcome": outcome, "value": value,
                       "ms": per_read[(entity, name)]} for (entity, name), (outcome, value, _) in last.items()],
            "processes": {entity: {"outcome": o, "value": v, "ms": ms} for entity, (o, v, ms) in procs.items()},
        }, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
