"""Read a dcgm-exporter counters CSV (``-f``): ``FIELD, type, help`` per line, ``#`` comments.

A name is resolved the way dcgm-exporter resolves it: any DCGM field name (current, deprecated alias or 1.x
lowercase name) or one of dcgm-exporter's ``DCGM_EXP_*`` counters; any other name stops the exporter with the
file, line and name. A DCGM field this exporter cannot produce is kept as an *unsupported* counter: warned about
once here, never read, and reported as ``gpu_exporter_field_supported{field=...} 0``. The metric (or label) is
named as the file writes it, as dcgm-exporter does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from exporter.fields import catalogue
from exporter.fields.table import Field

log = logging.getLogger("exporter.counters")

DEFAULT_COUNTERS_NAME = "default-counters.csv"
_TYPES = ("gauge", "counter", "label")
_WINDOWED = (catalogue.XID_ERRORS_COUNT, catalogue.CLOCK_EVENTS_COUNT)


class CountersError(ValueError):
    """A counters file that cannot be used; the message names the file, line and field."""


@dataclass(frozen=True)
class Counter:
    """One active line of the counters file: the name and type and help the file gives it, and what produces it.

    ``field`` is the field-table row that reads it; ``None`` for dcgm-exporter's windowed counters
    (``DCGM_EXP_XID_ERRORS_COUNT``, ``DCGM_EXP_CLOCK_EVENTS_COUNT``, computed by the collector) and for
    unsupported counters, which carry the reason in ``unsupported``.
    """

    name: str
    kind: str
    help: str
    field: Field | None = None
    unsupported: str | None = None

    @property
    def is_label(self) -> bool:
        return self.kind == "label"

    @property
    def windowed(self) -> bool:
        return self.name in _WINDOWED and self.unsupported is None


def parse_counters(text: str, source: str) -> tuple[Counter, ...]:
    counters: list[Counter] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{lineno}"
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) < 2 or not parts[0] or not parts[1]:
            raise CountersError(f"{where}: expected 'FIELD, type, help', got {line!r}")
        name, kind = parts[0], parts[1].lower()
        help_text = parts[2] if len(parts) == 3 else ""
        if name in seen:  # dcgm-exporter's own 1.x file lists one field twice; the first line wins
            log.warning("%s: %s is listed again (first on line %d); this line is ignored", where, name, seen[name])
            continue
        counter = _counter(name, kind, help_text, where, raw_type=parts[1])
        seen[name] = lineno
        if counter.unsupported:
            log.warning("%s: %s is not produced by this exporter (%s); skipped, reported as "
                        "gpu_exporter_field_supported 0", where, name, counter.unsupported)
        counters.append(counter)
    if not any(not c.is_label and (c.field is not None or c.windowed) for c in counters):
        raise CountersError(f"{source}: no metric fields listed that this exporter produces")
    return tuple(counters)


def _counter(name: str, kind: str, help_text: str, where: str, raw_type: str) -> Counter:
    if kind not in _TYPES:
        raise CountersError(f"{where}: field {name}: unknown type {raw_type!r} (expected gauge, counter or label)")
    if name in catalogue.EXPORTER_COUNTERS:
        if kind == "label":
            raise CountersError(f"{where}: field {name}: type 'label' not possible, {name} is a metric")
        if name in _WINDOWED:
            return Counter(name, kind, help_text)
        return Counter(name, kind, help_text, unsupported=catalogue.unsupported_reason(name))
    dcgm = catalogue.lookup(name)
    if dcgm is None:
        raise CountersError(f"{where}: unknown field {name!r} (not a DCGM field nor a dcgm-exporter counter)")
    field = catalogue.implementation(dcgm)
    if field is None:
        return Counter(name, kind, help_text, unsupported=catalogue.unsupported_reason(name))
    if (kind == "label") != field.is_label:
        expected = "label" if field.is_label else "gauge or counter"
        raise CountersError(f"{where}: field {name}: type {kind!r} not possible, {name} is a {expected} field")
    return Counter(name, kind, help_text or field.help, field)


def load_counters(path: str | None) -> tuple[Counter, ...]:
    """The counters in ``path``, or the built-in default set when ``path`` is None."""
    if path is None:
        text = resources.files("exporter.fields").joinpath(DEFAULT_COUNTERS_NAME).read_text(encoding="utf-8")
        return parse_counters(text, f"<built-in {DEFAULT_COUNTERS_NAME}>")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CountersError(f"{path}: cannot read counters file: {reason}") from None
    return parse_counters(text, path)
