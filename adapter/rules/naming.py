"""Series-name filters and the ``name.matches``/``name.as`` mapping, with Go regexp semantics.

Patterns are compiled with Python's ``re`` after rejecting the constructs RE2 (Go's regexp) refuses, so a
rules file that prometheus-adapter would reject is rejected here too. ``expand`` implements Go's
``Regexp.Expand``: ``$name`` takes the longest run of letters, digits and underscores, so ``$1x`` names the
group ``1x`` (which does not exist and expands to nothing) while ``${1}x`` is group 1 followed by ``x``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NOT_RE2 = (
    ("(?=", "lookaheads"),
    ("(?!", "negative lookaheads"),
    ("(?<=", "lookbehinds"),
    ("(?<!", "negative lookbehinds"),
    ("(?P=", "backreferences"),
    ("(?(", "conditionals"),
    ("(?>", "atomic groups"),
    ("(?#", "comment groups"),
)
_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "digit": "0-9",
    "lower": "a-z",
    "upper": "A-Z",
    "space": "\\t\\n\\v\\f\\r ",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}


def compile_regexp(pattern: str) -> re.Pattern[str]:
    """Compile a Go (RE2) pattern; ``ValueError`` with a one-line reason if Go would reject it."""
    try:
        return re.compile(_to_python(pattern))
    except re.error as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc.msg}") from None
    except ValueError as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}") from None


def _to_python(pattern: str) -> str:
    """Reject non-RE2 syntax and translate the two spellings that differ (``(?<name>``, ``\\z``)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt.isdigit() and nxt != "0":
                raise ValueError("Go regexp does not support backreferences")
            if nxt == "Z":
                raise ValueError("invalid escape sequence \\Z (Go spells the end of text \\z)")
            out.append("\\Z" if nxt == "z" else pattern[i : i + 2])
            i += 2
        elif ch == "[":
            text, i = _char_class(pattern, i)
            out.append(text)
        elif ch == "(" and pattern.startswith("(?", i):
            for prefix, what in _NOT_RE2:
                if pattern.startswith(prefix, i):
                    raise ValueError(f"Go regexp does not support {what}")
            if pattern.startswith("(?<", i):
                out.append("(?P<")
                i += 3
            else:
                out.append("(?")
                i += 2
        elif ch in "*+?" and pattern[i + 1 : i + 2] == "+":
            raise ValueError(f"bad repetition operator {ch}+")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _char_class(pattern: str, i: int) -> tuple[str, int]:
    """The class starting at ``pattern[i] == '['`` with Go's ``[:name:]`` classes spelled out, and its end."""
    out = ["["]
    j = i + 1
    if pattern[j : j + 1] == "^":
        out.append("^")
        j += 1
    if pattern[j : j + 1] == "]":
        out.append("\\]")
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        posix = re.match(r"\[:(\^?)([a-z]+):\]", pattern[j:])
        if posix:
            if posix.group(1) or posix.group(2) not in _POSIX_CLASSES:
                raise ValueError(f"unsupported character class {posix.group(0)}")
            out.append(_POSIX_CLASSES[posix.group(2)])
            j += posix.end()
            continue
        step = 2 if pattern[j] == "\\" else 1
        out.append(pattern[j : j + step])
        j += step
    if j >= len(pattern):
        raise ValueError("missing closing ]")
    out.append("]")
    return "".join(out), j + 1


def expand(template: str, match: re.Match[str]) -> str:
    """Go's ``Regexp.ExpandString`` of ``template`` for ``match``."""
    out: list[str] = []
    rest = template
    while True:
        before, dollar, rest = rest.partition("$")
        out.append(before)
        if not dollar:
            return "".join(out)
        if rest.startswith("$"):
            out.append("$")
            rest = rest[1:]
            continue
        parsed = _extract(rest)
        if parsed is None:
            out.append("$")
            continue
        name, rest = parsed
        out.append(_group(match, name))


def _extract(text: str) -> tuple[str, str] | None:
    """The reference name after a ``$`` and the text after it, or ``None`` if malformed (Go's ``extract``)."""
    brace = text.startswith("{")
    body = text[1:] if brace else text
    end = 0
    while end < len(body) and (body[end].isalpha() or body[end].isdecimal() or body[end] == "_"):
        end += 1
    if end == 0:
        return None
    if brace:
        if body[end : end + 1] != "}":
            return None
        return body[:end], body[end + 1 :]
    return body[:end], body[end:]


def _group(match: re.Match[str], name: str) -> str:
    if name.isdigit() and name.isascii() and not (name.startswith("0") and len(name) > 1) and len(name) <= 8:
        index = int(name)
        value = match.group(index) if index <= match.re.groups else None
    else:
        value = match.groupdict().get(name)
    return value or ""


@dataclass(frozen=True)
class SeriesFilter:
    """``is`` keeps series whose name matches; ``isNot`` drops them (unanchored, like Go's MatchString)."""

    pattern: re.Pattern[str]
    negate: bool = False

    def accepts(self, series_name: str) -> bool:
        return (self.pattern.search(series_name) is None) == self.negate


ANY_NAME = re.compile(".*")
"""``name.matches`` when a rule gives none (prometheus-adapter's default)."""


@dataclass(frozen=True)
class NameMapping:
    """Series name → API metric name. ``matches`` is ``None`` when the rule has no ``name`` (identity)."""

    matches: re.Pattern[str] | None = None
    as_: str = "$0"

    def metric_name(self, series_name: str) -> str | None:
        if self.matches is None:
            return series_name
        found = self.matches.search(series_name)
        return expand(self.as_, found) if found else None


def default_as(matches: re.Pattern[str]) -> str:
    """prometheus-adapter's default for ``name.as``: ``$0`` without capture groups, ``$1`` with one."""
    if matches.groups == 0:
        return "$0"
    if matches.groups == 1:
        return "$1"
    raise ValueError(f"name.matches has {matches.groups} capture groups; say which to use with 'as'")
