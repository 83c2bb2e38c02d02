"""Where a request's time goes inside the adapter, per step, in-process (no HTTP client or TLS in the figures).

Setup as in ``adapter_load.py``: a real Prometheus scraping one GPU series per pod, the adapter's GPU presets and a
``--standalone-objects`` index of the pods. Each request kind is timed four ways, cache off (every request
queries Prometheus over loopback):

- ``prometheus``: the same PromQL through ``PrometheusClient.query`` (what any adapter must spend);
- ``engine``: ``CustomMetrics.values`` (resolve, plan, query, merge, items), which includes that query;
- ``encode``: turning the items into the response bytes;
- ``app``: the whole ASGI app, called directly with a request scope (routing, middleware, engine, encoding).

Printed: this process' CPU time per call in microseconds (so the figures hold on a busy machine: Prometheus'
own work is in its process), and ``engine - prometheus``, the adapter's own work around the query.

``--cache`` turns the query cache on, so engine and app answer from it (what a repeated HPA request costs).

Usage: ``python bench/adapter_steps.py [--quick] [--cache] [--sizes 10,100,1500] [--profile [app:]KIND]
[--adapter-from DIR] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench")]

from adapter_load import NAMESPACE, exposition, kinds, objects_document, pod_groups  # noqa: E402
from exporter_scrape import machine_line  # noqa: E402


def _code(adapter_from: str | None) -> None:
    """Import the adapter from ``adapter_from`` (another checkout) instead of this one; the helpers stay ours."""
    sys.path.insert(0, str(Path(adapter_from).resolve()) if adapter_from else str(ROOT))
    sys.path.insert(1, str(ROOT))


async def timed(call: Callable[[], Awaitable[Any]], seconds: float) -> float:
    """This process' CPU time per call, in microseconds (Prometheus' own time, in its process, is not in it)."""
    for _ in range(20):
        await call()
    calls, end = 0, time.perf_counter() + seconds
    cpu = time.process_time()
    while time.perf_counter() < end:
        await call()
        calls += 1
    return (time.process_time() - cpu) / calls * 1e6


class AsgiCall:
    """One GET through the ASGI app, the way uvicorn calls it; the body bytes are kept to check the status."""

    def __init__(self, app: Any, path: str, query: str) -> None:
        self.app = app
        self.scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                      "scheme": "https", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
                      "root_path": "", "headers": [(b"host", b"localhost")], "client": ("127.0.0.1", 1),
                      "server": ("127.0.0.1", 443), "state": {}}
        self.status = 0

    async def __call__(self) -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]

        await self.app(dict(self.scope), receive, send)
        if self.status != 200:
            raise RuntimeError(f"{self.scope['path']}: HTTP {self.status}")


async def profile(call: Callable[[], Awaitable[Any]], calls: int = 200) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        await call()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


async def measure(args: argparse.Namespace, prom_url: str, objects_file: Path) -> list[dict[str, Any]]:
    import orjson

    from adapter.api.paths import parse_custom_path
    from adapter.api.serialise import metric_value_list
    from adapter.kube.standalone import StandaloneObjects
    from adapter.prometheus.client import PrometheusClient, PrometheusConfig
    from adapter.prometheus.discovery import Discovery
    from adapter.prometheus.querycache import QueryCache
    from adapter.provider.custom import CustomMetrics
    from adapter.provider.engine import Engine
    from adapter.rulesfile.source import RulesSource
    from adapter.server.app import AdapterState, create_app

    client = PrometheusClient(PrometheusConfig(prom_url, timeout_s=10.0))
    rules = RulesSource.load(None)
    discovery = Discovery(client, rules, interval_s=3600)
    await discovery.relist()
    cache = QueryCache(client, ttl_s=3600 if args.cache else 0)
    if args.cache:  # the cache reuses an answer for at most the scrape interval it read at relist
        cache.set_scrape_interval(3600.0)
    engine_ = Engine(cache, lambda: discovery.catalogue, StandaloneObjects(str(objects_file)))
    custom = CustomMetrics(engine_)
    app = create_app(AdapterState(client, discovery, engine_, serve_external=lambda: False), run_discovery=False)
    rows = []
    for kind in kinds(args.sizes):
        prefix = "/apis/custom.metrics.k8s.io/"
        version, _, rest = kind.path[len(prefix):].partition("/")
        path = parse_custom_path(rest)
        selector = dict(kind.params).get("labelSelector", "")
        plan = await custom.plan(path, selector)
        (promql,) = plan.plan.queries
        items = await custom.values(path, selector)

        async def prometheus(q: str = promql) -> None:
            await client.query(q)

        async def engine(p: Any = path, s: str = selector) -> None:
            await custom.values(p, s)

        async def encoded(v: str = version, i: Any = items) -> None:
            orjson.dumps(metric_value_list(v, i))

        query = "&".join(f"{k}={v}" for k, v in kind.params)
        if args.profile == kind.name:
            await profile(engine)
        elif args.profile == f"app:{kind.name}":
            await profile(AsgiCall(app, kind.path, query))
        row: dict[str, Any] = {"kind": kind.name, "items": len(items) if hasattr(items, "__len__") else None}
        for name, call in (("prometheus", prometheus), ("engine", engine), ("encode", encoded),
                           ("app", AsgiCall(app, kind.path, query))):
            row[name] = await timed(call, args.seconds)
        rows.append(row)
        print(f"... {kind.name}: " + ", ".join(f"{k} {row[k]:.0f}" for k in ("prometheus", "engine", "encode", "app")),
              flush=True)
    await client.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 s per step instead of 3")
    parser.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")], default=[10, 100, 1500])
    parser.add_argument("--adapter-from", help="import the adapter from this checkout (before/after figures; the "
                        "checkout must have this layout: adapter.provider.custom and adapter.provider.engine)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--profile", metavar="KIND",
                        help="print cProfile's top functions for this kind's engine (app:KIND: for the whole app)")
    parser.add_argument("--cache", action="store_true", help="query cache on (engine and app answer from it)")
    args = parser.parse_args(argv)
    args.seconds = 1.0 if args.quick else 3.0
    _code(args.adapter_from)
    from tests.support.metrics_endpoint import MetricsEndpoint
    from tests.support.prometheus import PrometheusServer

    cache = "cache on (engine and app answer from it)" if args.cache else "cache off"
    print(machine_line(), f"\nadapter code: {args.adapter_from or ROOT}; {cache}; CPU us per call", flush=True)
    groups = pod_groups(args.sizes)
    workdir = Path(tempfile.mkdtemp(prefix="bench-steps-"))
    objects_file = workdir / "objects.json"
    objects_file.write_text(json.dumps(objects_document(groups)))
    endpoint = MetricsEndpoint(exposition(groups))
    prom = None
    try:
        prom = PrometheusServer([endpoint.address], honor_labels=True, scrape_interval="15s").start()
        last = groups[f"a{args.sizes[-1]}"][-1]
        prom.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{NAMESPACE}",pod="{last}"}}', timeout=60)
        import uvloop  # the adapter's event loop (adapter.server.serving)

        rows = uvloop.run(measure(args, prom.url, objects_file))
    finally:
        if prom is not None:
            prom.stop()
        endpoint.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{'kind':<10}{'items':>7}{'prometheus':>12}{'engine':>9}{'engine-prom':>13}{'encode':>9}{'app':>9}")
    for r in rows:
        print(f"{r['kind']:<10}{r['items'] or '':>7}{r['prometheus']:>12.0f}{r['engine']:>9.0f}"
              f"{r['engine'] - r['prometheus']:>13.0f}{r['encode']:>9.0f}{r['app']:>9.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
