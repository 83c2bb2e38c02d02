"""The KEDA external scaler under load: IsActive calls over gRPC, as KEDA's operator and metrics server make them,
against a real Prometheus on loopback, next to the same request on the adapter's HTTPS custom-metrics API.

Prints, per target: sequential latency (p50, p99) and throughput with C concurrent callers; and how many Prometheus
queries 100 identical concurrent IsActive calls cost (the engine's coalescing cache). The trigger is a Pods-style one
(``DCGM_FI_DEV_GPU_UTIL`` of 10 pods selected by ``app=bench``; of the preset's two rules only the one for the
``pod`` label has series, so one query per request). The HTTP baseline's client is ``httpx.AsyncClient`` (its own
cost is part of the figure). Goals: gRPC p99 no worse than the HTTP API's for the same request; 100 identical
concurrent calls -> 1 Prometheus query. Nothing here asserts a timing.

    python bench/keda_scaler.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc.aio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from exporter_scrape import machine_line  # noqa: E402

from adapter.keda.externalscaler import externalscaler_pb2 as pb  # noqa: E402
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc  # noqa: E402
from tests.support.adapter_metrics import metric_value  # noqa: E402
from tests.support.adapter_process import AdapterProcess  # noqa: E402
from tests.support.metrics_endpoint import MetricsEndpoint  # noqa: E402
from tests.support.prometheus import PrometheusServer, free_port  # noqa: E402

PODS = 10
METADATA = {"metric": "DCGM_FI_DEV_GPU_UTIL", "resource": "pods", "labelSelector": "app=bench", "targetValue": "60"}
HTTP_PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/*/DCGM_FI_DEV_GPU_UTIL"


def exposition() -> str:
    return "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-{i}",namespace="bench",pod="bench-{i}"}} {10 + i}\n'
                   for i in range(PODS))


async def measure(call: Callable[[], Awaitable[object]], seconds: float, concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    for _ in range(200):  # sequential latency
        started = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - started)
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call()
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    quantiles = statistics.quantiles(latencies, n=100)
    return {"p50_ms": quantiles[49] * 1000, "p99_ms": quantiles[98] * 1000,
            "per_s": done / (time.perf_counter() - started)}


async def run(adapter: AdapterProcess, port: int, seconds: float, concurrency: int) -> dict[str, object]:
    ref = pb.ScaledObjectRef(name="bench", namespace="bench", scalerMetadata=METADATA)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        assert (await stub.IsActive(ref)).result
        async with httpx.AsyncClient(base_url=adapter.url, verify=False, http2=False) as http:
            async def http_call() -> None:
                (await http.get(HTTP_PATH, params={"labelSelector": "app=bench"})).raise_for_status()

            async def grpc_call() -> None:
                await stub.IsActive(ref)

            results: dict[str, object] = {
                "http_custom_metrics": await measure(http_call, seconds, concurrency),
                "grpc_is_active": await measure(grpc_call, seconds, concurrency)}
        # The coalescing cache: 100 identical calls at once, with reuse out of the way (a new namespace label value
        # would change the query; instead wait for the reuse window of the last result to pass).
        await asyncio.sleep(1.5)
        misses = {"result": "miss"}
        before = metric_value(adapter, "gpu_adapter_query_cache_requests_total", misses) or 0.0
        await asyncio.gather(*(stub.IsActive(ref) for _ in range(100)))
        after = metric_value(adapter, "gpu_adapter_query_cache_requests_total", misses) or 0.0
        results["prometheus_queries_for_100_concurrent_calls"] = after - before
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s per measurement instead of 10")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    print(machine_line())
    endpoint = MetricsEndpoint(exposition())
    tmp = Path(tempfile.mkdtemp(prefix="keda-bench-"))
    (tmp / "objects.json").write_text(json.dumps({"pods": [
        {"namespace": "bench", "name": f"bench-{i}", "labels": {"app": "bench"}} for i in range(PODS)]}))
    prometheus = PrometheusServer([endpoint.address], job="bench").start()
    adapter = None
    try:
        prometheus.wait_for(f"count(DCGM_FI_DEV_GPU_UTIL) == {PODS}", timeout=40)
        port = free_port()
        adapter = AdapterProcess(prometheus.url, str(tmp / "certs"), [
            "--standalone-objects", str(tmp / "objects.json"), "--metrics-relist-interval", "1s",
            "--keda-scaler-port", str(port), "--keda-scaler-insecure"])
        deadline = time.monotonic() + 30
        while adapter.get(HTTP_PATH, labelSelector="app=bench").status_code != 200:
            if time.monotonic() > deadline:
                raise SystemExit("the adapter never served the metric")
            time.sleep(0.2)
        results = asyncio.run(run(adapter, port, 2.0 if args.quick else 10.0, args.concurrency))
    finally:
        if adapter is not None:
            adapter.stop()
        prometheus.stop()
        endpoint.stop()
    for name in ("http_custom_metrics", "grpc_is_active"):
        r = results[name]
        assert isinstance(r, dict)
        print(f"{name:22} p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
              f"{r['per_s']:8.0f}/s with {args.concurrency} callers")
    print(f"100 identical concurrent IsActive calls: {results['prometheus_queries_for_100_concurrent_calls']:.0f} "
          "Prometheus queries (goal: 1)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
