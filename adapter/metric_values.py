"""The custom-metrics value request, what every HPA sync asks: one function for the answer, and a direct way in.

``metric_value_list`` turns a parsed request into the response bytes; the app's route and ``MetricValueRequests``
both call it. ``MetricValueRequests`` is an ASGI middleware placed inside the observe and auth middlewares (so
these requests are timed, logged, authenticated and authorised like any other) that answers GET and HEAD
requests for metric values itself, without Starlette's exception middleware, routing, ``Request`` and
``Response`` objects, which cost about 30-45 us of CPU per request (``bench/adapter_steps.py``, app minus engine,
round 3's sixth pass). Anything else
(discovery lists, unknown versions, other methods, other groups) goes on to the app unchanged.

Errors: an ``ApiError`` is answered as its ``Status`` JSON, as the app's handler does; any other exception
propagates to the app's server-error handler (500 ``Status``), as it does from a route.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.datastructures import QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from adapter.api.paths import VERSIONS, MetricPath, parse_custom_path
from adapter.api.serialise import CUSTOM_GROUP, encode_metric_value_list
from adapter.provider import Provider
from adapter.status import ApiError

_PREFIX = f"/apis/{CUSTOM_GROUP}/"
_JSON = b"application/json"


async def metric_value_list(provider: Provider, version: str, path: MetricPath, query: Mapping[str, str]) -> bytes:
    """The ``MetricValueList`` for a metric-value path, encoded; ``ApiError`` for anything the API refuses."""
    items = await provider.custom(path, query.get("labelSelector", ""), query.get("metricLabelSelector", ""))
    return encode_metric_value_list(version, items)


class MetricValueRequests:
    def __init__(self, app: ASGIApp, provider: Provider) -> None:
        self.app = app
        self.provider = provider

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = self._metric_path(scope)
        if path is None:
            await self.app(scope, receive, send)
            return
        version, rest = path
        try:
            metric = parse_custom_path(rest)
            if metric is None:  # the version's discovery list: the app's route
                await self.app(scope, receive, send)
                return
            query = scope["query_string"]
            body = await metric_value_list(self.provider, version, metric, QueryParams(query) if query else {})
            status = 200
        except ApiError as exc:
            body, status = orjson.dumps(exc.body()), exc.code
        # The headers Starlette's Response and the app's JSON response send, in their order.
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", b"%d" % len(body)), (b"content-type", _JSON)]})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _metric_path(scope: Scope) -> tuple[str, str] | None:
        """(version, rest of the path) for a GET or HEAD under a served custom-metrics version, else None.
        Requests under a root path are left to the router, which knows how to strip it."""
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or scope.get("root_path"):
            return None
        full: str = scope["path"]
        if not full.startswith(_PREFIX):
            return None
        version, _, rest = full[len(_PREFIX):].partition("/")
        return (version, rest) if version in VERSIONS else None
