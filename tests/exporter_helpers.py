"""Helpers for exporter tests: parse /metrics text into (name, labels, value) rows, write fake state files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Row = tuple[str, dict[str, str], float]


def parse_metrics(text: str) -> list[Row]:
    """Every sample, checked by prometheus-client's parser, with the sample name exactly as written.

    prometheus-client's parser reports counter samples as ``<name>_total``; dcgm-exporter (and we) write them
    without the suffix, so the written name is taken from the family, not from the parsed sample.
    """
    rows: list[Row] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if family.type == "counter" and name == family.name + "_total" and f"\n{family.name}_total" not in text:
                name = family.name
            rows.append((name, dict(sample.labels), float(sample.value)))
    return rows


def series(rows: list[Row], name: str, **labels: str) -> list[Row]:
    return [r for r in rows if r[0] == name and all(r[1].get(k) == v for k, v in labels.items())]


def value(rows: list[Row], name: str, **labels: str) -> float:
    found = series(rows, name, **labels)
    assert len(found) == 1, f"expected one {name}{labels}, found {found}"
    return found[0][2]


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write atomically, as a well-behaved state writer does, and make the change visible to mtime checks."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
