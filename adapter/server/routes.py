"""The server's routes: one per API group (custom, external and resource metrics) and the server's own, over the
adapter's parts (adapter/server/parts.py). ``ROUTES`` is the table the app registers.

Plain Starlette endpoints: the paths are Kubernetes' (``<rest:path>`` parsed by adapter.api), and every answer is a
Kubernetes document or Status, so FastAPI's parameter and response models have nothing to add (and FastAPI's
routes would build a pydantic response model for each endpoint at start-up, memory the server does not need).
HEAD is answered as GET without a body. The metric routes name their self-metrics route once they have parsed the
path (``request.state.route``, read by adapter/server/observe.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

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
from adapter.provider.explain import explain
from adapter.server.parts import AdapterState
from adapter.server.selfmetrics import CONTENT_TYPE

Endpoint = Callable[[AdapterState, Request], Awaitable[Response]]


class _JSON(JSONResponse):
    """``JSONResponse`` encoded by orjson: compact UTF-8, the same bytes as the standard library's compact form
    for these documents (strings, Quantity strings, bools, dicts and lists), many times faster: with the standard
    library, encoding a large list answer costs about as much as the rest of the request."""

    def render(self, content: object) -> bytes:
        return orjson.dumps(content)


def json_response(body: dict, status: int = 200) -> JSONResponse:
    return _JSON(body, status_code=status)


# -- the metric APIs -------------------------------------------------------------------------------------------
async def custom(state: AdapterState, request: Request) -> Response:
    version, rest = request.path_params["version"], request.path_params.get("rest", "")
    if version not in VERSIONS:
        raise not_found()
    path = parse_custom_path(rest)
    request.state.route = path.route if path is not None else "discovery"
    if path is None:
        catalogue = state.discovery.catalogue
        metrics = catalogue.custom_metrics() if catalogue else []
        resources = [(f"{m.group_resource}/{m.name}", m.namespaced) for m in metrics]
        return json_response(api_resource_list(CUSTOM_GROUP, version, resources))
    q = request.query_params
    items = await state.custom.values(path, q.get("labelSelector", ""), q.get("metricLabelSelector", ""))
    return json_response(metric_value_list(version, items))


async def external(state: AdapterState, request: Request) -> Response:
    version, rest = request.path_params["version"], request.path_params.get("rest", "")
    if version != "v1beta1" or not state.serve_external():
        raise not_found()
    target = parse_external_path(rest)
    request.state.route = "external" if target is not None else "discovery"
    if target is None:
        catalogue = state.discovery.catalogue
        names = catalogue.external_metrics() if catalogue else []
        return json_response(api_resource_list(EXTERNAL_GROUP, version, [(n, True) for n in names]))
    namespace, metric = target
    items = await state.external.values(namespace, metric, request.query_params.get("labelSelector", ""))
    return json_response(external_metric_value_list(items))


async def resource(state: AdapterState, request: Request) -> Response:
    """metrics.k8s.io: served only while the rules have ``resourceRules`` (else metrics-server may own it)."""
    version, rest = request.path_params["version"], request.path_params.get("rest", "")
    metrics = state.resource
    rules = metrics.rules
    if version != RESOURCE_VERSION or rules is None:
        raise not_found()
    if not rest:
        return json_response(resource_list())
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
        nodes = await metrics.nodes(path.name, selector)
        if path.name is not None:
            return json_response(node_metrics(nodes[0], rules.window_s, now))
        return json_response(metrics_list("NodeMetrics", [node_metrics(n, rules.window_s, now) for n in nodes
                                                          if field_matches(fields, n.name, None)]))
    pods = await metrics.pods(path.namespace, path.name, selector)
    if path.name is not None:
        return json_response(pod_metrics(pods[0], rules.window_s, now))
    return json_response(metrics_list("PodMetrics", [pod_metrics(p, rules.window_s, now) for p in pods
                                                     if field_matches(fields, p.name, p.namespace)]))


# -- the server's own ------------------------------------------------------------------------------------------
async def live(state: AdapterState, request: Request) -> Response:
    return PlainTextResponse("ok")


async def ready(state: AdapterState, request: Request) -> Response:
    """Ready means "can serve the API": discovery answers (the last catalogue, or an empty one while Prometheus
    is away: metric requests then get a 503 Status) and the server is not shutting down. Before the first relist
    has finished it is not ready, so a new replica in a rolling update never answers "no such metric" for one
    that exists."""
    if state.lifecycle.shutting_down:
        return PlainTextResponse("shutting down", status_code=503)
    discovery = state.discovery
    if discovery.ready:
        return PlainTextResponse("ok")
    if discovery.answered:
        return PlainTextResponse(f"ok: no metric is listed until Prometheus answers ({discovery.waiting_reason()})")
    return PlainTextResponse(discovery.waiting_reason(), status_code=503)


async def openapi(state: AdapterState, request: Request) -> Response:
    # The aggregator skips a 404 gracefully ("assuming the server won't provide any spec").
    raise not_found()


async def apis(state: AdapterState, request: Request) -> Response:
    groups = [api_group(CUSTOM_GROUP, list(reversed(VERSIONS)))]
    if state.serve_external():
        groups.append(api_group(EXTERNAL_GROUP, ["v1beta1"]))
    if state.resource.rules is not None:
        groups.append(api_group(RESOURCE_GROUP, [RESOURCE_VERSION]))
    return json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})


async def custom_group(state: AdapterState, request: Request) -> Response:
    return json_response(api_group(CUSTOM_GROUP, list(reversed(VERSIONS))))  # v1beta2 preferred


async def resource_group(state: AdapterState, request: Request) -> Response:
    if state.resource.rules is None:
        raise not_found()
    return json_response(api_group(RESOURCE_GROUP, [RESOURCE_VERSION]))


async def self_metrics(state: AdapterState, request: Request) -> Response:
    return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)


async def debug_explain(state: AdapterState, request: Request) -> Response:
    q = request.query_params
    return json_response(await explain(state.engine, "/" + request.path_params["path"], q.get("labelSelector", ""),
                                       q.get("metricLabelSelector", ""), lambda: state.resource.rules))


ROUTES: tuple[tuple[str, Endpoint], ...] = (
    *((f"/apis/{group}/{{version}}{rest}", endpoint)
      for group, endpoint in ((CUSTOM_GROUP, custom), (EXTERNAL_GROUP, external), (RESOURCE_GROUP, resource))
      for rest in ("", "/{rest:path}")),
    ("/healthz", live), ("/livez", live), ("/readyz", ready), ("/openapi/v2", openapi), ("/openapi/v3", openapi),
    ("/apis", apis), (f"/apis/{CUSTOM_GROUP}", custom_group), (f"/apis/{RESOURCE_GROUP}", resource_group),
    ("/metrics", self_metrics), ("/debug/explain/{path:path}", debug_explain),
)
"""(path, endpoint): every route, GET only."""
