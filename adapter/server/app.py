"""The FastAPI application over the adapter's parts (adapter/server/parts.py), serving the routes of
adapter/server/routes.py.

A request's way: the observe middleware (timing, access log) -> the drain -> authentication and authorisation -> the
route, which parses the path (``adapter.api``), asks the group's provider (``adapter.provider``) and writes the
group's JSON (``adapter.api``); an ``ApiError`` anywhere becomes its ``Status``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from adapter.api.status import ApiError, not_found
from adapter.auth.middleware import AuthOutcome
from adapter.server.inflight import LimitInFlight
from adapter.server.lifecycle import DrainRequests
from adapter.server.observe import ObserveRequests
from adapter.server.parts import AdapterState
from adapter.server.routes import ROUTES, json_response
from adapter.server.selfmetrics import AdapterMetrics

log = logging.getLogger("adapter.app")

__all__ = ["AdapterState", "create_app"]


def create_app(state: AdapterState, *, run_discovery: bool = True) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await state.start(run_discovery=run_discovery)
        yield
        await state.stop()

    # No trailing-slash redirects: a Kubernetes client gets a Status, never a 307 to follow. No FastAPI telemetry:
    # the adapter configures no OpenTelemetry provider (its own metrics are at /metrics), and FastAPI would look
    # for one on every request.
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None, lifespan=lifespan, redirect_slashes=False,
                  telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False})
    app.state.adapter = state
    for path, endpoint in ROUTES:
        app.add_route(path, functools.partial(endpoint, state), methods=["GET"])

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return json_response(exc.body(), exc.code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = not_found() if exc.status_code == 404 else ApiError(exc.status_code, str(exc.detail))
        return json_response(error.body(), exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return json_response(ApiError(500, f"Internal error occurred: {exc.__class__.__name__}").body(), 500)

    if state.auth is not None:
        app.add_middleware(state.auth.middleware(observe=_auth_observer(state.metrics)))
    # Inside the observation (a 429 is timed and logged), outside authentication (upstream's WithRetryAfter runs
    # before authentication too: a request turned away costs no review).
    app.add_middleware(DrainRequests, lifecycle=state.lifecycle)
    # Outside authentication too: a request counts from its head on, so unauthenticated floods queue no reviews.
    app.add_middleware(LimitInFlight, counts=state.requests)
    # Outermost middleware: keep this the LAST add_middleware call. Middleware added before it (authentication,
    # authorization) runs inside it, so requests they end with 401/403 are still timed and logged.
    app.add_middleware(ObserveRequests, metrics=state.metrics)
    return app


def _auth_observer(metrics: AdapterMetrics) -> Callable[[AuthOutcome], None]:
    def observe(outcome: AuthOutcome) -> None:
        if outcome.method == "exempt":
            return
        metrics.authentications.labels(outcome.method).inc()
        if outcome.method != "failed":
            metrics.authorizations.labels(outcome.decision, "true" if outcome.cached else "false").inc()

    return observe
