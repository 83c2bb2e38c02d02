"""The project's documentation pages as tests read them: a generated table between its markers, a stated phrase."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def generated_block(page: str, name: str) -> str:
    """The text between ``<!-- NAME:begin ... -->`` and ``<!-- NAME:end -->`` in ``docs/PAGE`` (markers must exist)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    found = re.search(rf"<!-- {re.escape(name)}:begin[^>]*-->\n(.*?)<!-- {re.escape(name)}:end -->", text, re.S)
    if found is None:
        raise LookupError(f"docs/{page} lost its {name} markers")
    return found.group(1)
