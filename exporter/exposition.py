"""Prometheus text exposition format 0.0.4, written by hand on purpose.

prometheus-client renames counters (``_total``) and switches to OpenMetrics on content negotiation; dcgm-exporter
emits counters under their DCGM names, so the DCGM families are rendered here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    name: str
    kind: str
    help: str
    samples: list[tuple[Labels, float | int]] = field(default_factory=list)

    def add(self, labels: Labels, value: float | int) -> None:
        self.samples.append((labels, value))


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels) + "}"


def render_header(fam: Family) -> str:
    return f"# HELP {fam.name} {escape_help(fam.help)}\n# TYPE {fam.name} {fam.kind}\n"


def render(families: Iterable[Family]) -> str:
    """Render families that have samples; a family without samples is left out entirely (as dcgm-exporter does)."""
    out: list[str] = []
    for fam in families:
        if not fam.samples:
            continue
        out.append(render_header(fam))
        out.extend(f"{fam.name}{format_labels(labels)} {format_value(value)}\n" for labels, value in fam.samples)
    return "".join(out)


def labels_of(pairs: Sequence[tuple[str, str | None]]) -> Labels:
    """Drop pairs whose value is None, keep the given order (dcgm-exporter's label order matters to no parser,
    but stable output keeps diffs and golden files readable)."""
    return tuple((k, v) for k, v in pairs if v is not None)
