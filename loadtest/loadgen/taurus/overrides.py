"""``-o path=value`` overrides, applied to a loaded Taurus file as ``bzt -o`` applies them (pure).

The rules are those of ``ConfigOverrider`` in Taurus' ``bzt/cli.py`` (docs: site/dat/docs/CommandLine.md,
"Command-Line Options Override"; tests: tests/unit/test_CLI.py ``TestConfigOverrider``):

* the path is dictionary keys and list indexes separated by dots (``execution.0.hold-for``); a missing key is
  created (a list when the next part is an index, else a mapping), a list grows to hold the index, and index
  ``-1`` appends;
* the value is parsed as YAML (``30s`` stays text, ``3`` is a number, ``[a, b]`` a list, ``{k: v}`` a mapping, an
  empty value is null); text YAML cannot parse is taken as it is;
* a last part ``^key`` deletes that key (or list index), doing nothing when it is absent; ``*key`` sets every
  ``key`` under the path, at any depth, to the value as written (not parsed), and replaces list items equal to
  ``key`` too.

A path through something that is neither a mapping nor a list is an error naming the override.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["OverrideError", "apply_overrides", "parse_override"]


class OverrideError(ValueError):
    """An override that cannot be applied; the message starts with ``-o PATH=VALUE``."""


def parse_override(option: str) -> tuple[str, str]:
    """``PATH=VALUE`` split at the first ``=`` (``bzt`` splits there too)."""
    path, equals, value = option.partition("=")
    if not equals or not path:
        raise OverrideError(f"-o {option!r}: expected PATH=VALUE, e.g. execution.0.hold-for=30s")
    return path, value


def _part(text: str) -> str | int:
    """An index where Taurus' ``is_int`` sees one (digits, optionally after ``-``), else a key."""
    digits = text[1:] if text.startswith("-") else text
    return int(text) if digits.isdigit() else text


def _yaml_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _grow(pointer: Any, part: str | int, following: str | int | None) -> None:
    """A list long enough to hold index ``part`` (new items: lists before an index, else mappings)."""
    if isinstance(pointer, list) and isinstance(part, int):
        while len(pointer) <= part:
            pointer.append([] if isinstance(following, int) else {})


def _replace_everywhere(node: Any, key: str, value: Any) -> None:
    if isinstance(node, dict):
        for child in node.values():
            _replace_everywhere(child, key, value)
        if key in node:
            node[key] = value
    elif isinstance(node, list):
        for child in node:
            _replace_everywhere(child, key, value)
        if key in node:
            node[node.index(key)] = value


def _apply(config: dict[str, Any], path: str, value: str) -> None:
    parts = [_part(p) for p in path.split(".")]
    pointer: Any = config
    for index, part in enumerate(parts[:-1]):
        following = parts[index + 1]
        _grow(pointer, part, following)
        if isinstance(part, int):
            if not isinstance(pointer, list):
                raise OverrideError(f"{'.'.join(map(str, parts[:index]))} is not a list")
            if part < 0:
                pointer.append([] if isinstance(following, int) else {})
                pointer = pointer[-1]
            else:
                pointer = pointer[part]
        elif isinstance(pointer, dict):
            if pointer.get(part) is None:
                pointer[part] = [] if isinstance(following, int) else {}
            pointer = pointer[part]
        else:
            raise OverrideError(f"{'.'.join(map(str, parts[:index])) or 'the file'} is not a mapping")
    last = parts[-1]
    _grow(pointer, last, None)
    if not isinstance(pointer, dict | list):
        raise OverrideError(f"{'.'.join(map(str, parts[:-1]))} is neither a mapping nor a list")
    if isinstance(last, str) and last.startswith("*"):
        _replace_everywhere(pointer, last[1:], value)
    elif isinstance(last, str) and last.startswith("^"):
        _delete(pointer, last[1:])
    elif isinstance(pointer, list):
        if not isinstance(last, int):
            raise OverrideError(f"{'.'.join(map(str, parts[:-1]))} is a list: index it with a number")
        if last < 0:
            pointer.append(_yaml_value(value))
        else:
            pointer[last] = _yaml_value(value)
    else:
        pointer[last] = _yaml_value(value)


def _delete(pointer: dict[str, Any] | list[Any], item: str) -> None:
    if isinstance(pointer, list):
        index = _part(item)
        if not isinstance(index, int):
            raise OverrideError(f"^{item}: a list item is deleted by its index")
        if -len(pointer) <= index < len(pointer):
            del pointer[index]
    else:
        pointer.pop(item, None)


def apply_overrides(config: dict[str, Any], options: list[str]) -> list[str]:
    """Apply ``PATH=VALUE`` overrides to ``config`` in place, in order; returns the paths they set."""
    paths = []
    for option in options:
        path, value = parse_override(option)
        try:
            _apply(config, path, value)
        except OverrideError as exc:
            raise OverrideError(f"-o {option}: {exc}") from None
        paths.append(path)
    return paths
