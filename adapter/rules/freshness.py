"""How old a rule's value can be, and the query that says whether the samples behind a value are recent (pure).

An instant query answers at its evaluation time whatever its selectors reach back to: ``avg_over_time(x[10m])``
keeps answering for ten minutes after ``x``'s target stopped. ``lookback_s`` reads, from a rendered query, how far
back its samples may lie: a range selector's range, a subquery's range, plus any ``offset``; ``@`` makes it
unbounded. Plain instant selectors count as 0: Prometheus marks a stopped target's series stale at its first
failed scrape, so they answer nothing from then on. Only a rule whose lookback exceeds the sample-age limit needs
``freshness_query``: the number of samples each object's series have within the limit (an object absent from its
answer has none, so its value is no value).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta

import promql_parser

_CHILDREN = ("expr", "lhs", "rhs", "param", "vector_selector")


def lookback_s(query: str) -> float:
    """Seconds before the evaluation time that ``query``'s oldest usable sample may lie (``inf`` with ``@``)."""
    return _lookback(promql_parser.parse(query))


def _seconds(delta: timedelta | None) -> float:
    return max(delta.total_seconds(), 0.0) if delta is not None else 0.0


def _lookback(node: object) -> float:
    if isinstance(node, promql_parser.VectorSelector):
        return math.inf if node.at is not None else _seconds(node.offset)
    if isinstance(node, promql_parser.MatrixSelector):
        return _seconds(node.range) + _lookback(node.vector_selector)
    if isinstance(node, promql_parser.SubqueryExpr):
        if node.at is not None:
            return math.inf
        return _seconds(node.range) + _seconds(node.offset) + _lookback(node.expr)
    children: list[object] = [getattr(node, name) for name in _CHILDREN if getattr(node, name, None) is not None]
    children.extend(getattr(node, "args", None) or ())
    return max((_lookback(child) for child in children), default=0.0)


def range_series(query: str) -> tuple[str, ...]:
    """The metric names whose samples ``query`` may take from before its evaluation time (under a range selector,
    a subquery, an ``offset`` or ``@``), in order, each once; selectors without a literal name are left out."""
    found: dict[str, None] = {}
    _collect(promql_parser.parse(query), False, found)
    return tuple(found)


def _collect(node: object, back: bool, found: dict[str, None]) -> None:
    if isinstance(node, promql_parser.VectorSelector):
        if node.name and (back or node.offset is not None or node.at is not None):
            found[node.name] = None
        return
    if isinstance(node, promql_parser.MatrixSelector):
        _collect(node.vector_selector, True, found)
        return
    back = back or isinstance(node, promql_parser.SubqueryExpr)
    children: list[object] = [getattr(node, name) for name in _CHILDREN if getattr(node, name, None) is not None]
    children.extend(getattr(node, "args", None) or ())
    for child in children:
        _collect(child, back, found)


def freshness_query(series: str, label_matchers: Sequence[str], by: Sequence[str], window_s: float) -> str:
    """Samples within ``window_s`` of the rule's series (``.Series`` with the request's ``.LabelMatchers``), per
    ``by`` (the object's labels), or per series when ``by`` is empty (external metrics)."""
    samples = f"count_over_time({series}{{{','.join(label_matchers)}}}[{max(int(window_s * 1000), 1)}ms])"
    return f"count by ({','.join(by)}) ({samples})" if by else samples


def all_fresh_query(series: Sequence[str], label_matchers: Sequence[str], by: Sequence[str], window_s: float) -> str:
    """The objects (by ``by``) whose every one of ``series`` has a sample within ``window_s``: one
    :func:`freshness_query` per series, joined with ``and`` (the same ``by`` labels on each side)."""
    return " and ".join(freshness_query(name, label_matchers, by, window_s) for name in series)
