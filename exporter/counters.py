"""Read a dcgm-exporter counters CSV (``-f``): ``FIELD, type, help`` per line, ``#`` comments."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from exporter.fields import FIELDS_BY_NAME, Field

DEFAULT_COUNTERS_NAME = "default-counters.csv"
_TYPES = ("gauge", "counter", "label")


class CountersError(ValueError):
    """A counters file that cannot be used; the message names the file, line and field."""


@dataclass(frozen=True)
class Counter:
    """One active line of the counters file: the field plus the type and help the file gives it."""

    field: Field
    kind: str
    help: str

    @property
    def name(self) -> str:
        return self.field.name


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
        field = FIELDS_BY_NAME.get(name)
        if field is None:
            raise CountersError(f"{where}: unknown field {name!r} (not a DCGM field this exporter can read)")
        if kind not in _TYPES:
            raise CountersError(f"{where}: field {name}: unknown type {parts[1]!r} (expected gauge, counter or label)")
        if (kind == "label") != field.is_label:
            expected = "label" if field.is_label else "gauge or counter"
            raise CountersError(f"{where}: field {name}: type {kind!r} not possible, {name} is a {expected} field")
        if name in seen:
            raise CountersError(f"{where}: field {name} is listed twice (first on line {seen[name]})")
        seen[name] = lineno
        counters.append(Counter(field, kind, help_text or field.help))
    if not any(not c.field.is_label for c in counters):
        raise CountersError(f"{source}: no metric fields listed")
    return tuple(counters)


def load_counters(path: str | None) -> tuple[Counter, ...]:
    """The counters in ``path``, or the built-in default set when ``path`` is None."""
    if path is None:
        text = resources.files("exporter").joinpath(DEFAULT_COUNTERS_NAME).read_text(encoding="utf-8")
        return parse_counters(text, f"<built-in {DEFAULT_COUNTERS_NAME}>")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CountersError(f"{path}: cannot read counters file: {reason}") from None
    return parse_counters(text, path)
