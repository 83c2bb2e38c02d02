"""Per-request observation: the latency histogram by route and code, and the access log line (``--v`` >= 2).

A plain ASGI middleware (not ``BaseHTTPMiddleware``, which would buffer and re-wrap every response). It must be
the outermost middleware, so that requests an inner one ends early (401/403 from authentication) are timed
and logged too; that middleware may put the authenticated user's name in ``scope["state"]["user"]``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapter.api.paths import parse_custom_path, parse_external_path
from adapter.api.serialise import CUSTOM_GROUP, EXTERNAL_GROUP
from adapter.api.status import ApiError
from adapter.server.selfmetrics import AdapterMetrics

access_log = logging.getLogger("adapter.access")

_HEALTH = frozenset({"/healthz", "/livez", "/readyz"})


def route_of(path: str) -> str:
    """One of ``selfmetrics.ROUTES`` for a request path: a small fixed set, never the path itself. The metric routes
    name their route themselves once they have parsed the path (``request.state.route``); this reads the path only for
    the requests that ended before a route did (refused by authentication or the drain, no such route)."""
    if path in _HEALTH:
        return "health"
    if path == "/metrics":
        return "metrics"
    if path.startswith("/debug/explain/"):
        return "explain"
    parts = [p for p in path.split("/") if p]
    if parts == ["apis"]:
        return "apis"
    if len(parts) < 2 or parts[0] != "apis" or parts[1] not in (CUSTOM_GROUP, EXTERNAL_GROUP):
        return "other"
    if len(parts) <= 3:
        return "discovery"
    rest = "/".join(parts[3:])
    try:
        if parts[1] == EXTERNAL_GROUP:
            return "external" if parse_external_path(rest) else "discovery"
        metric = parse_custom_path(rest)
    except ApiError:
        return "other"
    return metric.route if metric is not None else "discovery"


def _state(scope: Scope) -> dict[str, Any]:
    state = scope.get("state")
    return state if isinstance(state, dict) else {}


def _user(scope: Scope) -> str | None:
    user: Any = _state(scope).get("user")
    if user is None:
        return None
    return user if isinstance(user, str) else str(getattr(user, "name", user))


class ObserveRequests:
    def __init__(self, app: ASGIApp, metrics: AdapterMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        code = 500  # what the server error handler answers if the app raises before responding

        async def send_observed(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        finally:
            seconds = time.perf_counter() - started
            path = scope.get("path", "")
            route = _state(scope).get("route") or route_of(path)
            self.metrics.observe_request(route, code, seconds)
            if access_log.isEnabledFor(logging.INFO):
                access_log.info("request", extra={
                    "method": scope.get("method", ""), "path": path, "route": route, "code": code,
                    "duration_ms": round(seconds * 1000, 3), "user": _user(scope)})
