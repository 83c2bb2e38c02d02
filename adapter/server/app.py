"""The FastAPI application: one route per API group (custom, external and resource metrics) and the server's own.

A request's way: the observe middleware (timing, access log) -> authentication and authorisation -> the route,
which parses the path (``adapter.api``), asks the group's provider (``adapter.provider``) and writes the group's JSON
(``adapter.api``); an ``ApiError`` anywhere becomes its ``Status``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from adapter.api.paths import VERSIONS, parse_custom_path, parse_external_path
from adapter.api.resource_metrics import (
    RESOURCE_GROUP,
    RESOURCE_VERSION,
    field_matches,
    metrics_list,
    node_metrics,
    parse_field_selector,
    parse_resource_path,
    pod_metrics,
    resource_list,
)
from adapter.api.serialise import (
    CUSTOM_GROUP,
    EXTERNAL_GROUP,
    api_group,
    api_resource_list,
    external_metric_value_list,
    metric_value_list,
)
from adapter.api.status import ApiError, not_found
from adapter.auth.middleware import AuthOutcome
from adapter.auth.stack import AuthStack
from adapter.prometheus.client import PrometheusClient
from adapter.prometheus.discovery import Discovery
from adapter.provider.custom import CustomMetrics
from adapter.provider.engine import Engine
from adapter.provider.explain import explain
from adapter.provider.external import ExternalMetrics
from adapter.provider.resource import ResourceMetrics
from adapter.rules.source import RulesSource
from adapter.server.lifecycle import DrainRequests, Lifecycle
from adapter.server.observe import ObserveRequests
from adapter.server.selfmetrics import CONTENT_TYPE, AdapterMetrics

log = logging.getLogger("adapter.app")


class Background(Protocol):
    """A task the app runs while it serves (e.g. the API discovery refresh)."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class AdapterState:
    client: PrometheusClient
    discovery: Discovery
    engine: Engine
    serve_external: Callable[[], bool]
    metrics: AdapterMetrics = field(default_factory=AdapterMetrics)
    rules: RulesSource | None = None  # watched for changes while serving
    auth: AuthStack | None = None  # None: --disable-auth
    on_shutdown: list[Callable[[], None]] = field(default_factory=list)
    background: list[Background] = field(default_factory=list)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # where the server is between start and exit

    def __post_init__(self) -> None:
        self.custom = CustomMetrics(self.engine)
        self.external = ExternalMetrics(self.engine)
        self.resource = ResourceMetrics(self.engine, lambda: self.rules().resource_rules if self.rules else None)


class _JSON(JSONResponse):
    """``JSONResponse`` encoded by orjson: compact UTF-8, the same bytes as the standard library's compact form
    for these documents (strings, Quantity strings, bools, dicts and lists), many times faster: with the standard
    library, encoding a large list answer costs about as much as the rest of the request."""

    def render(self, content: object) -> bytes:
        return orjson.dumps(content)


def _json(body: dict, status: int = 200) -> JSONResponse:
    return _JSON(body, status_code=status)


def create_app(state: AdapterState, *, run_discovery: bool = True) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if run_discovery:
            state.discovery.start()
        if state.rules is not None:
            state.rules.start()
        if state.auth is not None:
            await state.auth.start()
        for task in state.background:
            task.start()
        yield
        for task in state.background:
            await task.stop()
        if state.auth is not None:
            await state.auth.stop()
        if state.rules is not None:
            await state.rules.stop()
        await state.discovery.stop()
        await state.client.aclose()
        for shutdown in state.on_shutdown:
            shutdown()

    # No trailing-slash redirects: a Kubernetes client gets a Status, never a 307 to follow. No FastAPI telemetry:
    # the adapter configures no OpenTelemetry provider (its own metrics are at /metrics), and FastAPI would look
    # for one on every request.
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None, lifespan=lifespan, redirect_slashes=False,
                  telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False})
    app.state.adapter = state

    # Plain Starlette routes: the paths are Kubernetes' (``<rest:path>`` parsed by adapter.api), and every answer is
    # a Kubernetes document or Status, so FastAPI's parameter and response models have nothing to add. HEAD is
    # answered as GET without a body.
    async def custom(request: Request) -> Response:
        version, rest = request.path_params["version"], request.path_params.get("rest", "")
        if version not in VERSIONS:
            raise not_found()
        path = parse_custom_path(rest)
        if path is None:
            catalogue = state.discovery.catalogue
            metrics = catalogue.custom_metrics() if catalogue else []
            resources = [(f"{m.group_resource}/{m.name}", m.namespaced) for m in metrics]
            return _json(api_resource_list(CUSTOM_GROUP, version, resources))
        q = request.query_params
        items = await state.custom.values(path, q.get("labelSelector", ""), q.get("metricLabelSelector", ""))
        return _json(metric_value_list(version, items))

    async def external(request: Request) -> Response:
        version, rest = request.path_params["version"], request.path_params.get("rest", "")
        if version != "v1beta1" or not state.serve_external():
            raise not_found()
        target = parse_external_path(rest)
        if target is None:
            catalogue = state.discovery.catalogue
            names = catalogue.external_metrics() if catalogue else []
            return _json(api_resource_list(EXTERNAL_GROUP, version, [(n, True) for n in names]))
        namespace, metric = target
        items = await state.external.values(namespace, metric, request.query_params.get("labelSelector", ""))
        return _json(external_metric_value_list(items))

    resource_metrics = state.resource

    async def resource(request: Request) -> Response:
        """metrics.k8s.io: served only while the rules have ``resourceRules`` (else metrics-server may own it)."""
        version, rest = request.path_params["version"], request.path_params.get("rest", "")
        rules = resource_metrics.rules
        if version != RESOURCE_VERSION or rules is None:
            raise not_found()
        if not rest:
            return _json(resource_list())
        path = parse_resource_path(rest)
        if path is None:
            raise not_found()
        selector = request.query_params.get("labelSelector", "")
        try:
            fields = parse_field_selector(request.query_params.get("fieldSelector", ""))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        now = time.time()
        if path.resource == "nodes":
            nodes = await resource_metrics.nodes(path.name, selector)
            if path.name is not None:
                return _json(node_metrics(nodes[0], rules.window_s, now))
            return _json(metrics_list("NodeMetrics", [node_metrics(n, rules.window_s, now) for n in nodes
                                                      if field_matches(fields, n.name, None)]))
        pods = await resource_metrics.pods(path.namespace, path.name, selector)
        if path.name is not None:
            return _json(pod_metrics(pods[0], rules.window_s, now))
        return _json(metrics_list("PodMetrics", [pod_metrics(p, rules.window_s, now) for p in pods
                                                 if field_matches(fields, p.name, p.namespace)]))

    for group, endpoint in ((CUSTOM_GROUP, custom), (EXTERNAL_GROUP, external), (RESOURCE_GROUP, resource)):
        app.add_route(f"/apis/{group}/{{version}}", endpoint, methods=["GET"])
        app.add_route(f"/apis/{group}/{{version}}/{{rest:path}}", endpoint, methods=["GET"])

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _json(exc.body(), exc.code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = not_found() if exc.status_code == 404 else ApiError(exc.status_code, str(exc.detail))
        return _json(error.body(), exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _json(ApiError(500, f"Internal error occurred: {exc.__class__.__name__}").body(), 500)

    # The other routes are plain Starlette routes too: FastAPI's routes build a pydantic response model for each
    # endpoint at start-up (and import pydantic.v1 to check for one), memory the server does not need.
    async def live(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def ready(_: Request) -> Response:
        """Ready means "can serve the API": discovery answers (the last catalogue, or an empty one while Prometheus
        is away: metric requests then get a 503 Status) and the server is not shutting down. Before the first
        relist has finished it is not ready, so a new replica in a rolling update never answers "no such metric"
        for one that exists."""
        if state.lifecycle.shutting_down:
            return PlainTextResponse("shutting down", status_code=503)
        discovery = state.discovery
        if discovery.ready:
            return PlainTextResponse("ok")
        if discovery.answered:
            return PlainTextResponse(f"ok: no metric is listed until Prometheus answers ({discovery.waiting_reason()})")
        return PlainTextResponse(discovery.waiting_reason(), status_code=503)

    async def openapi(_: Request) -> Response:
        # The aggregator skips a 404 gracefully ("assuming the server won't provide any spec").
        raise not_found()

    async def apis(_: Request) -> Response:
        groups = [api_group(CUSTOM_GROUP, list(reversed(VERSIONS)))]
        if state.serve_external():
            groups.append(api_group(EXTERNAL_GROUP, ["v1beta1"]))
        if resource_metrics.rules is not None:
            groups.append(api_group(RESOURCE_GROUP, [RESOURCE_VERSION]))
        return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    async def custom_group(_: Request) -> Response:
        return _json(api_group(CUSTOM_GROUP, list(reversed(VERSIONS))))  # v1beta2 preferred

    async def resource_group(_: Request) -> Response:
        if resource_metrics.rules is None:
            raise not_found()
        return _json(api_group(RESOURCE_GROUP, [RESOURCE_VERSION]))

    async def self_metrics(_: Request) -> Response:
        return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)

    async def debug_explain(request: Request) -> Response:
        q = request.query_params
        return _json(await explain(state.engine, "/" + request.path_params["path"], q.get("labelSelector", ""),
                                   q.get("metricLabelSelector", ""), lambda: resource_metrics.rules))

    for path, endpoint in (("/healthz", live), ("/livez", live), ("/readyz", ready), ("/openapi/v2", openapi),
                           ("/openapi/v3", openapi), ("/apis", apis), (f"/apis/{CUSTOM_GROUP}", custom_group),
                           (f"/apis/{RESOURCE_GROUP}", resource_group), ("/metrics", self_metrics),
                           ("/debug/explain/{path:path}", debug_explain)):
        app.add_route(path, endpoint, methods=["GET"])

    if state.auth is not None:
        auth_class, auth_kwargs = state.auth.middleware(observe=_auth_observer(state.metrics))
        app.add_middleware(auth_class, **auth_kwargs)
    # Inside the observation (a 429 is timed and logged), outside authentication (upstream's WithRetryAfter runs
    # before authentication too: a request turned away costs no review).
    app.add_middleware(DrainRequests, lifecycle=state.lifecycle)
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
