"""Building PromQL from values that came from a request: every value is quoted, nothing changes a query's shape."""

from __future__ import annotations

import re
from collections.abc import Iterable

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# RE2 metacharacters; escaping them makes a value match itself literally inside a regex matcher. A translation
# table rather than re.sub: a 1,500-pod selector escapes 1,500 names per request.
_REGEX_ESCAPES = str.maketrans({c: "\\" + c for c in "\\.+*?()|[]{}^$"})
_REGEX_SPECIAL = re.compile(r"[\\.+*?()|\[\]{}^$]")


class PromQLError(ValueError):
    pass


def quote(value: str) -> str:
    """A PromQL double-quoted string literal whose content is exactly ``value``."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    # Prometheus's lexer rejects a literal U+FFFD (it reads it as invalid UTF-8); its escape is accepted.
    escaped = escaped.replace("\t", "\\t").replace("\ufffd", "\\ufffd")
    return f'"{escaped}"'


def regex_literal(value: str) -> str:
    """An RE2 pattern matching ``value`` literally (Prometheus anchors label regexes)."""
    return value.translate(_REGEX_ESCAPES)


def regex_alternation(values: Iterable[str]) -> str:
    """The distinct ``values``, sorted, as an RE2 alternation matching exactly them (``a|b\\.c``)."""
    return _alternation(sorted(set(values)))


def _alternation(unique: list[str]) -> str:
    if _REGEX_SPECIAL.search("".join(unique)) is None:  # the usual case (pod names): nothing to escape
        return "|".join(unique)
    return "|".join(v.translate(_REGEX_ESCAPES) for v in unique)


def check_label_name(name: str) -> str:
    if not _LABEL_NAME.fullmatch(name):
        raise PromQLError(f"invalid Prometheus label name {name!r}")
    return name


def matcher(label: str, op: str, value: str) -> str:
    """``label op "value"`` with ``op`` one of ``=``, ``!=``, ``=~``, ``!~``; the value is always quoted."""
    if op not in ("=", "!=", "=~", "!~"):
        raise PromQLError(f"invalid matcher operator {op!r}")
    return f"{check_label_name(label)}{op}{quote(value)}"


def one_of(label: str, values: Iterable[str], negate: bool = False) -> str:
    """Match any of ``values`` literally: ``=`` for one value, an escaped alternation for several."""
    unique = sorted(set(values))
    if not unique:
        raise PromQLError("one_of needs at least one value")
    if len(unique) == 1:
        return matcher(label, "!=" if negate else "=", unique[0])
    return matcher(label, "!~" if negate else "=~", _alternation(unique))
