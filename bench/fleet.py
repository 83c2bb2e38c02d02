"""An HPA fleet against the adapter, asked the way kube-controller-manager asks, in a cluster-shaped setup.

Setup, all real and on loopback: an exposition endpoint with N workloads of 10 pods each (one GPU per pod:
``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED`` per pod, scraped with ``honor_labels`` as dcgm-exporter is;
each pod's series carry its workload's Service as ``service``); a Prometheus scraping it; a fake Kubernetes API
holding the N x 10 pods (labels as a Deployment's pods carry them), the front-proxy CA and an RBAC stand-in for
SubjectAccessReviews; and the adapter with the built-in GPU presets and delegated auth, as in a cluster.

The fleet: N HPAs, each with two metrics, as in the EKS guide and the field: a Pods metric
(``pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app=<workload>``, its 10 pods) and an Object metric (its Service's
``DCGM_FI_DEV_GPU_UTIL_AVG``). The controller's shape (kube-controller-manager, pkg/controller/podautoscaler):
every ``--horizontal-pod-autoscaler-sync-period`` (15 s) the informer resync queues every HPA; 5 workers
(``--concurrent-horizontal-pod-autoscaler-syncs``) take them one at a time and fetch each HPA's metrics one after
the other; the custom-metrics client's discovery is invalidated every sync period, so a round starts with it
(here: ``/apis`` and the ``custom.metrics.k8s.io/v1beta2`` resource list). Requests come through the
aggregator's identity: the front-proxy client certificate and ``X-Remote-User`` of the HPA's service account.

Printed (never asserted): per round, how long the fleet took (goal: within the 15 s period); request latency p50,
p99 and max per metric type; the adapter's CPU over the measured rounds as a share of one core and its RSS and
peak (goals by fleet size in ``goals``); and the baseline measured in the same run, the same workers sending each
HPA's PromQL straight to Prometheus (``/api/v1/query``). ``--replicas 2`` puts that many adapters behind a Service
stand-in (tests/support/service_proxy.py, round-robin per connection as kube-proxy) and prints each one's share.

Everything shares this machine's cores, so the CPU of every process in the run is printed beside the adapter's
(Prometheus, the fake API answering the SubjectAccessReviews, the HPA clients) with how busy the whole machine
was: a round that takes longer than the baseline while the machine is saturated measures the machine, not the
adapter. The clients use aiohttp, the cheapest well-kept Python client measured here, to leave the most CPU to
the processes under test (the controller they stand in for is Go).

Usage: ``python bench/fleet.py [--workloads 1000,5000] [--rounds 3] [--replicas N] [--adapter-from DIR]
[--profile DIR] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.process
import os
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pyspy import ORDER, Recording, fold_layers  # noqa: E402  (bench/pyspy.py)
from rss import mib, rss_of  # noqa: E402  (bench/rss.py)

from tests.support.adapter_metrics import scrape  # noqa: E402
from tests.support.adapter_process import AdapterProcess  # noqa: E402
from tests.support.certs import issue, make_ca  # noqa: E402
from tests.support.fake_kube import FakeKube, configmap, pod  # noqa: E402
from tests.support.metrics_endpoint import MetricsEndpoint  # noqa: E402
from tests.support.prometheus import PrometheusServer  # noqa: E402

PODS_PER_WORKLOAD = 10
NAMESPACES = 20
SYNC_PERIOD_S = 15.0
WORKERS = 5
PROFILE_RATE_HZ = 200  # py-spy samples per second
HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
HPA_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"


@dataclass(frozen=True)
class Workload:
    namespace: str
    name: str

    def pods(self) -> list[str]:
        return [f"{self.name}-7f9c6b5d8-{i:05x}" for i in range(PODS_PER_WORKLOAD)]

    def pods_path(self) -> tuple[str, dict[str, str]]:
        return (f"{CUSTOM}/namespaces/{self.namespace}/pods/*/DCGM_FI_DEV_GPU_UTIL",
                {"labelSelector": f"app={self.name}"})

    def object_path(self) -> tuple[str, dict[str, str]]:
        return f"{CUSTOM}/namespaces/{self.namespace}/services/{self.name}/DCGM_FI_DEV_GPU_UTIL_AVG", {}

    def pods_promql(self) -> str:
        """What the GPU presets render for the Pods metric (checked against ``/debug/explain`` once per run)."""
        return (f'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{{namespace="{self.namespace}",'
                f'pod=~"{"|".join(sorted(self.pods()))}"}})')

    def object_promql(self) -> str:
        return f'avg by (service) (DCGM_FI_DEV_GPU_UTIL{{service="{self.name}"}})'


def workloads(n: int) -> list[Workload]:
    return [Workload(f"team-{i % NAMESPACES:02d}", f"infer-{i:05d}") for i in range(n)]


def exposition(fleet: list[Workload]) -> str:
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge", "# TYPE DCGM_FI_DEV_FB_USED gauge"]
    k = 0
    for w in fleet:
        for p in w.pods():
            node, gpu = divmod(k, 8)
            labels = (f'gpu="{gpu}",UUID="GPU-{k:08x}-0000-4000-8000-000000000000",device="nvidia{gpu}",'
                      f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-{node}",container="server",'
                      f'namespace="{w.namespace}",pod="{p}",service="{w.name}"')
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {(k * 37) % 100}")
            lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {20000 + k % 5000}")
            k += 1
    return "\n".join(lines) + "\n"


def rbac(spec: dict) -> tuple[bool, str]:
    """The HPA controller may get custom metrics (its ClusterRole), discovery paths (``system:discovery``) and,
    here, the bench's check of the PromQL through /debug/explain; nobody else anything."""
    attrs = spec.get("resourceAttributes") or {}
    path = (spec.get("nonResourceAttributes") or {}).get("path", "")
    metrics = attrs.get("group") == "custom.metrics.k8s.io" and attrs.get("verb") == "get"
    allowed = spec.get("user") == HPA_USER and (metrics or path.startswith(("/apis", "/debug/")))
    return allowed, "" if allowed else "no RBAC policy matched"


def serve_kube(fleet: list[Workload], ca_pem: bytes, kubeconfig: Path, ready: Any, stop: Any) -> None:
    """The fake Kubernetes API, in a process of its own: in the bench's process it would share the interpreter
    lock with the HPA clients and slow both down."""
    kube = FakeKube(authorize=rbac, bookmark_interval=None)
    kube.put("", "v1", "configmaps", configmap("kube-system", "extension-apiserver-authentication", {
        "requestheader-client-ca-file": ca_pem.decode(),
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]'}))
    k = 0
    for w in fleet:
        for p in w.pods():
            kube.put("", "v1", "pods", pod(w.namespace, p, {"app": w.name, "pod-template-hash": "7f9c6b5d8",
                                                            "team": w.namespace, "model": "llama-3-8b"},
                                           node_name=f"gpu-node-{k // 8}", uid=f"00000000-0000-4000-8000-{k:012x}"))
            k += 1
    kube.start()
    kube.write_kubeconfig(kubeconfig)
    ready.set()
    stop.wait()
    kube.stop()


@dataclass
class Cluster:
    prom: PrometheusServer
    kube: multiprocessing.process.BaseProcess
    kube_stop: Any
    kubeconfig: str
    endpoint: MetricsEndpoint
    client_cert: tuple[str, str]

    def stop(self) -> None:
        self.prom.stop()
        self.kube_stop.set()
        self.kube.join(30)
        self.endpoint.stop()


def start_cluster(fleet: list[Workload], tmp: Path) -> Cluster:
    ca = make_ca("front-proxy-ca")
    proxy = issue(ca, "front-proxy-client")
    fork = multiprocessing.get_context("fork")
    ready, stop = fork.Event(), fork.Event()
    kubeconfig = tmp / "kubeconfig"
    kube = fork.Process(target=serve_kube, args=(fleet, ca.cert_pem, kubeconfig, ready, stop), daemon=True)
    kube.start()
    if not ready.wait(300):
        raise RuntimeError("the fake Kubernetes API did not start in 300 s")
    endpoint = MetricsEndpoint(exposition(fleet))
    prom = PrometheusServer([endpoint.address], job="dcgm", honor_labels=True, scrape_interval="15s",
                            tmp_prefix="prometheus-fleet-").start()
    expected = len(fleet) * PODS_PER_WORKLOAD
    deadline = time.monotonic() + 120
    while len(prom.query("DCGM_FI_DEV_GPU_UTIL")) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError("Prometheus did not scrape the fleet's series in 120 s")
        time.sleep(1)
    return Cluster(prom, kube, stop, str(kubeconfig), endpoint, proxy.write(tmp, "front-proxy"))


def hpa_client(base_url: str, cert: tuple[str, str] | None) -> aiohttp.ClientSession:
    """The aggregator's side of the connection: its client certificate and the HPA's identity in headers."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    headers: list[tuple[str, str]] = []
    if cert is not None:
        context.load_cert_chain(*cert)
        headers = [("X-Remote-User", HPA_USER), *(("X-Remote-Group", g) for g in HPA_GROUPS)]
    return session(base_url, headers, ssl_context=context)


def session(base_url: str, headers: list[tuple[str, str]] | None = None,
            ssl_context: ssl.SSLContext | None = None) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=WORKERS + 1, ssl=ssl_context if ssl_context is not None else True)
    return aiohttp.ClientSession(base_url, connector=connector, headers=headers or None,
                                 timeout=aiohttp.ClientTimeout(total=30.0), trust_env=False)


@dataclass(frozen=True)
class Reply:
    status: int
    path: str
    text: str


async def get(client: aiohttp.ClientSession, path: str, params: dict[str, str] | None = None) -> Reply:
    async with client.get(path, params=params) as response:
        return Reply(response.status, path, await response.text())


async def post_query(client: aiohttp.ClientSession, promql: str) -> Reply:
    async with client.post("/api/v1/query", data={"query": promql},
                           headers={"Accept-Encoding": "identity"}) as response:
        return Reply(response.status, "/api/v1/query", await response.text())


@dataclass
class Round:
    seconds: float
    latencies: dict[str, list[float]] = field(default_factory=dict)
    failures: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # "<status> <path>" of the first failures

    def record(self, kind: str, began: float, reply: Reply) -> None:
        self.latencies[kind].append(time.perf_counter() - began)
        if reply.status != 200:
            self.failures += 1
            key = f"{reply.status} {reply.path}: {reply.text[:160]}"
            if len(self.failed) < 5:
                self.failed[key] = self.failed.get(key, 0) + 1


Ask = Callable[[Workload], list[tuple[str, Awaitable[Reply]]]]
"""One HPA's requests: (metric type, request) in the order the controller sends them."""


async def fleet_round(fleet: list[Workload], ask: Ask, out: Round) -> Round:
    """Every HPA of the fleet, 5 at a time, each one's requests one after the other (the controller's workers)."""
    began = time.perf_counter()
    queue: asyncio.Queue[Workload] = asyncio.Queue()
    for w in fleet:
        queue.put_nowait(w)

    async def worker() -> None:
        while not queue.empty():
            for kind, request in ask(queue.get_nowait()):
                t = time.perf_counter()
                out.record(kind, t, await request)

    await asyncio.gather(*(worker() for _ in range(WORKERS)))
    out.seconds += time.perf_counter() - began
    return out


async def adapter_round(client: aiohttp.ClientSession, fleet: list[Workload]) -> Round:
    """One sync period: discovery, then every HPA's two metrics through the adapter."""
    began = time.perf_counter()
    out = Round(0.0, {"discovery": [], "pods": [], "object": []})
    for path in ("/apis", CUSTOM):
        t = time.perf_counter()
        out.record("discovery", t, await get(client, path))
    out.seconds = time.perf_counter() - began

    def ask(w: Workload) -> list[tuple[str, Awaitable[Reply]]]:
        return [(kind, get(client, path, params))
                for kind, (path, params) in (("pods", w.pods_path()), ("object", w.object_path()))]

    return await fleet_round(fleet, ask, out)


async def prometheus_round(client: aiohttp.ClientSession, fleet: list[Workload]) -> Round:
    """The baseline: the same workers POSTing each HPA's PromQL straight to Prometheus."""

    def ask(w: Workload) -> list[tuple[str, Awaitable[Reply]]]:
        return [(kind, post_query(client, promql))
                for kind, promql in (("pods", w.pods_promql()), ("object", w.object_promql()))]

    return await fleet_round(fleet, ask, Round(0.0, {"pods": [], "object": []}))


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def busy_seconds() -> float:
    """CPU time the whole machine spent on anything but idling, all cores together."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


async def check_promql(client: aiohttp.ClientSession, w: Workload) -> None:
    """The baseline's PromQL is what the adapter sends (a renamed preset would make the comparison wrong)."""
    for (path, params), promql in ((w.pods_path(), w.pods_promql()), (w.object_path(), w.object_promql())):
        explained = json.loads((await get(client, "/debug/explain" + path, params)).text)
        sent = [r["promql"] for r in explained["rules"]]
        if promql not in sent:
            raise RuntimeError(f"the adapter sends {sent}, the baseline {promql!r}: update bench/fleet.py")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def serve_proxy(addresses: list[str], ready: Any, address: Any, stop: Any) -> None:
    """A Service in front of the replicas (tests/support/service_proxy.py: round-robin over the endpoints for each
    new connection, as kube-proxy spreads the aggregator's connections), in a process of its own: in the bench's
    process it would share the interpreter lock with the HPA clients."""
    from tests.support.service_proxy import ServiceProxy

    proxy = ServiceProxy(propagation_s=0.0)
    for i, endpoint in enumerate(addresses):
        proxy.set_endpoint(f"adapter-{i + 1}", endpoint, True, at_once=True)
    address.put(proxy.url)
    ready.set()
    stop.wait()
    proxy.stop()


def served_requests(adapter: AdapterProcess) -> float:
    """The metric requests the replica answered so far (its ``gpu_adapter_request_duration_seconds`` counts)."""
    samples = scrape(adapter)
    return sum(v for (name, labels), v in samples.items()
               if name == "gpu_adapter_request_duration_seconds_count" and dict(labels)["route"].startswith("custom"))


async def run_fleet(n: int, rounds: int, tmp: Path, adapter_from: Path | None, auth: bool = True,
                    extra_args: Sequence[str] = (), profile: Path | None = None,
                    replicas: int = 1) -> dict[str, Any]:
    """``profile``: py-spy records the adapter's stacks (native frames too) into this file during the measured
    rounds, and the result carries the samples per layer (bench/pyspy.py). ``replicas`` > 1: that many adapters
    behind a Service stand-in."""
    fleet = workloads(n)
    setup_began = time.monotonic()
    cluster = start_cluster(fleet, tmp)
    adapters: list[AdapterProcess] = []
    proxy = proxy_stop = None
    try:
        for i in range(replicas):
            adapters.append(AdapterProcess(cluster.prom.url, str(tmp / f"certs-{i}"),
                                           ["--kubeconfig", cluster.kubeconfig, *extra_args],
                                           disable_auth=not auth, ready_timeout=120, cwd=adapter_from))
        url = adapters[0].url
        if replicas > 1:
            fork = multiprocessing.get_context("fork")
            ready, proxy_stop, address = fork.Event(), fork.Event(), fork.Queue()
            proxy = fork.Process(target=serve_proxy, args=([a.url.removeprefix("https://") for a in adapters],
                                                           ready, address, proxy_stop), daemon=True)
            proxy.start()
            ready.wait(30)
            url = address.get(timeout=30)
        started_rss = [rss_of(a.proc.pid) for a in adapters]
        setup_s = time.monotonic() - setup_began
        measured: list[Round] = []
        names = ["adapter"] if replicas == 1 else [f"adapter-{i + 1}" for i in range(replicas)]
        async with hpa_client(url, cluster.client_cert if auth else None) as client:
            warm = await adapter_round(client, fleet)  # the pod watch cache syncs here, as at a controller start
            pids = {**{name: a.proc.pid for name, a in zip(names, adapters, strict=True)},
                    "prometheus": cluster.prom.process.pid, "fake API": cluster.kube.pid, "HPA clients": os.getpid()}
            if proxy is not None:
                pids["Service"] = proxy.pid
            served_before = [served_requests(a) for a in adapters]
            cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            busy_before, wall_before = busy_seconds(), time.monotonic()
            recording = (Recording(profile, adapters[0].proc.pid, rounds * SYNC_PERIOD_S, rate=PROFILE_RATE_HZ,
                                   native=True)
                         if profile is not None else None)
            next_round = time.monotonic()
            for _ in range(rounds):
                next_round += SYNC_PERIOD_S
                measured.append(await adapter_round(client, fleet))
                await asyncio.sleep(max(next_round - time.monotonic(), 0.0))
            wall = time.monotonic() - wall_before
            cpu = {name: (cpu_seconds(pid) - cpu_before[name]) / wall for name, pid in pids.items()}
            busy = (busy_seconds() - busy_before) / wall
            served = [served_requests(a) - before for a, before in zip(adapters, served_before, strict=True)]
            memory = [rss_of(a.proc.pid) for a in adapters]
            raw = recording.finish() if recording is not None else None
            await check_promql(client, fleet[0])
        async with session(cluster.prom.url) as prom_client:
            baseline = await prometheus_round(prom_client, fleet)
    finally:
        if proxy is not None and proxy_stop is not None:
            proxy_stop.set()
            proxy.join(30)
        for adapter in adapters:
            adapter.stop()
        cluster.stop()
    latencies = {kind: [x for r in measured for x in r.latencies[kind]] for kind in ("pods", "object")}
    return {
        "workloads": n, "pods": n * PODS_PER_WORKLOAD, "setup_s": setup_s, "warmup_round_s": warm.seconds,
        "round_s": [r.seconds for r in measured], "failures": sum(r.failures for r in measured) + warm.failures,
        "failed": {k: v for r in (warm, *measured) for k, v in r.failed.items()},
        "latency_ms": {kind: {"p50": 1000 * statistics.median(v), "p99": 1000 * percentile(v, 0.99),
                              "max": 1000 * max(v)} for kind, v in latencies.items()},
        "cpu_share": max(cpu[name] for name in names), "cpu_shares": cpu, "machine_busy": busy,
        "rss": max(m["rss"] for m in started_rss), "rss_after": max(m["rss"] for m in memory),
        "peak": max(m.get("peak", 0.0) for m in memory),
        "replicas": [{"name": name, "cpu_share": cpu[name], "served": count, "rss": m["rss"],
                      "peak": m.get("peak", 0.0)} for name, count, m in zip(names, served, memory, strict=True)],
        "requests": sum(len(v) for r in measured for v in r.latencies.values()), "measured_s": wall,
        "layers": fold_layers(raw) if raw is not None else None,
        "baseline": {"round_s": baseline.seconds, "failures": baseline.failures,
                     "latency_ms": {kind: {"p50": 1000 * statistics.median(v), "p99": 1000 * percentile(v, 0.99)}
                                    for kind, v in baseline.latencies.items()}},
    }


def goals(n: int, replicas: int) -> str:
    """The goals for this fleet (bench/README.md)."""
    if replicas > 1:
        return f"every round < {SYNC_PERIOD_S:g} s with {replicas} replicas behind one Service"
    if n <= 1000:
        return f"every round < {SYNC_PERIOD_S:g} s, Pods and Object p99 <= 15 ms, adapter <= 12 % of a core"
    return f"every round < {SYNC_PERIOD_S:g} s, adapter <= 60 % of a core, RSS <= 160 MiB"


def report(result: dict[str, Any], layers: bool = True) -> None:
    n = result["workloads"]
    rounds = ", ".join(f"{s:.2f}" for s in result["round_s"])
    print(f"\n== {n:,} HPAs (2 metrics each), {result['pods']:,} pods in the watch cache, 5 workers, "
          f"{SYNC_PERIOD_S:g} s sync period")
    print(f"setup {result['setup_s']:.0f} s; first round (watch cache sync) {result['warmup_round_s']:.2f} s; "
          f"failed requests {result['failures']}")
    for failure, count in result["failed"].items():
        print(f"  {count} x {failure}")
    print(f"round durations (s): {rounds}   [goal: each < {SYNC_PERIOD_S:g} s]   "
          f"Prometheus alone, same workers: {result['baseline']['round_s']:.2f} s")
    print(f"{'metric':<8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'Prom p50':>9} {'Prom p99':>9}")
    for kind, row in result["latency_ms"].items():
        base = result["baseline"]["latency_ms"][kind]
        print(f"{kind:<8} {row['p50']:>8.2f} {row['p99']:>8.2f} {row['max']:>8.2f} {base['p50']:>9.2f} "
              f"{base['p99']:>9.2f}")
    replicas = result["replicas"]
    print(f"adapter CPU {100 * result['cpu_share']:.1f} % of one core; RSS after start-up {mib(result['rss'])}, "
          f"after the rounds {mib(result['rss_after'])}, peak {mib(result['peak'])}"
          + (" (the busiest replica)" if len(replicas) > 1 else ""))
    if len(replicas) > 1:
        total = sum(r["served"] for r in replicas) or 1
        print("each replica's share: " + "; ".join(
            f"{r['name']} {r['served']:,.0f} requests ({100 * r['served'] / total:.0f} %), CPU "
            f"{100 * r['cpu_share']:.1f} % of one core, RSS {mib(r['rss'])}, peak {mib(r['peak'])}" for r in replicas))
    print(f"goals: {goals(n, len(replicas))}")
    shares = ", ".join(f"{name} {100 * share:.0f} %" for name, share in result["cpu_shares"].items())
    print(f"CPU during the rounds, share of one core: {shares}; the machine {100 * result['machine_busy']:.0f} % "
          f"busy of {100 * (os.cpu_count() or 1)} %")
    if layers and result.get("layers"):
        print_layers({"adapter": result})


def print_layers(results: dict[str, dict[str, Any]]) -> None:
    """The adapter's py-spy samples by layer, a column per result: the share of its samples on the CPU, and that
    share of the adapter's measured CPU time per request."""
    print("where the adapter's CPU went (py-spy samples by layer, bench/pyspy.py): % of samples, µs of CPU per "
          "request")
    print(f"{'layer':<18}" + "".join(f"{name:>24}" for name in results))
    for layer in (*ORDER, "total"):
        cells = []
        for r in results.values():
            total = sum(r["layers"].values()) or 1
            share = 1.0 if layer == "total" else r["layers"][layer] / total
            per_request = r["cpu_share"] * r["measured_s"] / max(r["requests"], 1)
            cells.append(f"{100 * share:>10.1f} % {1e6 * share * per_request:>8.0f} µs")
        print(f"{layer:<18}" + "".join(f"{c:>24}" for c in cells))
    print("samples: " + ", ".join(f"{name} {sum(r['layers'].values()):,}" for name, r in results.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="1000,5000", help="fleet sizes, comma-separated (default 1000,5000)")
    parser.add_argument("--rounds", type=int, default=3, help="measured sync rounds per size (default 3)")
    parser.add_argument("--adapter-from", type=Path, default=None, metavar="DIR",
                        help="run the adapter from another checkout (e.g. a worktree of an older commit)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--no-auth", action="store_true",
                        help="the adapter with --disable-auth: what delegated authorisation costs, by difference")
    parser.add_argument("--adapter-arg", action="append", default=[], metavar="ARG",
                        help="one more adapter flag, repeatable (e.g. "
                             "--adapter-arg=--authorization-webhook-cache-authorized-ttl=30s)")
    parser.add_argument("--replicas", type=int, default=1,
                        help="adapter replicas behind a Service stand-in (round-robin over them per connection)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="py-spy the adapter during the measured rounds (collapsed stacks to DIR) and print "
                             "its CPU by layer")
    args = parser.parse_args(argv)
    print(f"bench/fleet.py: {os.cpu_count()} CPUs; adapter from {args.adapter_from or ROOT}")
    results = []
    for n in (int(x) for x in args.workloads.split(",")):
        with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
            result = asyncio.run(run_fleet(n, args.rounds, Path(tmp), args.adapter_from, auth=not args.no_auth,
                                               extra_args=args.adapter_arg,
                                               profile=args.profile / f"fleet-{n}.txt" if args.profile else None,
                                               replicas=args.replicas))
        report(result)
        results.append(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
