"""Kubernetes label-selector strings (``labelSelector`` / ``metricLabelSelector``): parse, match, turn into PromQL.

Parsing follows apimachinery ``labels.Parse``: the same tokens, the same grammar (``k in ()`` means the empty
value, ``k=`` compares with ""), the same key/value validation, requirements sorted by key and values
sorted and de-duplicated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from adapter.rules.promql import PromQLError, check_label_name, matcher, one_of, quote, regex_literal

__all__ = [
    "OPERATORS",
    "Requirement",
    "SelectorError",
    "format_selector",
    "matches",
    "parse_selector",
    "to_label_selector",
    "to_label_values",
    "to_promql_matchers",
]

OPERATORS = ("=", "==", "!=", "in", "notin", "exists", "!", "gt", "lt")

_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_INT64 = re.compile(r"[+-]?[0-9]+")
_PROMETHEUS_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_WHITESPACE = " \t\r\n"
_SYMBOLS = "=!(),<>"
_TWO_CHAR_SYMBOLS = ("==", "!=")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class SelectorError(ValueError):
    """A selector that Kubernetes would reject; the message is one line, fit for a 400 ``Status``."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # one of OPERATORS, spelled as Go's selection.Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS:
            raise SelectorError(f"unknown selector operator {self.operator!r}")
        count = len(self.values)
        if self.operator in ("exists", "!") and count:
            raise SelectorError(f"operator {self.operator!r} takes no values")
        if self.operator in ("in", "notin") and not count:
            raise SelectorError(f"for 'in', 'notin' operators the values can't be empty ({self.key!r})")
        if self.operator in ("=", "==", "!=", "gt", "lt") and count != 1:
            raise SelectorError(f"operator {self.operator!r} needs exactly one value ({self.key!r})")


def _show(text: str, limit: int = 80) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


# --- validation -------------------------------------------------------------------------------------------------


def _key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix or "/" in prefix:
            return "a qualified name has at most one '/' with a non-empty prefix before it"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return "the prefix must be a lowercase DNS subdomain of at most 253 characters"
    if not name:
        return "the name part must be non-empty"
    if len(name) > 63:
        return "the name part must be at most 63 characters"
    if not _NAME.fullmatch(name):
        return "the name part must be alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


def _value_problem(value: str) -> str | None:
    if len(value) > 63:
        return "a label value must be at most 63 characters"
    if value and not _NAME.fullmatch(value):
        return "a label value must be empty or alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


def _parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: no underscores, spaces or non-ASCII digits."""
    if not _INT64.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _validated(key: str, operator: str, values: Iterable[str]) -> Requirement:
    problem = _key_problem(key)
    if problem:
        raise SelectorError(f"invalid label key {_show(key)}: {problem}")
    unique = tuple(sorted(set(values)))
    for value in unique:
        problem = _value_problem(value)
        if problem:
            raise SelectorError(f"invalid value {_show(value)} for label {key!r}: {problem}")
    if operator in ("gt", "lt") and _parse_int64(unique[0]) is None:
        raise SelectorError(f"for 'gt', 'lt' operators the value must be an integer, got {unique[0]!r} for {key!r}")
    return Requirement(key, operator, unique)


# --- lexer and parser -------------------------------------------------------------------------------------------

# Token kinds: "id" (identifier, or a keyword used as one), "in", "notin", a symbol, "end".
_Token = tuple[str, str, int]  # kind, literal, position


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char in _WHITESPACE:
            pos += 1
        elif char in _SYMBOLS:
            width = 2 if text[pos : pos + 2] in _TWO_CHAR_SYMBOLS else 1
            tokens.append((text[pos : pos + width], text[pos : pos + width], pos))
            pos += width
        else:
            start = pos
            while pos < len(text) and text[pos] not in _WHITESPACE and text[pos] not in _SYMBOLS:
                pos += 1
            word = text[start:pos]
            tokens.append((word if word in ("in", "notin") else "id", word, start))
    tokens.append(("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.index = 0

    def peek(self, as_value: bool = True) -> _Token:
        """The next token; where a value or key may stand, ``in``/``notin`` are plain identifiers."""
        kind, literal, pos = self.tokens[self.index]
        if as_value and kind in ("in", "notin"):
            kind = "id"
        return kind, literal, pos

    def take(self, as_value: bool = True) -> _Token:
        token = self.peek(as_value)
        if token[0] != "end":
            self.index += 1
        return token

    def fail(self, token: _Token, expected: str) -> SelectorError:
        _, literal, pos = token
        found = f"{literal!r}" if literal else "end of string"
        return SelectorError(
            f"unable to parse selector {_show(self.text)}: found {found} at position {pos}, expected {expected}"
        )

    def parse(self) -> tuple[Requirement, ...]:
        requirements: list[Requirement] = []
        if self.peek()[0] == "end":
            return ()
        while True:
            token = self.peek()
            if token[0] not in ("id", "!"):
                expected = "'!' or an identifier" + (" after ','" if requirements else " or end of string")
                raise self.fail(token, expected)
            requirements.append(self.requirement())
            token = self.take()
            if token[0] == "end":
                break
            if token[0] != ",":
                raise self.fail(token, "',' or end of string")
        requirements.sort(key=lambda r: r.key)  # as Go does; equal keys keep their input order
        return tuple(requirements)

    def requirement(self) -> Requirement:
        negated = self.peek()[0] == "!"
        if negated:
            self.take()
        token = self.take()
        if token[0] != "id":
            raise self.fail(token, "an identifier")
        key = token[1]
        if negated or self.peek()[0] in ("end", ","):
            return _validated(key, "!" if negated else "exists", ())
        token = self.take(as_value=False)
        operator = {"=": "=", "==": "==", "!=": "!=", "<": "lt", ">": "gt", "in": "in", "notin": "notin"}.get(token[0])
        if operator is None:
            raise self.fail(token, "one of '=', '==', '!=', 'in', 'notin', '<', '>'")
        values = self.value_set() if operator in ("in", "notin") else [self.exact_value()]
        return _validated(key, operator, values)

    def exact_value(self) -> str:
        kind = self.peek()[0]
        if kind in ("end", ","):
            return ""  # "k=" compares with the empty value
        token = self.take()
        if kind != "id":
            raise self.fail(token, "a value")
        return token[1]

    def value_set(self) -> list[str]:
        """``( v1, v2, ... )``; an empty slot means the empty value, so ``()`` is ``("")`` as in Go."""
        token = self.take()
        if token[0] != "(":
            raise self.fail(token, "'('")
        values: list[str] = []
        expect_value = True
        while True:
            token = self.take()
            kind = token[0]
            if kind == "id" and expect_value:
                values.append(token[1])
                expect_value = False
            elif kind in (",", ")"):
                if expect_value:
                    values.append("")
                if kind == ")":
                    return values
                expect_value = True
            else:
                raise self.fail(token, "a value, ',' or ')'" if expect_value else "',' or ')'")


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a label-selector string; ``""`` selects everything and gives ``()``. Raises only ``SelectorError``."""
    if not isinstance(text, str):
        raise SelectorError(f"a selector must be a string, got {type(text).__name__}")
    return _Parser(text).parse()


def format_selector(requirements: Iterable[Requirement]) -> str:
    """The string Go's ``Selector.String()`` gives for these requirements (``k in (a,b)``, ``!k``, ``k>3`` ...)."""
    parts = []
    for req in requirements:
        if req.operator == "exists":
            parts.append(req.key)
        elif req.operator == "!":
            parts.append(f"!{req.key}")
        elif req.operator in ("in", "notin"):
            parts.append(f"{req.key} {req.operator} ({','.join(req.values)})")
        else:
            symbol = {"gt": ">", "lt": "<"}.get(req.operator, req.operator)
            parts.append(f"{req.key}{symbol}{req.values[0] if req.values else ''}")
    return ",".join(parts)


# --- uses -------------------------------------------------------------------------------------------------------


def to_promql_matchers(requirements: Iterable[Requirement]) -> list[str]:
    """PromQL label matchers equivalent to ``requirements``; values are quoted and escaped (``promql``).

    Prometheus cannot tell a missing label from an empty one, so ``exists`` becomes ``!=""`` and ``!k`` ``=""``.
    """
    result = []
    for req in requirements:
        try:
            if not _PROMETHEUS_LABEL.fullmatch(req.key):  # fullmatch: "$" alone would let "a\n" through
                raise PromQLError(req.key)
            label = check_label_name(req.key)
        except PromQLError:
            raise SelectorError(f"label key {_show(req.key)} is not a valid Prometheus label name") from None
        op = req.operator
        if op in ("gt", "lt"):
            raise SelectorError(f"operator {op!r} (on {req.key!r}) is not supported for metric label selectors")
        if op == "exists":
            result.append(matcher(label, "!=", ""))
        elif op == "!":
            result.append(matcher(label, "=", ""))
        elif op in ("=", "=="):
            result.append(matcher(label, "=", req.values[0]))
        elif op == "!=":
            result.append(matcher(label, "!=", req.values[0]))
        else:
            result.append(one_of(label, req.values, negate=op == "notin"))
    return result


def to_label_values(requirements: Iterable[Requirement]) -> tuple[tuple[str, str], ...]:
    """``.LabelValuesByName`` entries for a selector, built as prometheus-adapter builds them
    (pkg/naming/metrics_query.go, processQueryParts): each requirement's values joined by ``|`` (``foo=bar`` ->
    ``bar``, ``foo in (bar,baz)`` -> ``bar|baz``, ``foo`` / ``!foo`` -> empty), a later requirement on the same key
    replacing an earlier one. Unlike there, each value is regex-escaped and the whole escaped for the inside of a
    PromQL double-quoted string, ready for ``label=~"<<.LabelValuesByName.label>>"``."""
    values: dict[str, str] = {}
    for req in requirements:
        values[req.key] = quote("|".join(regex_literal(v) for v in req.values))[1:-1]
    return tuple(values.items())


def to_label_selector(requirements: Iterable[Requirement]) -> dict[str, Any] | None:
    """The ``metav1.LabelSelector`` JSON to echo back in a ``MetricValue``; ``None`` for no requirements.

    ``k!=v`` has no LabelSelector operator and is written as ``NotIn [v]``; a key with two different ``=`` values
    keeps the first in ``matchLabels`` and the others as ``In`` expressions, so nothing is lost.
    """
    reqs = list(requirements)
    if not reqs:
        return None
    match_labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    operator_names = {"in": "In", "notin": "NotIn", "!=": "NotIn", "exists": "Exists", "!": "DoesNotExist"}
    operator_names |= {"gt": "Gt", "lt": "Lt", "=": "In", "==": "In"}
    for req in reqs:
        if req.operator in ("=", "==") and match_labels.get(req.key, req.values[0]) == req.values[0]:
            match_labels[req.key] = req.values[0]
            continue
        expression: dict[str, Any] = {"key": req.key, "operator": operator_names[req.operator]}
        if req.values:
            expression["values"] = list(req.values)
        expressions.append(expression)
    selector: dict[str, Any] = {}
    if match_labels:
        selector["matchLabels"] = dict(sorted(match_labels.items()))
    if expressions:
        selector["matchExpressions"] = expressions
    return selector


def _requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    value = labels.get(req.key)
    op = req.operator
    if op in ("=", "==", "in"):
        return present and value in req.values
    if op in ("!=", "notin"):
        return not present or value not in req.values
    if op == "exists":
        return present
    if op == "!":
        return not present
    # gt / lt: both sides must be integers (Go compares int64s; a bad value simply does not match)
    if not present:
        return False
    have, want = _parse_int64(value or ""), _parse_int64(req.values[0])
    if have is None or want is None:
        return False
    return have > want if op == "gt" else have < want


_EQUALITY = frozenset({"=", "==", "in"})


def matches(requirements: Iterable[Requirement], labels: Mapping[str, str]) -> bool:
    """Whether an object with ``labels`` is selected (all requirements hold; no requirements selects everything)."""
    # Runs once per object of the namespace per selector request: a plain loop (no generator), with equality, the
    # operator of Deployment selectors, checked inline. An absent label reads as None, which is never a value.
    for req in requirements:
        if req.operator in _EQUALITY:
            if labels.get(req.key) not in req.values:
                return False
        elif not _requirement_matches(req, labels):
            return False
    return True
