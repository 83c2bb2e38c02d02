"""Range data for the plot from Prometheus (prometheus-api-client)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

__all__ = ["PromRangeError", "per_second"]


class PromRangeError(RuntimeError):
    pass


def per_second(url: str, query: str, start: float, seconds: int) -> tuple[dict[int, float], int]:
    """``query`` over ``[start, start + seconds]`` (unix time) at a 1 s step: the value for each second offset
    (the mean when the query returns several series) and how many series it returned."""
    from prometheus_api_client import PrometheusApiClientException, PrometheusConnect  # the loadtest extra
    from requests import RequestException

    prom = PrometheusConnect(url=url, disable_ssl=not url.startswith("https"))
    try:
        result = prom.custom_query_range(query, start_time=datetime.fromtimestamp(start, UTC),
                                         end_time=datetime.fromtimestamp(start + seconds, UTC), step="1s")
    except (PrometheusApiClientException, RequestException) as exc:
        raise PromRangeError(f"Prometheus range query {query!r} failed: {exc}") from None
    by_second: dict[int, list[float]] = {}
    for series in result:
        for timestamp, text in series.get("values", []):
            value = float(text)
            offset = math.floor(float(timestamp) - start)
            if 0 <= offset < seconds and math.isfinite(value):
                by_second.setdefault(offset, []).append(value)
    return {k: sum(v) / len(v) for k, v in by_second.items()}, len(result)
