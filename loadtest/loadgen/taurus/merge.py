"""The documents of a Taurus file merged into one config, as bzt merges them (pure).

bzt reads every YAML document of a file (``Configuration._read_yaml_or_json`` in ``bzt/engine/dicts.py``: empty
documents skipped, any other that is not a mapping refused) and merges each in turn into the config so far with
``BetterDict.merge`` (``bzt/utils.py``; docs: site/dat/docs/ConfigSyntax.md, "Multiple Files Merging Rules"; tests:
tests/unit/test_configuration.py). This runner starts from nothing, as for one file with no base or personal
configs (the keys those set are Taurus' own settings, which this runner does not read):

* a mapping merges into a mapping key by key, at any depth; a list is joined to a list (the later items after the
  earlier ones); anything else, or a value of another type, replaces what was there;
* a key's prefix changes that: ``~key`` replaces the value instead of merging into it, ``^key`` deletes the key
  (its value is not read), ``$key`` merges a list item by item (a mapping into the mapping at the same index, any
  other item replacing it, extra items appended);
* prefixes are read where a mapping merges into a mapping. A mapping that goes into a list, or that replaces a
  value of another type, is taken as written (``BetterDict.from_dict``): a prefixed key in it stays a key with that
  name, which Taurus then does not know. ``$`` merges list items with ``merge``, so the prefixes of an item that
  lands on an earlier mapping are read.

Before any of this, bzt replaces the tabs that start a line (YAML allows none there) with spaces
(``Configuration._replace_tabs``, ``tab-replacement-spaces`` 4, with a warning): ``replace_tabs``.

So ``execution`` written as a list in one document and a list in the next is both lists' executions; as a mapping
in both, one execution with the keys of both; as a list and then a mapping, the mapping alone (ConfigSyntax.md
warns of exactly this).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["PREFIXES", "merge_documents", "merge_into", "prefix_of", "replace_tabs"]

PREFIXES = {"~": "replace", "^": "delete", "$": "merge item by item"}
_LEADING_TABS = re.compile(r"^( *)(\t+)( *\S*)")


def prefix_of(key: object) -> str:
    """The merge prefix a key starts with (``~``, ``^``, ``$``), or ``""``."""
    return key[0] if isinstance(key, str) and key[:1] in PREFIXES else ""


def merge_into(config: dict[Any, Any], document: Mapping[Any, Any]) -> dict[Any, Any]:
    """Merge ``document`` into ``config`` in place, as ``BetterDict.merge``; returns ``config``. ``document`` is
    copied, never shared."""
    for written, value in document.items():
        prefix = prefix_of(written)
        key = written[1:] if prefix else written
        if prefix == "^":
            config.pop(key, None)
            continue
        if prefix == "~":
            config.pop(key, None)
        if isinstance(value, Mapping):
            if key not in config:
                config[key] = merge_into({}, value)
            elif isinstance(config[key], dict):
                merge_into(config[key], value)
            else:
                config[key] = copy.deepcopy(dict(value))
        elif isinstance(value, list):
            _merge_list(config, key, copy.deepcopy(value), by_item=prefix == "$")
        else:
            config[key] = value
    return config


def _merge_list(config: dict[Any, Any], key: Any, items: list[Any], *, by_item: bool) -> None:
    current = config.setdefault(key, [])
    if not isinstance(current, list):
        config[key] = items
    elif not by_item:
        current.extend(items)
    else:
        for index, item in enumerate(items):
            if index >= len(current):
                current.append(item)
            elif isinstance(current[index], dict) and isinstance(item, dict):
                merge_into(current[index], item)
            else:
                current[index] = item


def merge_documents(documents: Iterable[Mapping[Any, Any]]) -> dict[Any, Any]:
    """One config from a file's documents, merged in order from nothing."""
    config: dict[Any, Any] = {}
    for document in documents:
        merge_into(config, document)
    return config


def replace_tabs(text: str) -> tuple[str, list[int]]:
    """Leading tabs as bzt replaces them before parsing (``Configuration._replace_tabs``, with its default
    ``tab-replacement-spaces`` of 4): each line's run of tabs after any spaces becomes 4 spaces. The text, and the
    numbers of the lines changed."""
    lines, changed = text.splitlines(keepends=True), []
    for number, line in enumerate(lines):
        replaced = _LEADING_TABS.sub(r"\1    \3", line)
        if replaced != line:
            lines[number] = replaced
            changed.append(number + 1)
    return "".join(lines), changed
