"""The subset of Go text/template that prometheus-adapter rules use, with its ``<< >>`` delimiters.

Supported actions: ``<<.Field>>``, ``<<.Map.key>>``, ``<<index .Map "key">>``, ``<<"constant">>`` and the
``<<- `` / `` ->>`` whitespace trim markers. Anything else (pipelines, variables, ``range``, ``if``, other
functions) is rejected when the template is parsed, so a rules file fails at load instead of at query time.
Output follows Go's printing: a ``[]string`` renders as ``[a b]``, a map as ``map[k:v]``, a missing map key
as ``<no value>`` through a field chain and as the empty string through ``index``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

FieldKind = Literal["string", "list", "map"]
Value = str | Sequence[str] | Mapping[str, str]

LEFT, RIGHT = "<<", ">>"
_SPACE = " \t\r\n"
_GO_KEYWORDS = frozenset({"block", "break", "continue", "define", "else", "end", "if", "range", "template", "with"})
_GO_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}
_HEX_ESCAPE = {"x": 2, "u": 4, "U": 8}


class TemplateError(ValueError):
    pass


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Field:
    """``.Name`` or ``.Map.key``."""

    path: tuple[str, ...]


@dataclass(frozen=True)
class Index:
    """``index .Map "key"``."""

    field: str
    key: str


Node = Text | Field | Index


@dataclass(frozen=True)
class Template:
    source: str
    nodes: tuple[Node, ...]

    @classmethod
    def parse(cls, source: str, fields: Mapping[str, FieldKind]) -> Template:
        return cls(source, tuple(_Parser(source, fields).parse()))

    @cached_property  # asked on every request (Binding.filters_namespace)
    def fields(self) -> frozenset[str]:
        """The top-level fields the template reads."""
        return frozenset(n.path[0] if isinstance(n, Field) else n.field for n in self.nodes if not isinstance(n, Text))

    def render(self, data: Mapping[str, Value]) -> str:
        return "".join(_render_node(node, data) for node in self.nodes)


def go_format(value: Value) -> str:
    """``fmt.Sprint`` of a string, ``[]string`` or ``map[string]string``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{value[k]}" for k in sorted(value)) + "]"
    return "[" + " ".join(value) + "]"


def _render_node(node: Node, data: Mapping[str, Value]) -> str:
    if isinstance(node, Text):
        return node.text
    if isinstance(node, Index):
        return _as_map(data[node.field]).get(node.key, "")
    value = data[node.path[0]]
    if len(node.path) == 1:
        return go_format(value)
    return _as_map(value).get(node.path[1], "<no value>")


def _as_map(value: Value) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise TypeError("template data does not match the field kinds it was parsed with")
    return value


Token = tuple[Literal["field", "ident", "string"], tuple[str, ...]]


class _Parser:
    def __init__(self, source: str, fields: Mapping[str, FieldKind]) -> None:
        self.src = source
        self.fields = fields

    def parse(self) -> list[Node]:
        nodes: list[Node] = []
        pos, trim_next = 0, False
        while True:
            start = self.src.find(LEFT, pos)
            chunk = self.src[pos:] if start < 0 else self.src[pos:start]
            if trim_next:
                chunk = chunk.lstrip(_SPACE)
            if start < 0:
                if chunk:
                    nodes.append(Text(chunk))
                return _merge_text(nodes)
            body = start + len(LEFT)
            if self.src.startswith("-", body) and body + 1 < len(self.src) and self.src[body + 1] in _SPACE:
                chunk = chunk.rstrip(_SPACE)
                body += 2
            if chunk:
                nodes.append(Text(chunk))
            tokens, pos, trim_next = self._lex_action(body)
            nodes.append(self._action(tokens))

    def _lex_action(self, i: int) -> tuple[list[Token], int, bool]:
        src = self.src
        tokens: list[Token] = []
        while i < len(src):
            ch = src[i]
            if ch in _SPACE:
                i += 1
            elif src.startswith(RIGHT, i):
                return tokens, i + len(RIGHT), False
            elif ch == "-" and src.startswith(RIGHT, i + 1) and src[i - 1] in _SPACE:
                return tokens, i + 1 + len(RIGHT), True
            elif ch == ".":
                path, i = self._lex_field_chain(i)
                tokens.append(("field", path))
            elif ch.isalpha() or ch == "_":
                end = _ident_end(src, i)
                tokens.append(("ident", (src[i:end],)))
                i = end
            elif ch in '"`':
                value, i = self._lex_string(i)
                tokens.append(("string", (value,)))
            elif src.startswith("/*", i):
                raise TemplateError("template comments are not supported")
            else:
                raise TemplateError(f"unsupported syntax {ch!r} in action (supported: .Field, .Map.key, index)")
        raise TemplateError(f"unclosed action (missing {RIGHT!r})")

    def _lex_field_chain(self, i: int) -> tuple[tuple[str, ...], int]:
        path: list[str] = []
        while i < len(self.src) and self.src[i] == ".":
            end = _ident_end(self.src, i + 1)
            if end == i + 1:
                raise TemplateError("'.' on its own is not supported; name a field such as .Series")
            path.append(self.src[i + 1 : end])
            i = end
        return tuple(path), i

    def _lex_string(self, i: int) -> tuple[str, int]:
        quote = self.src[i]
        if quote == "`":
            end = self.src.find("`", i + 1)
            if end < 0:
                raise TemplateError("unterminated raw string")
            return self.src[i + 1 : end], end + 1
        out: list[str] = []
        j = i + 1
        while j < len(self.src):
            ch = self.src[j]
            if ch == '"':
                return "".join(out), j + 1
            if ch == "\n":
                break
            if ch != "\\":
                out.append(ch)
                j += 1
                continue
            esc = self.src[j + 1 : j + 2]
            if esc in _GO_ESCAPES:
                out.append(_GO_ESCAPES[esc])
                j += 2
            elif esc in _HEX_ESCAPE:
                digits = self.src[j + 2 : j + 2 + _HEX_ESCAPE[esc]]
                if not re.fullmatch(r"[0-9a-fA-F]+", digits) or len(digits) != _HEX_ESCAPE[esc]:
                    raise TemplateError(f"invalid escape \\{esc} in string")
                out.append(chr(int(digits, 16)))
                j += 2 + len(digits)
            else:
                raise TemplateError(f"unknown escape sequence \\{esc} in string")
        raise TemplateError("unterminated string")

    def _action(self, tokens: list[Token]) -> Node:
        if not tokens:
            raise TemplateError("empty action")
        kind, value = tokens[0]
        if kind == "string" and len(tokens) == 1:
            return Text(value[0])
        if kind == "field" and len(tokens) == 1:
            self._check_field(value)
            return Field(value)
        if kind == "field":
            raise TemplateError(f"unexpected argument after .{'.'.join(value)} (pipelines are not supported)")
        if kind == "ident" and value[0] == "index":
            return self._index(tokens[1:])
        if kind == "ident" and value[0] in _GO_KEYWORDS:
            raise TemplateError(f"{value[0]!r} actions are not supported")
        if kind == "ident":
            raise TemplateError(f"function {value[0]!r} is not supported (only index)")
        raise TemplateError("unexpected argument after a string constant")

    def _index(self, args: list[Token]) -> Node:
        if len(args) != 2 or args[0][0] != "field" or args[1][0] != "string" or len(args[0][1]) != 1:
            raise TemplateError('index takes a map field and one string key, as in index .LabelValuesByName "pod"')
        name = args[0][1][0]
        self._check_field((name,))
        if self.fields[name] != "map":
            raise TemplateError(f"index of .{name} is not supported (only maps)")
        return Index(name, args[1][1][0])

    def _check_field(self, path: tuple[str, ...]) -> None:
        name = path[0]
        if name not in self.fields:
            known = ", ".join(f".{f}" for f in sorted(self.fields))
            raise TemplateError(f"unknown field .{name} (available: {known})")
        depth = 2 if self.fields[name] == "map" else 1
        if len(path) > depth:
            raise TemplateError(f"can't evaluate field {path[depth]} of .{'.'.join(path[:depth])}")


def _ident_end(src: str, i: int) -> int:
    while i < len(src) and (src[i].isalnum() or src[i] == "_"):
        i += 1
    return i


def _merge_text(nodes: list[Node]) -> list[Node]:
    merged: list[Node] = []
    for node in nodes:
        if isinstance(node, Text) and merged and isinstance(merged[-1], Text):
            merged[-1] = Text(merged[-1].text + node.text)
        else:
            merged.append(node)
    return merged
