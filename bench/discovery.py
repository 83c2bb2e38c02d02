"""Discovery benchmark for ``gpu-adapter``: relist time and memory with Prometheus holding many GPU series.

Setup (real, on loopback): a static exposition endpoint with ``--gpus`` GPUs x ``--fields`` DCGM fields (default
12,500 x 8 = 100,000 series, every GPU allocated to a pod, ``honor_labels``), scraped once by a real Prometheus
(``--scrape-interval``, also the scrape timeout), and the adapter with the built-in GPU presets relisting every
``--relist-interval`` with a look-back (``--metrics-max-age``) that covers the data.

Printed (timings are never asserted), each with a baseline from the same run:

* relist time: the adapter's own ``gpu_adapter_discovery_last_duration_seconds`` over several relists, against
  the time Prometheus needs to answer the same ``/api/v1/series`` calls (same matchers and window, one after
  another as the adapter sends them; all at once too) to a client that only reads the bytes (goal: <= 2 s);
* adapter memory with a ``--kube-pods`` (5,000) pod watch cache (a fake Kubernetes API on loopback): RSS after
  start-up (ready, pod cache synced), after the relists, and the peak (``VmHWM``), against the same adapter whose
  rules match no series and against a fresh interpreter that only imported the server's modules (goals: <= 112 MiB
  after start-up, peak <= 150 MB);
* the longest the API stalled during a relist: ``/healthz`` polled every ``--poll-ms``.

Usage: ``python bench/discovery.py [--quick] [--gpus 12500] [--fields 8] [--relists 3] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from adapter_load import RawClient, counter  # noqa: E402
from exporter_scrape import exit_on_sigterm, finish, machine_line, pct  # noqa: E402
from rss import MIB, import_only_rss, kube_with_pods, mib, rss_of, warm_pod_cache  # noqa: E402

from adapter.presets.gpu import gpu_presets  # noqa: E402
from tests.support.adapter_process import AdapterProcess  # noqa: E402
from tests.support.metrics_endpoint import MetricsEndpoint  # noqa: E402
from tests.support.prometheus import PrometheusServer  # noqa: E402

GOALS = ("goals: relist <= 2 s and adapter RSS <= 150 MB with 100,000 GPU series; <= 112 MiB after start-up with "
         "the presets and a 5,000-pod watch cache")
MB = 1_000_000
FIELDS = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
          "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
          "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
          "DCGM_FI_DEV_XID_ERRORS"]
NO_MATCH_RULES = """\
rules:
- seriesQuery: 'bench_no_such_metric{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
"""


def exposition(gpus: int, fields: int, namespaces: int) -> bytes:
    """dcgm-exporter's output for ``gpus`` GPUs (8 per node), each held by a pod, as Prometheus stores it with
    honor_labels (the ``service`` label a ServiceMonitor adds included)."""
    rng = random.Random(11)
    out: list[str] = []
    for field in FIELDS[:fields]:
        out.append(f"# TYPE {field} gauge")
        for g in range(gpus):
            node, gpu = divmod(g, 8)
            ns = f"team-{g % namespaces}"
            out.append(
                f'{field}{{gpu="{gpu}",UUID="GPU-{g:08x}-7a1c-4c9e-9f0b-{node:012x}",'
                f'pci_bus_id="00000000:{0x10 + gpu:02X}:00.0",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
                f'Hostname="gpu-node-{node}",DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="{ns}",'
                f'pod="infer-{g // 4}-{g % 4}",service="dcgm-exporter"}} {rng.randint(0, 100)}')
    return ("\n".join(out) + "\n").encode()


def discovery_state(adapter: AdapterProcess) -> dict[str, float]:
    text = adapter.get("/metrics").text
    return {"duration_s": counter(text, "gpu_adapter_discovery_last_duration_seconds"),
            "last_success": counter(text, "gpu_adapter_discovery_last_success_timestamp_seconds"),
            "failures": counter(text, "gpu_adapter_discovery_failures_total"),
            "custom_metrics": counter(text, "gpu_adapter_discovery_metrics", api="custom")}


class Poller:
    """``/healthz`` on a thread every ``interval_s``: the longest answer shows how long the event loop stalled."""

    def __init__(self, url: str, interval_s: float) -> None:
        self.samples: list[tuple[float, float]] = []  # (monotonic start, seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, interval_s), daemon=True)
        self._thread.start()

    def _run(self, url: str, interval_s: float) -> None:
        with httpx.Client(verify=False, timeout=30.0, trust_env=False) as client:
            while not self._stop.is_set():
                t0 = time.monotonic()
                with contextlib.suppress(httpx.HTTPError):
                    client.get(url + "/healthz")
                    self.samples.append((t0, time.monotonic() - t0))
                self._stop.wait(max(0.0, interval_s - (time.monotonic() - t0)))

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join(timeout=35)
        return self.samples


def wait_series(prom: PrometheusServer, expected: int, timeout_s: float) -> float:
    """Seconds until Prometheus holds ``expected`` DCGM series."""
    t0 = time.monotonic()
    got = 0.0
    while time.monotonic() - t0 < timeout_s:
        with contextlib.suppress(Exception):
            result = prom.query('count({__name__=~"DCGM_.*"})')
            got = float(result[0]["value"][1]) if result else 0.0
            if got >= expected:
                return time.monotonic() - t0
        time.sleep(0.5)
    raise RuntimeError(f"Prometheus holds {got:.0f} of {expected} series after {timeout_s:g}s:\n{prom.log_tail()}")


def stop_scraping(prom: PrometheusServer) -> None:
    """One scrape is all the benchmark needs: drop the target so no later scrape competes with the relists (the
    series stay listed: their samples are inside the relist's look-back)."""
    config = yaml.safe_load(prom.config_path.read_text())
    config["scrape_configs"] = []
    prom.config_path.write_text(yaml.safe_dump(config))
    prom.reload()


async def raw_series(prom_url: str, max_age_s: float) -> dict[str, Any]:
    """The relist's ``/api/v1/series`` calls, bytes read but not decoded: one after another as the adapter sends
    them, and all at once."""
    queries = gpu_presets().series_queries()
    end = time.time()
    clients = [RawClient(prom_url, 1) for _ in queries]

    def form(q: str) -> dict[str, str]:
        return {"match[]": q, "start": f"{end - max_age_s:.3f}", "end": f"{end:.3f}"}

    sequential, parallel = [], []
    try:
        for _ in range(2):  # the faster of two passes each: the first pass also warms Prometheus' caches
            t0 = time.perf_counter()
            for q in queries:
                await clients[0].request("POST", "/api/v1/series", form(q))
            sequential.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await asyncio.gather(*(c.request("POST", "/api/v1/series", form(q))
                                   for c, q in zip(clients, queries, strict=True)))
            parallel.append(time.perf_counter() - t0)
    finally:
        for c in clients:
            await c.aclose()
    # Sizes: one more sequential pass with httpx, for the body sizes and series counts (not timed).
    sizes, counts = 0, 0
    async with httpx.AsyncClient(base_url=prom_url, timeout=60.0, trust_env=False) as client:
        for q in queries:
            r = await client.post("/api/v1/series", data={"match[]": q, "start": f"{end - max_age_s:.3f}",
                                                         "end": f"{end:.3f}"})
            sizes += len(r.content)
            counts += len(r.json()["data"])
    return {"queries": len(queries), "wall_s": min(sequential), "parallel_s": min(parallel), "bytes": sizes,
            "series": counts}


def measure_adapter(prom_url: str, cert_dir: str, args: argparse.Namespace, extra: list[str], relists: int,
                    kubeconfig: str | None) -> dict[str, Any]:
    """Start an adapter, wait for ``relists`` relists after the first, and read its discovery figures and memory."""
    t0 = time.monotonic()
    adapter = AdapterProcess(prom_url, cert_dir, args=[
        "--metrics-relist-interval", f"{args.relist_interval:g}s", "--metrics-max-age", f"{args.max_age:g}s",
        "--prometheus-timeout", "60s", *(["--kubeconfig", kubeconfig] if kubeconfig else []), *extra],
        ready_timeout=120.0)
    try:
        ready_s = time.monotonic() - t0
        pid = adapter.proc.pid
        if kubeconfig:
            warm_pod_cache(adapter.client, "DCGM_FI_DEV_GPU_UTIL")
        started = rss_of(pid)["rss"]
        state = discovery_state(adapter)
        durations = [state["duration_s"]]
        poller = Poller(adapter.url, args.poll_ms / 1000.0)
        try:
            deadline = time.monotonic() + relists * args.relist_interval * 2 + 60
            last = state["last_success"]
            while len(durations) < relists + 1 and time.monotonic() < deadline:
                time.sleep(0.2)
                state = discovery_state(adapter)
                if state["last_success"] != last:
                    last = state["last_success"]
                    durations.append(state["duration_s"])
        finally:
            samples = poller.stop()
        mem = rss_of(pid)
        resources = len(adapter.get("/apis/custom.metrics.k8s.io/v1beta2").json()["resources"])
        stalls = [s for _, s in samples]
        return {"ready_s": ready_s, "relist_s": durations, "started_rss": started, "failures": state["failures"],
                "custom_metrics": state["custom_metrics"], "api_resources": resources, "rss": mem["rss"],
                "peak_rss": mem.get("peak", float("nan")), "healthz_n": len(stalls),
                "healthz_max_ms": 1000 * max(stalls) if stalls else float("nan"),
                "healthz_p99_ms": 1000 * pct(stalls, 99) if stalls else float("nan")}
    finally:
        adapter.stop()


def report(res: dict[str, Any]) -> None:
    d, raw, base = res["discovery"], res["raw"], res["baseline"]
    relists = d["relist_s"]
    print(f"\nPrometheus: {res['series']:,} GPU series ({res['gpus']:,} GPUs x {res['fields']} fields, "
          f"{res['namespaces']} namespaces), exposition {res['body_bytes'] / MB:.1f} MB, first scrape complete "
          f"{res['scrape_s']:.1f}s after start; Prometheus RSS {res['prom_rss'] / MIB:,.0f} MiB")
    rows = [
        ("series calls per relist", f"{raw['queries']}", "the presets' distinct seriesQuery"),
        ("series returned per relist", f"{raw['series']:,}", f"{raw['bytes'] / MB:.1f} MB of JSON"),
        ("Prometheus answering them (bytes only)", f"{raw['wall_s']:.2f} s",
         f"baseline: one after another as the adapter asks, same window; all at once: {raw['parallel_s']:.2f} s"),
        ("adapter relist (first, at startup)", f"{relists[0]:.2f} s", "gpu_adapter_discovery_last_duration_seconds"),
        ("adapter relist (later, median)", f"{sorted(relists[1:])[len(relists[1:]) // 2]:.2f} s" if relists[1:]
         else "-", f"{len(relists) - 1} relists: " + ", ".join(f"{x:.2f}" for x in relists[1:])),
        ("relist / Prometheus", f"{(sorted(relists)[len(relists) // 2]) / raw['wall_s']:.2f}x", "median relist"),
        ("adapter start to ready", f"{d['ready_s']:.2f} s", "process start, imports, first relist"),
        ("custom metrics discovered", f"{d['custom_metrics']:.0f}", f"{d['api_resources']} API resources"),
        ("import-only interpreter RSS", mib(res["import_rss"]),
         "python -c 'import adapter.cli.main, adapter.server.app'"),
        ("adapter RSS after start-up", mib(d["started_rss"]),
         f"ready, first relist, {res['kube_pods']:,}-pod watch cache synced; rules matching nothing: "
         f"{mib(base['started_rss'])}"),
        ("adapter RSS after relists", mib(d["rss"]), f"rules matching nothing: {mib(base['rss'])}"),
        ("adapter peak RSS (VmHWM)", mib(d["peak_rss"]), f"rules matching nothing: {mib(base['peak_rss'])}"),
        ("longest /healthz answer while relisting", f"{d['healthz_max_ms']:.0f} ms",
         f"p99 {d['healthz_p99_ms']:.1f} ms over {d['healthz_n']} polls; rules matching nothing: max "
         f"{base['healthz_max_ms']:.0f} ms"),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print()
    for r in rows:
        print(f"{r[0].ljust(widths[0])}  {r[1].rjust(widths[1])}  {r[2]}")
    notes = []
    if max(relists) > 2.0:
        notes.append(f"slowest relist {max(relists):.2f} s misses the 2 s goal")
    if d["peak_rss"] > 150 * MB:
        notes.append(f"peak RSS {d['peak_rss'] / MB:.0f} MB misses the 150 MB goal")
    if d["started_rss"] > 112 * MIB:
        notes.append(f"RSS after start-up {mib(d['started_rss'])} misses the 112 MiB goal")
    for note in notes:
        print("note:", note)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--gpus", type=int, default=12_500, help="GPUs (8 per node, one pod each; default 12,500)")
    p.add_argument("--fields", type=int, default=8, choices=range(1, len(FIELDS) + 1), metavar="N",
                   help=f"DCGM fields per GPU (1-{len(FIELDS)}, default 8: 100,000 series)")
    p.add_argument("--namespaces", type=int, default=50, help="namespaces the pods are spread over")
    p.add_argument("--relists", type=int, default=3, help="relists timed after the first (default 3)")
    p.add_argument("--relist-interval", type=float, default=10.0, help="adapter --metrics-relist-interval, s")
    p.add_argument("--max-age", type=float, default=300.0, help="adapter --metrics-max-age, s (covers the data)")
    p.add_argument("--scrape-interval", type=int, default=30,
                   help="Prometheus scrape interval and timeout, s (one scrape is taken, then the target dropped)")
    p.add_argument("--kube-pods", type=int, default=5_000,
                   help="pods in the fake Kubernetes API whose watch cache the adapter holds (0: no API)")
    p.add_argument("--poll-ms", type=float, default=50.0, help="/healthz poll interval during relists")
    p.add_argument("--quick", action="store_true", help="2,500 GPUs x 8 fields (20,000 series), 2 relists")
    p.add_argument("--adapter-from", type=Path, default=None, metavar="DIR",
                   help="run the adapter from another checkout, for a before/after comparison")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.gpus, args.relists = 2_500, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    exit_on_sigterm()
    os.chdir(args.adapter_from or ROOT)  # `python -m adapter` runs this checkout, not an installed copy
    series = args.gpus * args.fields
    header = [machine_line(), GOALS,
              f"gpus={args.gpus} fields={args.fields} series={series:,} relists={args.relists} "
              f"relist-interval={args.relist_interval:g}s max-age={args.max_age:g}s rules: GPU presets",
              f"adapter from {args.adapter_from or ROOT}"]
    print("\n".join(header), flush=True)
    t0 = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-discovery-"))
    body = exposition(args.gpus, args.fields, args.namespaces)
    endpoint = MetricsEndpoint(body)
    prom: PrometheusServer | None = None
    try:
        interval = f"{args.scrape_interval}s"
        prom = PrometheusServer([endpoint.address], job="dcgm-exporter", honor_labels=True,
                                scrape_interval=interval).start()
        print(f"... Prometheus scraping {len(body) / MB:.1f} MB", flush=True)
        scrape_s = wait_series(prom, series, timeout_s=args.scrape_interval + 120)
        stop_scraping(prom)
        res: dict[str, Any] = {"gpus": args.gpus, "fields": args.fields, "namespaces": args.namespaces,
                               "series": series, "body_bytes": len(body), "scrape_s": scrape_s}
        res["raw"] = asyncio.run(raw_series(prom.url, args.max_age))
        print(f"... Prometheus answers the relist's series calls in {res['raw']['wall_s']:.2f}s", flush=True)
        cert_dir = str(workdir / "certs")
        res["import_rss"], res["kube_pods"] = import_only_rss(args.adapter_from or ROOT), args.kube_pods
        with kube_with_pods(args.kube_pods, workdir) as kubeconfig:
            res["discovery"] = measure_adapter(prom.url, cert_dir, args, [], args.relists, kubeconfig)
            print(f"... adapter relists: {', '.join(f'{x:.2f}s' for x in res['discovery']['relist_s'])}", flush=True)
            rules = workdir / "no-match.yaml"
            rules.write_text(NO_MATCH_RULES)
            res["baseline"] = measure_adapter(prom.url, cert_dir, args, ["--config", str(rules)], 1, kubeconfig)
        res["prom_rss"] = psutil.Process(prom.pid).memory_info().rss
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if prom is not None:
            prom.stop()
        endpoint.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report(res)
    finish(args, header[0], GOALS, res, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
