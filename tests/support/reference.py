"""Files under ../shared/reference (the project's reference data, read in place and never copied into the repo).

A missing file fails the test under CI (``CI=true``) and skips it elsewhere, like a missing tool.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.tools import REPO, unavailable

REFERENCE = REPO.parent / "shared" / "reference" / "dcgm-exporter"


def reference_file(name: str) -> Path:
    """A dcgm-exporter counters file from ../shared/reference/dcgm-exporter (read in place)."""
    path = REFERENCE / name
    if not path.is_file():
        unavailable(f"{path} is missing (it lives beside the repository, in ../shared/reference)",
                    "a reference file is missing")
    return path


def every_line_enabled(text: str) -> str:
    """The counters file with its commented-out field lines enabled too (what users do when they opt in)."""
    out = []
    for line in text.splitlines():
        body = line.lstrip("# ").strip()
        out.append(body if body.startswith(("DCGM_", "dcgm_")) and body.count(",") >= 2 else line)
    return "\n".join(out)


def listed_fields(text: str) -> list[tuple[str, str]]:
    """(name, type) of each active line of a counters file."""
    rows = [line.split(",") for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(r[0].strip(), r[1].strip()) for r in rows]
