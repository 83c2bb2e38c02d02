"""What the property tests share: hostile text and a parse of ``up{...}`` back into its matchers."""

from __future__ import annotations

import promql_parser
from hypothesis import strategies as st

# MatchOp values are not hashable, so look them up by equality.
OPS = [
    (promql_parser.MatchOp.Equal, "="),
    (promql_parser.MatchOp.NotEqual, "!="),
    (promql_parser.MatchOp.Re, "=~"),
    (promql_parser.MatchOp.NotRe, "!~"),
]
# Characters that mean something to PromQL strings or to regexes, mixed into otherwise arbitrary text.
SPECIALS = list("\\.+*?()|[]{}^$\"'`\n\r\t\x00 ,=!~#}\ufffd")


def hostile_text(max_size: int) -> st.SearchStrategy[str]:
    return st.text(st.one_of(st.sampled_from(SPECIALS), st.characters(codec="utf-8")), max_size=max_size)


def parsed_matchers(body: str) -> list[tuple[str, str, str]]:
    """``(name, op, value)`` of every matcher in ``up{body}``; the selector must have no ``or`` groups."""
    expr = promql_parser.parse("up{" + body + "}")
    assert isinstance(expr, promql_parser.VectorSelector)
    assert expr.name == "up"
    assert not expr.matchers.or_matchers
    return [(m.name, next(s for op, s in OPS if op == m.op), m.value) for m in expr.matchers.matchers]
