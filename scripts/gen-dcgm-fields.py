"""Generate exporter/fields/dcgm_catalogue.py: every DCGM field's name, id, value type, unit and entity level.

Facts only, read from DCGM's public sources (not copied prose):
- ``dcgmlib/dcgm_fields.h``: ``#define DCGM_FI_X <int>`` gives a field's name and id;
  ``#define DCGM_FI_OLD DCGM_FI_NEW`` inside the ``#if DCGM_DEPRECATED`` block (or after a ``Deprecated:``
  comment) is an old name still accepted.
- ``dcgmlib/src/dcgm_fields.cpp``: ``DcgmFieldsPopulateOneFieldWithFormatting(id, DCGM_FT_x, size, tag, scope,
  nvmlFieldId, shortName, unit, DCGM_FE_x, width)`` gives the value type, unit and entity level.
- go-dcgm's ``pkg/dcgm/legacy_fields.csv`` (optional): the 1.x lowercase names dcgm-exporter still accepts.

These are the names dcgm-exporter recognises (go-dcgm generates its name table from the same header with the same
alias rule). Usage, with the DCGM and go-dcgm repositories as bare git dirs (the ``fetch`` tool gives them)::

    git -C DCGM show v4.6.0:dcgmlib/dcgm_fields.h > /tmp/dcgm_fields.h
    git -C DCGM show v4.6.0:dcgmlib/src/dcgm_fields.cpp > /tmp/dcgm_fields.cpp
    git -C GO_DCGM show HEAD:pkg/dcgm/legacy_fields.csv > /tmp/legacy_fields.csv
    python scripts/gen-dcgm-fields.py /tmp/dcgm_fields.h /tmp/dcgm_fields.cpp --legacy /tmp/legacy_fields.csv \\
        --source "DCGM v4.6.0 (72fa3fe), go-dcgm b7fa315" > exporter/fields/dcgm_catalogue.py
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

_INT_DEFINE = re.compile(r"^#define\s+(DCGM_FI_\w+)\s+(\d+)\b")
_ALIAS_DEFINE = re.compile(r"^#define\s+(DCGM_FI_\w+)\s+(DCGM_FI_\w+)\s*(?://.*)?$")
_POPULATE = re.compile(
    r"DcgmFieldsPopulateOneFieldWithFormatting\(\s*(\w+)\s*,\s*(DCGM_FT_\w+)\s*,\s*[^,]+,\s*[^,]+,\s*\w+\s*,"
    r"\s*[^,]+,\s*[^,]+,\s*([^,]+?)\s*,\s*(DCGM_FE_\w+)", re.S)
_LOOP = re.compile(r"for \(unsigned int fieldId = (\w+); fieldId <= (\w+); fieldId\+\+\)")
_RANGE_CALL = re.compile(r"DcgmFieldsPopulateNvLinkProfileFieldRange\(\s*(\w+)\s*,\s*(\w+)\s*,")
_UNITS = {"DCGM_FIELD_UNIT_TEMP_C": "C", "DCGM_FIELD_UNIT_POW_W": "W", "DCGM_FIELD_UNIT_BW_KBPS": "KB/s",
          "DCGM_FIELD_UNIT_BW_MBPS": "MB/s", "DCGM_FIELD_UNIT_BW_MbPS": "Mb/s", "DCGM_FIELD_UNIT_MILLIJOULES": "mJ"}
_TYPES = {"DCGM_FT_BINARY": "binary", "DCGM_FT_DOUBLE": "double", "DCGM_FT_INT64": "int64",
          "DCGM_FT_STRING": "string", "DCGM_FT_TIMESTAMP": "timestamp"}


def parse_header(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """(name -> id for canonical names, old name -> id for deprecated aliases)."""
    ids: dict[str, int] = {}
    aliases: dict[str, str] = {}
    in_deprecated = False
    comment = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#if DCGM_DEPRECATED"):
            in_deprecated = True
        if line.startswith(("/*", "*", "//")):
            comment = comment + line if line.startswith(("*", "//")) and comment else line
            continue
        if m := _INT_DEFINE.match(line):
            ids[m.group(1)] = int(m.group(2))
        elif (m := _ALIAS_DEFINE.match(line)) and (in_deprecated or "Deprecated" in comment):
            aliases[m.group(1)] = m.group(2)
        if line:
            comment = ""
    resolved: dict[str, int] = {}
    for old, new in aliases.items():
        seen = set()
        while new in aliases and new not in seen:  # alias of an alias
            seen.add(new)
            new = aliases[new]
        if new in ids and old not in ids:
            resolved[old] = ids[new]
    return ids, resolved


def parse_table(text: str, ids: dict[str, int]) -> dict[int, tuple[str, str, str]]:
    """id -> (type, unit, entity level) from the field table's populate calls (loops and ranges expanded)."""
    meta: dict[int, tuple[str, str, str]] = {}
    loops = [(m.start(), ids[m.group(1)], ids[m.group(2)]) for m in _LOOP.finditer(text)
             if m.group(1) in ids and m.group(2) in ids]
    for m in _POPULATE.finditer(text):
        name, ftype, unit, entity = m.groups()
        enum = re.search(r"getTextForEnum\((\w+)\)", unit)
        unit_text = _UNITS[enum.group(1)] if enum else unit.strip('"').strip()
        row = (_TYPES[ftype], "" if unit_text == "#" else unit_text, entity.removeprefix("DCGM_FE_").lower())
        if name in ids:
            meta[ids[name]] = row
        elif name == "fieldId":  # the loop closest before this call gives the range
            before = [loop for loop in loops if loop[0] < m.start()]
            if before:
                _, first, last = before[-1]
                for fid in range(first, last + 1):
                    meta.setdefault(fid, row)
    for m in _RANGE_CALL.finditer(text):  # NVLink profiling ranges: int64 byte counters per GPU
        for fid in range(ids[m.group(1)], ids[m.group(2)] + 1):
            meta.setdefault(fid, ("int64", "", "gpu"))
    return meta


def render(ids: dict[str, int], aliases: dict[str, int], meta: dict[int, tuple[str, str, str]],
           legacy: dict[str, int], source: str) -> str:
    out = [
        '"""Every DCGM field: id -> (name, value type, unit, entity level); old and 1.x names -> id.',
        "",
        f"Generated by scripts/gen-dcgm-fields.py from {source}. Do not edit by hand.",
        "Types and units are DCGM's (value type ``unknown`` where DCGM's field table has no entry).",
        '"""',
        "",
        "# fmt: off",
        "FIELDS: dict[int, tuple[str, str, str, str]] = {",
    ]
    for name, fid in sorted(ids.items(), key=lambda kv: (kv[1], kv[0])):
        ftype, unit, entity = meta.get(fid, ("unknown", "", ""))
        out.append(f"    {fid}: ({name!r}, {ftype!r}, {unit!r}, {entity!r}),")
    out.append("}")
    out.append("")
    out.append("OTHER_NAMES: dict[str, int] = {")
    out.extend(f"    {name!r}: {fid}," for name, fid in sorted(aliases.items()))
    out.append("}")
    out.append("")
    out.append("LEGACY_NAMES: dict[str, int] = {")
    out.extend(f"    {name!r}: {fid}," for name, fid in sorted(legacy.items()))
    out.append("}")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("header", type=Path)
    parser.add_argument("table", type=Path)
    parser.add_argument("--legacy", type=Path)
    parser.add_argument("--source", default="DCGM's dcgm_fields.h and dcgm_fields.cpp")
    args = parser.parse_args()
    ids, aliases = parse_header(args.header.read_text())
    # one canonical name per id in FIELDS: ids shared by sentinel names keep the first real field name
    by_id: dict[int, str] = {}
    for name, fid in ids.items():
        if fid not in by_id or "FIRST" in by_id[fid] or "LAST" in by_id[fid]:
            by_id[fid] = name
    canonical = {name: fid for fid, name in by_id.items()}
    others = {name: fid for name, fid in ids.items() if name not in canonical}
    meta = parse_table(args.table.read_text(), ids)
    legacy: dict[str, int] = {}
    if args.legacy:
        with args.legacy.open() as fh:
            legacy = {row["name"]: int(row["id"]) for row in csv.DictReader(fh)}
    sys.stdout.write(render(canonical, {**others, **aliases}, meta, legacy, args.source))


if __name__ == "__main__":
    main()
