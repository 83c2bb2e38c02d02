"""Load benchmark for ``gpu-adapter``: HPA-shaped clients over HTTPS, against a real Prometheus on loopback.

Setup (everything real, on loopback): a static exposition endpoint with one GPU series per pod (``honor_labels``),
a Prometheus scraping it, and the adapter (``--disable-auth``, built-in GPU presets) with ``--standalone-objects``
listing the pods, so the 10-, 100- and 1,500-pod label selectors resolve without a Kubernetes API.

Request kinds: ``object`` (the EKS guide's Object metric, ``services/dcgm-exporter/DCGM_FI_DEV_GPU_UTIL_AVG``)
and ``podsN`` (``pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app=aN``, N pods). One client: httpx.AsyncClient,
HTTP/1.1 keep-alive, ``N`` connections each running requests back to back (closed loop). Printed, each with its
baseline measured in the same run (timings are never asserted):

1. latency per kind at HPA-like concurrency (the HPA controller runs 5 syncs at a time by default): the adapter
   with ``--query-cache-ttl 0`` (coalescing only) and with the cache on, against the same client POSTing the
   exact PromQL the adapter renders (read from its ``/debug/explain``) to Prometheus' ``/api/v1/query``;
   overhead = adapter - Prometheus at p50 and p99 (goal: a one-pod request, cache off, at one connection, p50
   overhead <= 1.5 ms). The targets take turns, so a slow moment of the machine falls on all of them: request by request
   at one connection, in slices of the window (``--latency-slices``) at more. A second
   baseline, ``relay``, is the least any Python process in between can cost here: a minimal asyncio server (uvloop,
   the adapter's TLS context) that forwards the same PromQL to Prometheus over a kept-alive connection, reads the
   answer without decoding it and replies with the adapter's pre-encoded document;
2. throughput of the request mix at ``--clients`` connections, against a bare uvicorn + FastAPI app with the
   adapter's TLS context and protocol class (``adapter.server.serving``) answering each path with the same JSON
   document the adapter answered: ``bare`` serialises it per request with orjson (the adapter's encoder),
   ``bare_stdlib`` with FastAPI's default ``JSONResponse`` (the standard library's json), ``bare_bytes`` sends it
   pre-encoded (the floor);
3. ``--burst`` identical concurrent requests on warm connections: how many Prometheus queries they caused
   (the adapter's cache counters and Prometheus' own ``/api/v1/query`` request counter; goal: 1);
4. adapter memory: RSS after start-up (ready and, with ``--kube-pods N``, its pod watch cache synced), after the
   run and the peak (``VmHWM``), next to a fresh interpreter that only imported the server's modules (goal:
   <= 112 MiB after start-up with the presets and a 5,000-pod watch cache). ``--kube-pods N`` resolves the selectors
   through a fake Kubernetes API on loopback holding the bench's pods plus fillers up to N, instead of
   ``--standalone-objects``.

``--kind podmetrics`` measures ``metrics.k8s.io`` instead: ``PodMetrics`` of a namespace of ``--podmetrics-pods``
(1,500) pods with cAdvisor-shaped cpu and memory series (two containers each), served from ``resourceRules`` by
the adapter (cache off and on) at 1 and 5 clients and at ``--clients``, against Prometheus answering the same two
PromQL queries (each request is both queries, sent concurrently, as the adapter sends them).

Usage: ``python bench/adapter_load.py [--quick] [--kind podmetrics] [--kube-pods 5000] [--clients 32] [--duration-s 10]
[--profile DIR] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from exporter_scrape import exit_on_sigterm, finish, machine_line, pct  # noqa: E402
from pyspy import Recording, top_frames  # noqa: E402
from rss import import_only_rss, kube_with_pods, rss_of, warm_pod_cache  # noqa: E402

from tests.support.adapter_process import AdapterProcess  # noqa: E402
from tests.support.metrics_endpoint import MetricsEndpoint  # noqa: E402
from tests.support.prometheus import PrometheusServer, free_port  # noqa: E402
from tests.support.resource_rules import resource_rules_yaml  # noqa: E402

GOALS = ("goals: adapter CPU per request, the mix at 32 connections, cache off (adapter_ttl0) <= 0.3 ms; a one-pod "
         "request, cache off, 1 connection: p50 overhead over the same PromQL sent to Prometheus <= 1.5 ms; RSS after "
         "start-up <= 112 MiB (presets, 5,000-pod watch cache); 100 identical concurrent "
         "requests -> 1 Prometheus query")
NAMESPACE = "bench"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
OBJECT_PATH = f"{CUSTOM}/namespaces/{NAMESPACE}/services/dcgm-exporter/DCGM_FI_DEV_GPU_UTIL_AVG"
PODS_PATH = f"{CUSTOM}/namespaces/{NAMESPACE}/pods/*/DCGM_FI_DEV_GPU_UTIL"
MIB = 1024 * 1024
TARGETS = ("bare_stdlib", "bare", "bare_bytes", "adapter_ttl0", "adapter_cache", "prometheus")
BARE_MODES = {"bare_stdlib": "json", "bare": "orjson", "bare_bytes": "bytes"}

BARE_SERVER = r"""
import json, sys
import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from adapter.server.serving import server_context, uvicorn_config

cert, key, port, bodies_file, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
BODIES = json.load(open(bodies_file))
ENCODED = {k: JSONResponse(v).body for k, v in BODIES.items()}
app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

@app.get("/healthz")
async def healthz():
    return "ok"

@app.get("/apis/custom.metrics.k8s.io/v1beta2/{rest:path}")
async def answer(request: Request, rest: str):
    key = request.scope["path"] + "?" + request.scope["query_string"].decode()
    if mode == "bytes":  # the floor: nothing serialised per request
        return Response(ENCODED[key], media_type="application/json")
    if mode == "orjson":  # the adapter's encoder
        return Response(orjson.dumps(BODIES[key]), media_type="application/json")
    return JSONResponse(BODIES[key])  # FastAPI's default: the standard library's json

ctx = server_context(cert, key, None, request_client_certs=False)
uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, ctx, log_config=None)).run()
"""


RELAY_SERVER = r"""
import asyncio, json, sys
import uvloop
sys.path[:0] = ["bench", "."]
from adapter_load import RawClient
from adapter.server.serving import server_context

cert, key, port, routes_file, prometheus = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
ROUTES = json.load(open(routes_file))  # "path?query" -> {"form": the Prometheus query form, "reply": JSON text}


def reply(status, body):
    return b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % (
        status, len(body)) + body


REPLIES = {k: reply(200, v["reply"].encode()) for k, v in ROUTES.items()}


async def serve(reader, writer):
    upstream = RawClient(prometheus, 1)  # one kept-alive connection to Prometheus per client connection
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            target = head.split(b" ", 2)[1].decode()
            route = ROUTES.get(target)
            if route is None:
                writer.write(reply(200, b"ok"))
                continue
            status = await upstream.request("POST", "/api/v1/query", route["form"])
            writer.write(REPLIES[target] if status == 200 else reply(503, b"{}"))
    finally:
        writer.close()
        await upstream.aclose()


async def main():
    ctx = server_context(cert, key, None, request_client_certs=False)
    server = await asyncio.start_server(serve, "127.0.0.1", port, ssl=ctx)
    async with server:
        await server.serve_forever()

uvloop.run(main())
"""


# -- the data Prometheus holds ---------------------------------------------------------------------------------
def pod_groups(sizes: list[int]) -> dict[str, list[str]]:
    """``{"a10": ["a10-0", ...], ...}``: one label value (``app``) per selector size."""
    return {f"a{n}": [f"a{n}-{i}" for i in range(n)] for n in sizes}


def exposition(groups: dict[str, list[str]]) -> str:
    """One DCGM-shaped GPU utilisation series per pod (8 GPUs per node), scraped with honor_labels."""
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    rng = random.Random(7)
    k = 0
    for pods in groups.values():
        for pod in pods:
            node, gpu = divmod(k, 8)
            lines.append(
                f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-{k:08x}-0000-4000-8000-000000000000",'
                f'pci_bus_id="00000000:{0x10 + gpu:02X}:00.0",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
                f'Hostname="node-{node}",DCGM_FI_DRIVER_VERSION="550.54.15",container="main",'
                f'namespace="{NAMESPACE}",pod="{pod}",service="dcgm-exporter"}} {rng.randint(5, 95)}')
            k += 1
    return "\n".join(lines) + "\n"


def objects_document(groups: dict[str, list[str]]) -> dict[str, Any]:
    return {"pods": [{"namespace": NAMESPACE, "name": pod, "labels": {"app": app}}
                     for app, pods in groups.items() for pod in pods]}


@dataclass(frozen=True)
class Kind:
    name: str
    path: str
    params: tuple[tuple[str, str], ...] = ()

    @property
    def url(self) -> str:
        """Path and query exactly as sent (the bare server's lookup key)."""
        return self.path + "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in self.params)


def kinds(sizes: list[int]) -> list[Kind]:
    return [Kind("object", OBJECT_PATH)] + [Kind(f"pods{n}", PODS_PATH, (("labelSelector", f"app=a{n}"),))
                                              for n in sizes]


# -- the client ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One request the client repeats: a kind name, a method, a URL and an optional form body."""

    kind: str
    method: str
    url: str
    form: dict[str, str] | None = None


@dataclass
class Run:
    target: str
    clients: int
    window_s: float
    lat: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return sum(len(v) for v in self.lat.values())

    def record(self, kind: str, status: int | str, seconds: float) -> None:
        if status == 200:
            self.lat[kind].append(seconds * 1000.0)
        else:
            self.errors[f"{kind}:{status}"] += 1

    @property
    def rate(self) -> float:
        return self.n / self.window_s

    def all_ms(self) -> list[float]:
        return [x for v in self.lat.values() for x in v]


def schedule(calls: dict[str, Call], weights: dict[str, int], seed: int = 1) -> list[Call]:
    """A fixed shuffled sequence holding each call ``weight`` times; workers walk it from different offsets."""
    seq = [calls[k] for k, w in weights.items() for _ in range(w)]
    random.Random(seed).shuffle(seq)
    return seq


def cpu_of(procs: dict[str, psutil.Process]) -> dict[str, float]:
    out = {}
    for name, proc in procs.items():
        t = proc.cpu_times()
        out[name] = t.user + t.system + t.children_user + t.children_system
    return out


async def timed_request(client: Client, call: Call) -> tuple[int | str, float, float]:
    """The status (or the error's name) and when the request started and ended."""
    t0 = time.perf_counter()
    try:
        status: int | str = await client.request(call.method, call.url, call.form)
    except (httpx.HTTPError, OSError, asyncio.IncompleteReadError) as exc:
        status = type(exc).__name__
    return status, t0, time.perf_counter()


async def drive(client: Client, seq: list[Call], clients: int, warmup_s: float, window_s: float,
                target: str, procs: dict[str, psutil.Process] | None = None) -> Run:
    """``clients`` workers back to back over one pooled client; requests completing inside the window count."""
    run = Run(target, clients, window_s)
    t_start = time.perf_counter()
    w0 = t_start + warmup_s
    w1 = w0 + window_s
    cpu0: dict[str, float] = {}

    async def worker(i: int) -> None:
        k = (i * len(seq)) // clients
        while True:
            call = seq[k % len(seq)]
            k += 1
            if time.perf_counter() >= w1:
                return
            status, t0, t1 = await timed_request(client, call)
            if t0 >= w0 and t1 <= w1:
                run.record(call.kind, status, t1 - t0)

    async def cpu_marks() -> None:
        if procs:
            await asyncio.sleep(max(0.0, w0 - time.perf_counter()))
            cpu0.update(cpu_of(procs))
            await asyncio.sleep(max(0.0, w1 - time.perf_counter()))
            cpu1 = cpu_of(procs)
            run.cpu_s = {k: cpu1[k] - cpu0[k] for k in procs}

    await asyncio.gather(cpu_marks(), *(worker(i) for i in range(clients)))
    return run


class RawClient:
    """A minimal HTTP/1.1 keep-alive client over asyncio streams: one connection per concurrent caller, pre-encoded
    requests, responses read by Content-Length or chunks and never decoded. Much cheaper per request than httpx,
    so on a small machine the client takes less CPU from the servers it measures."""

    def __init__(self, base_url: str, clients: int) -> None:
        scheme, _, rest = base_url.partition("://")
        host, _, port = rest.partition(":")
        self.host, self.port = host, int(port or (443 if scheme == "https" else 80))
        self.ssl: ssl.SSLContext | None = None
        if scheme == "https":
            self.ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self.ssl.check_hostname = False
            self.ssl.verify_mode = ssl.CERT_NONE
            self.ssl.set_alpn_protocols(["http/1.1"])
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._encoded: dict[tuple[str, str, str], bytes] = {}
        self._all: list[asyncio.StreamWriter] = []

    def _encode(self, method: str, url: str, form: dict[str, str] | None) -> bytes:
        key = (method, url, json.dumps(form, sort_keys=True) if form else "")
        found = self._encoded.get(key)
        if found is None:
            body = urlencode(form).encode() if form else b""
            head = f"{method} {url} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAccept: */*\r\n"
            if form:
                head += f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n"
            found = self._encoded[key] = head.encode() + b"\r\n" + body
        return found

    async def request(self, method: str, url: str, data: dict[str, str] | None = None) -> int:
        conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = await asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=1 << 20)
            self._all.append(conn[1])
        reader, writer = conn
        writer.write(self._encode(method, url, data))
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        i = lower.find(b"\r\ncontent-length:")
        if i >= 0:
            await reader.readexactly(int(lower[i + 17:lower.index(b"\r\n", i + 2)]))
        elif b"\r\ntransfer-encoding: chunked" in lower:
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            raise RuntimeError(f"response without a length: {head[:200]!r}")
        if b"\r\nconnection: close" in lower:
            writer.close()
        else:
            self._idle.append(conn)
        return status

    async def aclose(self) -> None:
        for writer in self._all:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class HttpxClient:
    """httpx.AsyncClient (HTTP/1.1, pooled keep-alive) behind the same ``request`` as :class:`RawClient`."""

    def __init__(self, base_url: str, clients: int) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, verify=False, timeout=30.0, trust_env=False,
            limits=httpx.Limits(max_connections=clients, max_keepalive_connections=clients))

    async def request(self, method: str, url: str, data: dict[str, str] | None = None) -> int:
        r = await self._http.request(method, url, data=data) if data else await self._http.request(method, url)
        await r.aread()
        return r.status_code

    async def aclose(self) -> None:
        await self._http.aclose()


Client = RawClient | HttpxClient
CLIENTS: dict[str, type[RawClient] | type[HttpxClient]] = {"raw": RawClient, "httpx": HttpxClient}


async def run_load(kind: str, base_url: str, seq: list[Call], clients: int, warmup_s: float, window_s: float,
                   target: str, procs: dict[str, psutil.Process] | None = None) -> Run:
    client = CLIENTS[kind](base_url, clients)
    try:
        return await drive(client, seq, clients, warmup_s, window_s, target, procs)
    finally:
        await client.aclose()


async def interleaved(args: argparse.Namespace, targets: list[tuple[str, str, Call]], clients: int) -> dict[str, Run]:
    """The targets take turns on connections kept warm, so that a stall of Prometheus or of the host (the other
    process' GC, a scrape, a compaction) falls on all of them alike, not on whichever ran in the unlucky moment, and
    the p99 overheads compare like with like. Each target's ``--latency-s`` window is cut into ``--latency-slices``
    slices taken in turns; with ``--latency-turns request`` and one client, the turns are one request each, the
    order rotating every round (the host's slow spells can last a second, longer than a slice, but every process
    then waits cold between its requests, as it does under HPAs that ask every 15 s)."""
    pool = {name: CLIENTS[args.client](base, clients) for name, base, _ in targets}
    runs = {name: Run(name, clients, 0.0) for name, _, _ in targets}
    try:
        for name, _, call in targets:
            await drive(pool[name], [call], clients, args.warmup_s, 0.0, name)  # connections up, caches warm
        if clients == 1 and args.latency_turns == "request":
            await request_turns(pool, targets, args.latency_s * len(targets), runs)
            return runs
        for turn in range(args.latency_slices):
            for name, _, call in targets[turn % len(targets):] + targets[:turn % len(targets)]:
                part = await drive(pool[name], [call], clients, 0.05, args.latency_s / args.latency_slices, name)
                run = runs[name]
                run.window_s += part.window_s
                run.errors.update(part.errors)
                for kind_name, values in part.lat.items():
                    run.lat[kind_name].extend(values)
    finally:
        for client in pool.values():
            await client.aclose()
    return runs


async def request_turns(pool: dict[str, Client], targets: list[tuple[str, str, Call]], window_s: float,
                        runs: dict[str, Run]) -> None:
    """One request to each target in turn for ``window_s`` seconds; each run's window is its share of the time."""
    end = time.perf_counter() + window_s
    turn = 0
    while time.perf_counter() < end:
        for name, _, call in targets[turn % len(targets):] + targets[:turn % len(targets)]:
            status, t0, t1 = await timed_request(pool[name], call)
            runs[name].window_s += t1 - t0
            runs[name].record(call.kind, status, t1 - t0)
        turn += 1


# -- counters --------------------------------------------------------------------------------------------------
def counter(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``, in exposition ``text``."""
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(?:{{(.*)}})? (\S+)", re.M)
    for m in pattern.finditer(text):
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


@dataclass
class QueryCounts:
    misses: float
    coalesced: float
    hits: float
    prom_queries: float

    @property
    def answered(self) -> float:
        return self.misses + self.coalesced + self.hits


def query_counts(adapter: AdapterProcess, prom_url: str) -> QueryCounts:
    text = adapter.get("/metrics").text
    prom = httpx.get(prom_url + "/metrics", timeout=10.0).text
    return QueryCounts(counter(text, "gpu_adapter_query_cache_requests_total", result="miss"),
                       counter(text, "gpu_adapter_query_cache_requests_total", result="coalesced"),
                       counter(text, "gpu_adapter_query_cache_requests_total", result="hit"),
                       counter(prom, "prometheus_http_requests_total", handler="/api/v1/query"))


async def burst(adapter: AdapterProcess, prom_url: str, n: int, tag: str) -> dict[str, Any]:
    """``n`` identical requests at once on ``n`` warm connections; a fresh query (its own metricLabelSelector)."""
    client = RawClient(adapter.url, n)
    try:
        await asyncio.gather(*(client.request("GET", "/healthz") for _ in range(n)))  # n keep-alive connections
        before = query_counts(adapter, prom_url)
        url = Kind("burst", PODS_PATH, (("labelSelector", "app=a10"), ("metricLabelSelector", f"gpu!=burst-{tag}"))).url
        t0 = time.perf_counter()
        # Every request is written before any answer is read: they reach the adapter together.
        replies = await asyncio.gather(*(client.request("GET", url) for _ in range(n)))
        wall = time.perf_counter() - t0
    finally:
        await client.aclose()
    after = query_counts(adapter, prom_url)
    codes = collections.Counter(replies)
    return {"requests": n, "codes": dict(codes), "wall_ms": wall * 1000.0,
            "adapter_misses": after.misses - before.misses, "adapter_coalesced": after.coalesced - before.coalesced,
            "adapter_hits": after.hits - before.hits,
            # Prometheus counts /api/v1/query requests when they finish; the adapter's /metrics scrape is not one.
            "prometheus_queries": after.prom_queries - before.prom_queries}


# -- profiling -------------------------------------------------------------------------------------------------
class Profiler:
    """``py-spy record`` on the adapter for one phase: the collapsed stacks, read back as top frames."""

    def __init__(self, out_dir: Path, name: str, pid: int, seconds: float) -> None:
        self.recording = Recording(out_dir / f"{name}.txt", pid, seconds, rate=250)

    def finish(self) -> dict[str, list[tuple[str, float]]]:
        raw = self.recording.finish(timeout=30)
        return top_frames(raw) if raw is not None else {}


# -- the benchmark ---------------------------------------------------------------------------------------------
@dataclass
class Setup:
    endpoint: MetricsEndpoint
    prom: PrometheusServer
    workdir: Path
    objects_file: Path
    kubeconfig: str | None = None  # --kube-pods: selectors resolved by the fake Kubernetes API's watch cache
    adapters: dict[str, AdapterProcess] = field(default_factory=dict)
    bare: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def stop(self) -> None:
        for adapter in self.adapters.values():
            adapter.stop()
        for proc in self.bare.values():
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
                if proc.poll() is None:
                    proc.kill()
        self.prom.stop()
        self.endpoint.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_adapter(setup: Setup, name: str, cache_ttl: str) -> AdapterProcess:
    objects = ["--kubeconfig", setup.kubeconfig] if setup.kubeconfig else ["--standalone-objects",
                                                                            str(setup.objects_file)]
    adapter = AdapterProcess(setup.prom.url, str(setup.workdir / "certs"), args=[
        *objects, "--query-cache-ttl", cache_ttl,
        "--metrics-relist-interval", "1m", "--prometheus-timeout", "10s"], ready_timeout=60.0)
    setup.adapters[name] = adapter
    return adapter


def start_bare(setup: Setup, bodies: dict[str, Any], target: str) -> str:
    """A bare endpoint (``BARE_MODES``): FastAPI answering each path with the adapter's document."""
    bodies_file = setup.workdir / "bodies.json"
    bodies_file.write_text(json.dumps(bodies))
    return start_server(setup, target, BARE_SERVER, [str(bodies_file), BARE_MODES[target]])


def start_relay(setup: Setup, bodies: dict[str, Any], forms: dict[str, dict[str, str]]) -> str:
    """The relay baseline: each path's PromQL forwarded to Prometheus, the adapter's document sent back."""
    routes_file = setup.workdir / "routes.json"
    routes_file.write_text(json.dumps({url: {"form": forms[url], "reply": json.dumps(body, separators=(",", ":"))}
                                       for url, body in bodies.items()}))
    return start_server(setup, "relay", RELAY_SERVER, [str(routes_file), setup.prom.url])


def start_server(setup: Setup, name: str, script: str, args: list[str]) -> str:
    port = free_port()
    cert_dir = setup.workdir / "certs"
    proc = setup.bare[name] = subprocess.Popen(
        [sys.executable, "-c", script, str(cert_dir / "apiserver.crt"), str(cert_dir / "apiserver.key"),
         str(port), *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"https://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} server exited: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/healthz", verify=False, timeout=1.0).status_code == 200:
                return url
        time.sleep(0.1)
    raise RuntimeError(f"{name} server not ready")


def wait_series(prom: PrometheusServer, expected: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    got = 0.0
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            result = prom.query("count(DCGM_FI_DEV_GPU_UTIL)")
            got = float(result[0]["value"][1]) if result else 0.0
            if got >= expected:
                return
        time.sleep(0.25)
    raise RuntimeError(f"Prometheus holds {got:.0f} of {expected} series after {timeout_s:g}s")


def promql_for(adapter: AdapterProcess, kind: Kind) -> list[str]:
    r = adapter.client.get("/debug/explain" + kind.path, params=dict(kind.params))
    r.raise_for_status()
    return [rule["promql"] for rule in r.json()["rules"]]


def summarize(run: Run) -> dict[str, Any]:
    out: dict[str, Any] = {"target": run.target, "clients": run.clients, "n": run.n, "rps": run.rate,
                           "errors": dict(run.errors)}
    lat = run.all_ms()
    if lat:
        out |= {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": max(lat)}
    out["by_kind"] = {k: {"n": len(v), "p50_ms": pct(v, 50), "p99_ms": pct(v, 99)} for k, v in run.lat.items() if v}
    out["cpu_ms_per_request"] = {k: 1000.0 * v / run.n for k, v in run.cpu_s.items()} if run.n else {}
    return out


def fmt(x: float | None, spec: str = "{:.2f}") -> str:
    return "-" if x is None else spec.format(x)


def table(title: str, head: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


def parse_weights(text: str) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        name, _, w = part.partition(":")
        out[name.strip()] = int(w or 1)
    return out


async def bench(args: argparse.Namespace, setup: Setup) -> dict[str, Any]:
    sizes = args.sizes
    all_kinds = kinds(sizes)
    weights = parse_weights(args.mix)
    unknown = set(weights) - {k.name for k in all_kinds}
    if unknown:
        raise SystemExit(f"--mix names unknown kinds {sorted(unknown)}; known: {[k.name for k in all_kinds]}")
    prom_proc = psutil.Process(setup.prom.pid)
    result: dict[str, Any] = {}

    adapters = {"ttl0": start_adapter(setup, "ttl0", "0"), "cache": start_adapter(setup, "cache", "5s")}
    for a in adapters.values():  # the cached adapter needs the scrape interval (read at relist) to reuse results
        a.get("/readyz").raise_for_status()
        if setup.kubeconfig:
            warm_pod_cache(a.client, "DCGM_FI_DEV_GPU_UTIL", NAMESPACE)
    result["memory"] = {name: {"start": rss_of(a.proc.pid)["rss"]} for name, a in adapters.items()}
    procs = {"adapter": psutil.Process(adapters["ttl0"].proc.pid), "prometheus": prom_proc}

    # The exact PromQL per kind, and the documents the bare server will answer with.
    promql: dict[str, str] = {}
    bodies: dict[str, Any] = {}
    for kind in all_kinds:
        queries = promql_for(adapters["ttl0"], kind)
        if len(queries) != 1:
            raise RuntimeError(f"{kind.name}: expected one rule to answer, got {queries}")
        promql[kind.name] = queries[0]
        r = adapters["ttl0"].client.get(kind.url)
        r.raise_for_status()
        bodies[kind.url] = r.json()
        result.setdefault("kinds", {})[kind.name] = {
            "url": kind.url, "promql_bytes": len(queries[0]), "items": len(r.json()["items"]),
            "body_bytes": len(r.content)}
    server_timeout = f"{(10 * 900)}ms"  # what the adapter sends with --prometheus-timeout 10s
    adapter_calls = {k.name: Call(k.name, "GET", k.url) for k in all_kinds}
    prom_calls = {k.name: Call(k.name, "POST", "/api/v1/query", {"query": promql[k.name], "timeout": server_timeout})
                  for k in all_kinds}
    relay_url = start_relay(setup, bodies, {k.url: prom_calls[k.name].form or {} for k in all_kinds})

    # 1. latency per kind: Prometheus direct, adapter without reuse, adapter with the cache; interleaved.
    lat_rows: list[dict[str, Any]] = []
    for clients in args.latency_clients if "latency" in args.phases else []:
        for kind in all_kinds:
            row: dict[str, Any] = {"kind": kind.name, "clients": clients}
            targets = [("prometheus", setup.prom.url, prom_calls[kind.name]),
                       ("relay", relay_url, adapter_calls[kind.name]),
                       ("adapter_ttl0", adapters["ttl0"].url, adapter_calls[kind.name]),
                       ("adapter_cache", adapters["cache"].url, adapter_calls[kind.name])]
            runs = await interleaved(args, targets, clients)
            for target, run in runs.items():
                row[target] = summarize(run)
            for target in ("relay", "adapter_ttl0", "adapter_cache"):
                a, p = row[target], row["prometheus"]
                if "p50_ms" in a and "p50_ms" in p:
                    row[f"{target}_overhead_p50_ms"] = a["p50_ms"] - p["p50_ms"]
                    row[f"{target}_overhead_p99_ms"] = a["p99_ms"] - p["p99_ms"]
            lat_rows.append(row)
            print(f"... latency {kind.name} x{clients}: prometheus p99 {fmt(row['prometheus'].get('p99_ms'))} ms, "
                  f"relay p99 {fmt(row['relay'].get('p99_ms'))} ms, "
                  f"adapter p99 {fmt(row['adapter_ttl0'].get('p99_ms'))} ms (ttl 0), "
                  f"{fmt(row['adapter_cache'].get('p99_ms'))} ms (cache)", flush=True)
    result["latency"] = lat_rows

    # 2. throughput of the mix: adapter (both ways), the same mix straight to Prometheus, the bare endpoint.
    bare_urls = {target: start_bare(setup, bodies, target) for target in BARE_MODES}
    bare_url, procs_bare = bare_urls["bare"], {"bare": psutil.Process(setup.bare["bare"].pid)}
    seq_adapter = schedule(adapter_calls, weights)
    seq_prom = schedule(prom_calls, weights)
    thr: dict[str, Any] = {}
    profiles: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for target, base, seq, watched in () if "throughput" not in args.phases else (
            *((t, bare_urls[t], seq_adapter, {"bare": psutil.Process(setup.bare[t].pid)}) for t in BARE_MODES),
            ("adapter_ttl0", adapters["ttl0"].url, seq_adapter, procs),
            ("adapter_cache", adapters["cache"].url, seq_adapter,
             {"adapter": psutil.Process(adapters["cache"].proc.pid), "prometheus": prom_proc}),
            ("prometheus", setup.prom.url, seq_prom, {"prometheus": prom_proc})):
        profiler = None
        if args.profile and target.startswith("adapter"):
            pid = adapters["ttl0" if target == "adapter_ttl0" else "cache"].proc.pid
            profiler = Profiler(args.profile, f"{target}-x{args.clients}", pid, args.warmup_s + args.duration_s)
        run = await run_load(args.client, base, seq, args.clients, args.warmup_s, args.duration_s, target, watched)
        thr[target] = summarize(run)
        if profiler is not None:
            profiles[target] = profiler.finish()
        print(f"... throughput {target} x{args.clients}: {run.rate:,.0f} requests/s", flush=True)
    for target in ("bare_stdlib", "bare_bytes", "adapter_ttl0", "adapter_cache") if thr else ():
        for base in ("bare", "bare_bytes", "bare_stdlib"):
            thr[f"{target}_over_{base}"] = thr[target]["rps"] / thr[base]["rps"] if thr[base]["rps"] else None
    result["throughput"] = thr
    result["profiles"] = profiles

    # 2b. each kind alone, to show where the mix's cost lies.
    per_kind: dict[str, dict[str, Any]] = {}
    for kind in all_kinds if "kinds" in args.phases else []:
        row = per_kind[kind.name] = {}
        for target, base, watched in (
                ("bare", bare_url, procs_bare),
                ("adapter_ttl0", adapters["ttl0"].url, {"adapter": procs["adapter"]}),
                ("adapter_cache", adapters["cache"].url, {"adapter": psutil.Process(adapters["cache"].proc.pid)})):
            before = query_counts(adapters["ttl0"], setup.prom.url) if target == "adapter_ttl0" else None
            run = await run_load(args.client, base, [adapter_calls[kind.name]], args.clients, args.warmup_s,
                                 args.kind_s, target, watched)
            row[target] = summarize(run)
            if before is not None:
                after = query_counts(adapters["ttl0"], setup.prom.url)
                queries = max(after.misses - before.misses, 1)
                row["ttl0_requests_per_query"] = (after.answered - before.answered) / queries
        print(f"... throughput {kind.name} alone: bare {row['bare']['rps']:,.0f}, adapter "
              f"{row['adapter_ttl0']['rps']:,.0f} (ttl 0) {row['adapter_cache']['rps']:,.0f} (cache) requests/s",
              flush=True)
    result["per_kind"] = per_kind

    # 3. coalescing: identical concurrent requests.
    bursts: dict[str, list[dict[str, Any]]] = {}
    for name, adapter in adapters.items() if "burst" in args.phases else ():
        bursts[name] = [await burst(adapter, setup.prom.url, args.burst, f"{name}-{i}") for i in range(args.bursts)]
    result["bursts"] = bursts
    for name, a in adapters.items():
        after = rss_of(a.proc.pid)
        result["memory"][name].update(after=after["rss"], peak=after.get("peak", float("nan")))
    return result


def report(args: argparse.Namespace, res: dict[str, Any]) -> None:
    kinds_info = res["kinds"]
    table("request kinds (objects from --standalone-objects, no Kubernetes API)",
          ["kind", "items", "body bytes", "PromQL bytes", "path"],
          [[k, str(v["items"]), f"{v['body_bytes']:,}", f"{v['promql_bytes']:,}", v["url"][len(CUSTOM):]]
           for k, v in kinds_info.items()])

    rows = []
    turns = f"{args.latency_slices} slices" + (", request by request at 1 client" if args.latency_turns == "request"
                                               else "")
    for r in res["latency"]:
        p, rl, a0, ac = r["prometheus"], r["relay"], r["adapter_ttl0"], r["adapter_cache"]
        rows.append([r["kind"], str(r["clients"]), fmt(p.get("p50_ms")), fmt(p.get("p99_ms")),
                     fmt(rl.get("p50_ms")), fmt(rl.get("p99_ms")), fmt(r.get("relay_overhead_p99_ms"), "{:+.2f}"),
                     fmt(a0.get("p50_ms")), fmt(a0.get("p99_ms")),
                     fmt(r.get("adapter_ttl0_overhead_p50_ms"), "{:+.2f}"),
                     fmt(r.get("adapter_ttl0_overhead_p99_ms"), "{:+.2f}"),
                     fmt(ac.get("p50_ms")), fmt(ac.get("p99_ms")),
                     fmt(r.get("adapter_cache_overhead_p99_ms"), "{:+.2f}"),
                     f"{p['n']}/{rl['n']}/{a0['n']}/{ac['n']}",
                     str(sum(sum(x["errors"].values()) for x in (p, rl, a0, ac)))])
    table("latency per kind (ms): Prometheus /api/v1/query with the adapter's PromQL, the minimal relay and the "
          f"adapter, same client, taking turns ({turns}; +: over Prometheus)",
          ["kind", "clients", "prom p50", "prom p99", "relay p50", "relay p99", "relay +p99", "ttl0 p50", "ttl0 p99",
           "+p50", "+p99", "cache p50", "cache p99", "cache +p99", "n prom/relay/ttl0/cache", "errors"], rows)

    thr = res["throughput"]
    rows = []
    for target in TARGETS if thr else ():
        t = thr[target]
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in t["cpu_ms_per_request"].items())
        ratios = [thr.get(f"{target}_over_{base}") for base in ("bare", "bare_bytes", "bare_stdlib")]
        rows.append([target, str(t["n"]), f"{t['rps']:,.0f}", fmt(t.get("p50_ms")), fmt(t.get("p99_ms")),
                     *(fmt(r * 100 if r is not None else None, "{:.0f}%") for r in ratios), cpu or "-",
                     str(sum(t["errors"].values()))])
    table(f"throughput, mix {args.mix} at {args.clients} connections, {args.duration_s:g}s window (bare: FastAPI "
          "serialising the same document per request with orjson, the adapter's encoder; bare_stdlib: with "
          "FastAPI's default JSONResponse; bare_bytes: sending it pre-encoded; prometheus: the same mix of PromQL "
          "sent directly)",
          ["target", "n", "req/s", "p50 ms", "p99 ms", "vs bare", "vs bare_bytes", "vs bare_stdlib",
           "CPU ms/request", "errors"], rows)
    rows = []
    for k, row in res.get("per_kind", {}).items():
        b, a0, ac = row["bare"], row["adapter_ttl0"], row["adapter_cache"]
        cpu = [next(iter(r["cpu_ms_per_request"].values()), None) for r in (b, a0, ac)]
        rows.append([k, f"{b['rps']:,.0f}", f"{a0['rps']:,.0f}", fmt(100 * a0["rps"] / b["rps"], "{:.0f}%"),
                     f"{ac['rps']:,.0f}", fmt(100 * ac["rps"] / b["rps"], "{:.0f}%"),
                     fmt(cpu[0], "{:.2f}"), fmt(cpu[1], "{:.2f}"), fmt(cpu[2], "{:.2f}"),
                     fmt(row.get("ttl0_requests_per_query"), "{:.1f}"),
                     str(sum(sum(r["errors"].values()) for r in (b, a0, ac)))])
    if rows:
        table(f"each kind alone at {args.clients} connections (req/s; server CPU ms per request; ttl0 req/query: "
              "requests answered per Prometheus query with the cache off, by coalescing identical ones in flight)",
              ["kind", "bare", "ttl0", "vs bare", "cache", "vs bare", "CPU bare", "CPU ttl0", "CPU cache",
               "ttl0 req/query", "errors"], rows)
    by_kind = []
    for target in TARGETS if thr else ():
        for k, v in thr[target]["by_kind"].items():
            by_kind.append([target, k, str(v["n"]), fmt(v["p50_ms"]), fmt(v["p99_ms"])])
    table("throughput run, latency by kind", ["target", "kind", "n", "p50 ms", "p99 ms"], by_kind)

    rows = []
    for name, runs in res["bursts"].items():
        for b in runs:
            rows.append([name, str(b["requests"]), json.dumps(b["codes"]), f"{b['wall_ms']:.1f}",
                         f"{b['adapter_misses']:.0f}", f"{b['adapter_coalesced']:.0f}", f"{b['adapter_hits']:.0f}",
                         f"{b['prometheus_queries']:.0f}"])
    table("identical concurrent requests (fresh PromQL each burst)",
          ["adapter", "requests", "codes", "wall ms", "misses", "coalesced", "hits", "Prometheus queries"], rows)
    memory = res["memory"]
    table(f"adapter memory (MiB RSS; import-only interpreter: {res['import_rss'] / MIB:.1f}; goal: start-up <= 112)"
          f"{'' if not args.kube_pods else f', {args.kube_pods:,}-pod watch cache'}",
          ["adapter", "after start-up", "after the run", "peak (VmHWM)"],
          [[name, f"{m['start'] / MIB:.1f}", f"{m['after'] / MIB:.1f}", f"{m['peak'] / MIB:.1f}"]
           for name, m in memory.items()])
    for target, prof in res.get("profiles", {}).items():
        for what, frames in prof.items():
            title = "on top of the stack" if what == "self" else "adapter functions, anywhere in the stack"
            table(f"py-spy, adapter during the {target} throughput run: {title} (% of samples)",
                  ["%", "frame"], [[f"{share:.1f}", f] for f, share in frames])


# -- metrics.k8s.io: PodMetrics over many pods ------------------------------------------------------------------
PODMETRICS_PATH = f"/apis/metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods"
PODMETRICS_RULES = resource_rules_yaml(window="1m", cpu=("bench_cpu_cores", "bench_cpu_cores"),
                                       memory=("bench_memory_bytes", "bench_memory_bytes"))

def podmetrics_exposition(pods: int) -> str:
    """cAdvisor-shaped gauges (the rate already taken, as a recording rule would): two containers per pod."""
    rng = random.Random(11)
    lines = []
    for i in range(pods):
        for container in ("main", "sidecar"):
            labels = f'namespace="{NAMESPACE}",pod="p-{i}",container="{container}",node="node-{i // 30}"'
            lines.append(f"bench_cpu_cores{{{labels}}} {rng.uniform(0.01, 4):.6f}")
            lines.append(f"bench_memory_bytes{{{labels}}} {rng.randint(1, 8 << 30)}")
    return "\n".join(lines) + "\n"


async def podmetrics_bench(args: argparse.Namespace, prom: PrometheusServer, adapters: dict[str, AdapterProcess],
                           queries: tuple[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    body = adapters["ttl0"].get(PODMETRICS_PATH)
    body.raise_for_status()
    result["items"] = len(body.json()["items"])
    result["body_bytes"] = len(body.content)
    get = [Call("podmetrics", "GET", PODMETRICS_PATH)]
    timeout = f"{(10 * 900)}ms"
    forms = [Call("podmetrics", "POST", "/api/v1/query", {"query": q, "timeout": timeout}) for q in queries]
    rows = []
    for clients in (*args.latency_clients, args.clients):
        row: dict[str, Any] = {"clients": clients}
        # Prometheus: each "request" is the two queries at once, so run both calls with twice the connections.
        run = await run_load(args.client, prom.url, forms, 2 * clients, args.warmup_s, args.latency_s, "prometheus")
        row["prometheus_query"] = summarize(run)
        for name, adapter in adapters.items():
            run = await run_load(args.client, adapter.url, get, clients, args.warmup_s, args.latency_s, name)
            row[f"adapter_{name}"] = summarize(run)
        rows.append(row)
        print(f"... podmetrics x{clients}: prometheus per query p50 {fmt(row['prometheus_query'].get('p50_ms'))} ms, "
              f"adapter p50/p99 {fmt(row['adapter_ttl0'].get('p50_ms'))}/{fmt(row['adapter_ttl0'].get('p99_ms'))} "
              f"ms (ttl 0), {fmt(row['adapter_cache'].get('p50_ms'))}/{fmt(row['adapter_cache'].get('p99_ms'))} ms "
              f"(cache), {row['adapter_ttl0']['rps']:,.0f}/{row['adapter_cache']['rps']:,.0f} requests/s", flush=True)
    result["runs"] = rows
    result["rss_mib"] = {name: psutil.Process(a.proc.pid).memory_info().rss / MIB for name, a in adapters.items()}
    return result


def podmetrics_main(args: argparse.Namespace) -> int:
    from adapter.rulesfile.loader import parse_rules

    header = [machine_line(), f"podmetrics: {args.podmetrics_pods} pods x 2 containers, clients "
              f"{[*args.latency_clients, args.clients]}, window {args.latency_s:g}s, warmup {args.warmup_s:g}s; "
              "auth: --disable-auth; no Kubernetes API (every pod with series)"]
    print("\n".join(header), flush=True)
    t0 = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-podmetrics-"))
    rules = workdir / "rules.yaml"
    rules.write_text(PODMETRICS_RULES)
    parsed = parse_rules(PODMETRICS_RULES, "bench").resource_rules
    assert parsed is not None
    queries = (parsed.cpu.render_pods(NAMESPACE, None), parsed.memory.render_pods(NAMESPACE, None))
    endpoint = MetricsEndpoint(podmetrics_exposition(args.podmetrics_pods))
    prom = adapters = None
    try:
        prom = PrometheusServer([endpoint.address], job="cadvisor", honor_labels=True,
                                scrape_interval=args.scrape_interval).start()
        prom.wait_for(f'bench_memory_bytes{{pod="p-{args.podmetrics_pods - 1}",container="sidecar"}}', timeout=60)
        adapters = {name: AdapterProcess(prom.url, str(workdir / "certs"), args=[
            "--config", str(rules), "--query-cache-ttl", ttl, "--prometheus-timeout", "10s"], ready_timeout=60.0)
            for name, ttl in (("ttl0", "0"), ("cache", "5s"))}
        res = asyncio.run(podmetrics_bench(args, prom, adapters, queries))
    finally:
        for adapter in (adapters or {}).values():
            adapter.stop()
        if prom is not None:
            prom.stop()
        endpoint.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    table(f"PodMetrics of {res['items']} pods ({res['body_bytes']:,} bytes), latency in ms",
          ["clients", "prom/query p50", "prom/query p99", "ttl0 p50", "ttl0 p99", "ttl0 rps", "cache p50", "cache p99",
           "cache rps"],
          [[str(r["clients"]), fmt(r["prometheus_query"].get("p50_ms")), fmt(r["prometheus_query"].get("p99_ms")),
            fmt(r["adapter_ttl0"].get("p50_ms")), fmt(r["adapter_ttl0"].get("p99_ms")),
            f"{r['adapter_ttl0']['rps']:,.0f}", fmt(r["adapter_cache"].get("p50_ms")),
            fmt(r["adapter_cache"].get("p99_ms")), f"{r['adapter_cache']['rps']:,.0f}"] for r in res["runs"]])
    finish(args, header[0], header[1], res, t0)
    return 0


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--sizes", type=int_list, default=[10, 100, 1500], help="pods per label selector (10,100,1500)")
    p.add_argument("--mix", default="object:4,pods10:3,pods100:2,pods1500:1",
                   help="request mix for the throughput run, kind:weight (default object:4,pods10:3,pods100:2,"
                        "pods1500:1)")
    p.add_argument("--kind", choices=["custom", "podmetrics"], default="custom",
                   help="custom: the custom-metrics kinds (default); podmetrics: metrics.k8s.io PodMetrics")
    p.add_argument("--podmetrics-pods", type=int, default=1500, help="pods in the podmetrics namespace (1500)")
    p.add_argument("--kube-pods", type=int, default=0, metavar="N",
                   help="resolve selectors through a fake Kubernetes API holding the bench's pods plus fillers up to "
                        "N pods (the adapter's watch cache), instead of --standalone-objects")
    p.add_argument("--clients", type=int, default=32, help="connections in the throughput run (default 32)")
    p.add_argument("--latency-clients", type=int_list, default=[1, 5],
                   help="connections in the latency runs (default 1,5: the HPA controller syncs 5 at a time)")
    p.add_argument("--duration-s", type=float, default=10.0, help="measured window of each throughput run")
    p.add_argument("--kind-s", type=float, default=4.0, help="measured window of each single-kind throughput run")
    p.add_argument("--latency-s", type=float, default=4.0, help="measured window of each latency run")
    p.add_argument("--latency-turns", choices=["slice", "request"], default="slice",
                   help="at one client, take turns by slices (default) or request by request")
    p.add_argument("--latency-slices", type=int, default=8,
                   help="slices each latency window is cut into, the targets taking turns (default 8)")
    p.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured start of every run")
    p.add_argument("--burst", type=int, default=100, help="identical concurrent requests per burst (default 100)")
    p.add_argument("--bursts", type=int, default=3, help="bursts per adapter")
    p.add_argument("--scrape-interval", default="15s", help="Prometheus scrape interval (caps the query cache)")
    p.add_argument("--client", choices=sorted(CLIENTS), default="raw",
                   help="raw (default): a minimal asyncio HTTP/1.1 client; httpx: httpx.AsyncClient")
    p.add_argument("--phases", type=lambda t: set(t.split(",")), default={"latency", "throughput", "kinds", "burst"},
                   help="which parts to run (default latency,throughput,kinds,burst; kinds needs throughput)")
    p.add_argument("--quick", action="store_true", help="short windows (about two minutes in all)")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="py-spy the adapter during the throughput runs; collapsed stacks go to DIR")
    p.add_argument("--adapter-from", type=Path, default=None, metavar="DIR",
                   help="run the adapter from another checkout (e.g. a git worktree of an older commit) for a "
                        "before/after comparison; the bare server and the client stay this checkout's")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.duration_s, args.latency_s, args.kind_s, args.warmup_s, args.bursts = 3.0, 1.5, 1.5, 0.5, 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    exit_on_sigterm()
    if args.kind == "podmetrics":
        os.chdir(args.adapter_from or ROOT)
        return podmetrics_main(args)
    # `python -m adapter` in the subprocesses then runs this checkout (or --adapter-from), not an installed copy.
    os.chdir(args.adapter_from or ROOT)
    header = [machine_line(), GOALS,
              f"sizes={args.sizes} mix={args.mix} clients={args.clients} latency clients={args.latency_clients} "
              f"window={args.duration_s:g}s latency window={args.latency_s:g}s warmup={args.warmup_s:g}s",
              (f"objects: a fake Kubernetes API with {args.kube_pods:,} pods (watch cache)" if args.kube_pods else
               "objects: --standalone-objects file (no Kubernetes API)") + "; auth: --disable-auth; rules: GPU presets",
              f"adapter from {args.adapter_from or ROOT}"]
    print("\n".join(header), flush=True)
    t0 = time.monotonic()
    groups = pod_groups(args.sizes)
    workdir = Path(tempfile.mkdtemp(prefix="bench-adapter-"))
    objects_file = workdir / "objects.json"
    objects_file.write_text(json.dumps(objects_document(groups)))
    endpoint = MetricsEndpoint(exposition(groups))
    setup: Setup | None = None
    named = {pod: app for app, pods in groups.items() for pod in pods}
    try:
        prom = PrometheusServer([endpoint.address], job="dcgm-exporter", honor_labels=True,
                                scrape_interval=args.scrape_interval).start()
        with kube_with_pods(args.kube_pods and max(args.kube_pods, len(named)), workdir, NAMESPACE,
                            named) as kubeconfig:
            setup = Setup(endpoint, prom, workdir, objects_file, kubeconfig)
            wait_series(prom, sum(len(p) for p in groups.values()))
            res = asyncio.run(bench(args, setup))
            res["import_rss"] = import_only_rss(args.adapter_from or ROOT)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if setup is not None:
            setup.stop()
        else:
            endpoint.stop()
            shutil.rmtree(workdir, ignore_errors=True)
    report(args, res)
    finish(args, header[0], GOALS, res, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
