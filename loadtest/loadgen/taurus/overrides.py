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

Overrides apply to the file as written, before any shorthand is expanded (``CLI.__configure`` applies them before
``Engine.unify_config`` turns a single ``execution`` mapping into a list), so the path follows the file's shape:
with ``execution`` written as one mapping, ``execution.hold-for`` sets its ``hold-for``, and
``execution.0.hold-for`` fails in bzt (``pointer[0]`` on a mapping: a ``KeyError``); here it is an error saying
which path to write. Likewise a request written as a URL, or a scenario named by ``scenario``, holds no keys.
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


def _where(parts: list[str | int], end: int) -> str:
    return ".".join(map(str, parts[:end])) or "the file"


def _describe(node: object) -> str:
    if isinstance(node, str):
        return f"the text {node!r}"
    return "empty" if node is None else f"the value {node!r}"


def _not_a_list(parts: list[str | int], index: int) -> OverrideError:
    """An index into a mapping: what bzt's path means there (it takes the index as a key, and fails)."""
    where = _where(parts, index)
    if parts[index] == -1:
        return OverrideError(f"{where} is one mapping in this file, not a list, so there is nothing to append to "
                             f"(bzt fails here too); to add one, write {where} as a list in the file")
    without = ".".join(map(str, parts[:index] + parts[index + 1:]))
    return OverrideError(f"{where} is one mapping in this file, not a list: its keys are set without an index, "
                         f"as bzt sets them (-o {without}=...; bzt fails on {parts[index]} here too)")


def _not_a_mapping(parts: list[str | int], index: int, node: object, what: str = "not a mapping") -> OverrideError:
    """A key under something that holds no keys, with a hint for the two shapes a Taurus file writes so."""
    where = _where(parts, index)
    hint = ""
    if isinstance(node, str) and index >= 2 and parts[index - 2] == "requests":
        hint = f"; a request written as a URL is replaced whole: -o '{where}={{url: {node}, ...}}'"
    elif isinstance(node, str) and parts[index - 1] == "scenario":
        hint = f"; it names a scenario, whose keys are set under scenarios.{node}"
    return OverrideError(f"{where} is {what} ({_describe(node)}){hint}")


def _step(pointer: Any, parts: list[str | int], index: int) -> Any:
    """The node under ``pointer`` at ``parts[index]`` on the way to the last part, created when missing."""
    part, following = parts[index], parts[index + 1]
    _grow(pointer, part, following)
    if isinstance(pointer, list):
        if not isinstance(part, int):
            raise OverrideError(f"{_where(parts, index)} is a list: index it with a number")
        if part < 0:
            pointer.append([] if isinstance(following, int) else {})
            return pointer[-1]
        return pointer[part]
    if not isinstance(pointer, dict):
        raise _not_a_mapping(parts, index, pointer)
    if isinstance(part, int) and part not in pointer:
        raise _not_a_list(parts, index)
    if pointer.get(part) is None:
        pointer[part] = [] if isinstance(following, int) else {}
    return pointer[part]


def _apply(config: dict[str, Any], path: str, value: str) -> None:
    parts = [_part(p) for p in path.split(".")]
    pointer: Any = config
    for index in range(len(parts) - 1):
        pointer = _step(pointer, parts, index)
    last = parts[-1]
    _grow(pointer, last, None)
    if not isinstance(pointer, dict | list):
        raise _not_a_mapping(parts, len(parts) - 1, pointer, "neither a mapping nor a list")
    if isinstance(last, str) and last.startswith("*"):
        _replace_everywhere(pointer, last[1:], value)
    elif isinstance(last, str) and last.startswith("^"):
        _delete(pointer, last[1:])
    elif isinstance(pointer, list):
        if not isinstance(last, int):
            raise OverrideError(f"{_where(parts, -1)} is a list: index it with a number")
        if last < 0:
            pointer.append(_yaml_value(value))
        else:
            pointer[last] = _yaml_value(value)
    elif isinstance(last, int) and last not in pointer:
        raise _not_a_list(parts, len(parts) - 1)
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
