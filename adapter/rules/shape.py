"""PromQL shape checks with promql_parser: a rendered query must parse; a seriesQuery must be a plain selector."""

from __future__ import annotations

import promql_parser

from adapter.rules.errors import QueryError


def check_query(query: str) -> promql_parser.Expr:
    """Parse ``query``; ``QueryError`` if it is empty or not valid PromQL."""
    if not query.strip():
        raise QueryError("the query is empty")
    try:
        return promql_parser.parse(query)
    except ValueError as exc:
        raise QueryError(f"not valid PromQL ({exc}): {query}") from None


def check_series_selector(selector: str) -> promql_parser.VectorSelector:
    """What Prometheus accepts as ``match[]`` on ``/api/v1/series``: a vector selector, no offset or ``@``."""
    try:
        expr = promql_parser.parse(selector)
    except ValueError as exc:
        raise ValueError(f"not a valid series selector: {exc}") from None
    if not isinstance(expr, promql_parser.VectorSelector) or expr.offset is not None or expr.at is not None:
        raise ValueError(f"must be a plain series selector such as 'metric{{label!=\"\"}}', not {selector!r}")
    return expr
