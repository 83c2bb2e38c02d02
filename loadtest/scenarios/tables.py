"""The comparisons' tables: a figure in a cell, and Markdown tables that read as plain text too (pure)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["cell", "markdown"]


def cell(value: float | int | None, unit: str = "") -> str:
    """``-`` for no value; a float as ``%g``."""
    if value is None:
        return "-"
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def markdown(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> str:
    """A Markdown table with padded columns."""
    widths = [max(len(c) for c in column) for column in zip(columns, *cells, strict=True)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in (columns, *cells)]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
