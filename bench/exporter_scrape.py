"""Scrape benchmark for ``gpu-exporter``: /metrics latency, CPU per collection, RSS, concurrency.

Prints figures next to a floor server (``http.server.ThreadingHTTPServer``, HTTP/1.1 keep-alive, serving a static
body of the same size as one pre-built response written in a single send) and never asserts timings. Each timed
loop stops early at ``--loop-budget-s`` so a slow exporter still finishes; ``n`` columns say how many were timed.
Simulated GPUs (``--backend fake``, one row per ``--gpus`` count) by default; ``--backend nvml`` measures the
machine's real GPUs through NVML in one row (the GPU count and model are read off the first scrape).
Usage: ``python bench/exporter_scrape.py [--gpus 8,64] [--backend fake|nvml] [--scrapes 2000] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from loadtest.standins.prometheus import free_port  # noqa: E402

GOALS = "goals: p50 < 1 ms, RSS < 50 MB (8 GPUs)"
IDENTITY = {"Accept-Encoding": "identity"}
GZIP = {"Accept-Encoding": "gzip"}
THREADS = 8
MIB = 1024 * 1024

FLOOR_SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY = open(sys.argv[1], "rb").read()
HEAD = "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: %d\r\n\r\n" % len(BODY)

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        # Status line, headers and body in one send: the floor of what this server stack can do.
        status = "HTTP/1.1 200 OK\r\nServer: floor\r\nDate: %s\r\n" % self.date_time_string()
        self.wfile.write(status.encode() + HEAD.encode() + BODY)

    def log_message(self, format, *args):
        pass

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
"""


# -- helpers ---------------------------------------------------------------------------------------------------
def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (need not be sorted)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def sample_value(text: str, name: str) -> float:
    """Value of the first unlabelled sample ``name`` in exposition ``text``."""
    prefix = name + " "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    raise KeyError(name)


def series_count(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


_GPU_LABELS = re.compile(rb'[{,]gpu="(\d+)".*?[{,]modelName="([^"]*)"')


def gpus_in(body: bytes) -> tuple[int, str]:
    """(GPU count, models) of an exposition: distinct ``gpu`` labels, and their ``modelName`` values joined."""
    found = dict(_GPU_LABELS.findall(body))
    return len(found), ", ".join(sorted({m.decode() for m in found.values()}))


def machine_line() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"machine: {model}, {os.cpu_count()} cores ({psutil.cpu_count(logical=False)} physical), "
            f"Python {platform.python_version()} ({platform.python_implementation()}), {platform.system()}")


class Proc:
    """A subprocess in its own session (Ctrl-C reaches only us), stopped by :meth:`stop`."""

    def __init__(self, argv: list[str], name: str) -> None:
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)  # noqa: SIM115
        self.popen = subprocess.Popen(argv, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        self.ps = psutil.Process(self.popen.pid)

    def wait_ready(self, url: str, timeout_s: float = 30.0) -> None:
        """Poll ``url`` until it answers 200; raise (with the log tail) on exit or timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready at {url} after {timeout_s:g}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


# -- measurements ----------------------------------------------------------------------------------------------
def timed_get(client: httpx.Client, url: str, headers: dict[str, str]) -> tuple[float, httpx.Response]:
    t0 = time.perf_counter()
    r = client.get(url, headers=headers)
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    return elapsed * 1000.0, r


def timed_loop(client: httpx.Client, url: str, headers: dict[str, str], n: int, deadline: float) -> list[float]:
    """Latencies (ms) of up to ``n`` sequential GETs, stopping at ``deadline`` (monotonic)."""
    lat: list[float] = []
    while len(lat) < n and (not lat or time.monotonic() < deadline):
        lat.append(timed_get(client, url, headers)[0])
    return lat


def sequential(client: httpx.Client, url: str, headers: dict[str, str], args: argparse.Namespace,
               ) -> tuple[list[float], int]:
    """(latencies ms, warmup count): sequential GETs on one keep-alive client after a warmup, within the budget."""
    start = time.monotonic()
    warm = len(timed_loop(client, url, headers, args.warmup, start + args.loop_budget_s / 4))
    return timed_loop(client, url, headers, args.scrapes, start + args.loop_budget_s), warm


def concurrent(url: str, n: int, budget_s: float) -> tuple[float, list[float]]:
    """``THREADS`` threads, one keep-alive client each, ``n`` scrapes in all: (scrapes/s, latencies ms)."""
    per = max(1, n // THREADS)
    deadline = time.monotonic() + budget_s
    results: list[list[float]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS + 1)

    def worker(i: int) -> None:
        try:
            with httpx.Client(headers=IDENTITY, timeout=30.0) as client:
                client.get(url).raise_for_status()  # connect before the clock starts
                barrier.wait()
                results[i] = timed_loop(client, url, IDENTITY, per, deadline)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"concurrent scrape failed: {errors[0]!r}")
    lat = [x for r in results for x in r]
    return len(lat) / wall, lat


def idle_window(proc: psutil.Process, client: httpx.Client, url: str, seconds: float, interval_s: float,
                cpu_per_scrape_s: float) -> dict[str, float]:
    """CPU per collection over ``seconds`` without load; one sampling scrape per interval, its CPU subtracted."""
    text = client.get(url, headers=IDENTITY).text
    total0, cpu0, t0 = sample_value(text, "gpu_exporter_collections_total"), cpu_s(proc), time.monotonic()
    durations: list[float] = []
    samples = 0
    while (left := t0 + seconds - time.monotonic()) > 0:
        time.sleep(min(interval_s, left))
        if time.monotonic() - t0 >= seconds:
            break
        text = client.get(url, headers=IDENTITY).text
        durations.append(sample_value(text, "gpu_exporter_collection_duration_seconds"))
        samples += 1
    cpu1, t1 = cpu_s(proc), time.monotonic()
    text = client.get(url, headers=IDENTITY).text
    samples += 1
    collections = sample_value(text, "gpu_exporter_collections_total") - total0
    durations.append(sample_value(text, "gpu_exporter_collection_duration_seconds"))
    cpu = max(0.0, cpu1 - cpu0 - (samples - 1) * cpu_per_scrape_s)  # the final scrape came after cpu1
    return {
        "idle_window_s": t1 - t0,
        "collections": collections,
        "cpu_ms_per_collection": cpu * 1000.0 / collections if collections else float("nan"),
        "cpu_pct_one_core": 100.0 * cpu / (t1 - t0),
        "collection_duration_ms_mean": 1000.0 * sum(durations) / len(durations),
    }


def bench_floor(body: bytes, args: argparse.Namespace) -> dict[str, float]:
    """Sequential latency of the floor server serving ``body`` as a static response."""
    with tempfile.NamedTemporaryFile(prefix="bench-floor-body-", delete=False) as f:
        f.write(body)
    port = free_port()
    floor = Proc([sys.executable, "-c", FLOOR_SERVER, f.name, str(port)], "floor")
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        floor.wait_ready(url)
        with httpx.Client(timeout=30.0) as client:
            lat, _ = sequential(client, url, IDENTITY, args)
        return {"floor_n": len(lat), "floor_p50_ms": pct(lat, 50), "floor_p99_ms": pct(lat, 99),
                "floor_max_ms": max(lat)}
    finally:
        floor.stop()
        Path(f.name).unlink(missing_ok=True)


def exporter_argv(gpus: int, args: argparse.Namespace, port: int) -> list[str]:
    argv = [sys.executable, "-m", "exporter", "--backend", args.backend,
            "--address", f"127.0.0.1:{port}", "--collect-interval", str(args.interval_ms)]
    if args.backend == "fake":
        argv += ["--fake-gpu-count", str(gpus)]
    if args.collectors:
        argv += ["--collectors", str(args.collectors)]
    return argv


def bench_gpus(gpus: int, args: argparse.Namespace, started: list[Proc]) -> dict[str, Any]:
    port = free_port()
    exporter = Proc(exporter_argv(gpus, args, port), "exporter")
    started.append(exporter)
    base = f"http://127.0.0.1:{port}"
    exporter.wait_ready(base + "/health")
    url = base + "/metrics"
    res: dict[str, Any] = {"gpus": gpus, "rss_start_mib": exporter.ps.memory_info().rss / MIB}
    with httpx.Client(timeout=30.0) as client:
        first_ms, r = timed_get(client, url, IDENTITY)
        body = r.content
        res |= {"first_scrape_ms": first_ms, "body_bytes": len(body), "series": series_count(body)}
        res["gpus"], res["model"] = gpus_in(body)
        if args.backend == "fake" and res["gpus"] != gpus:
            raise RuntimeError(f"asked for {gpus} simulated GPUs, /metrics shows {res['gpus']}")

        cpu0 = cpu_s(exporter.ps)
        lat, warm = sequential(client, url, IDENTITY, args)
        res["cpu_ms_per_scrape"] = (cpu_s(exporter.ps) - cpu0) * 1000.0 / (len(lat) + warm)
        res |= {"n": len(lat), "p50_ms": pct(lat, 50), "p90_ms": pct(lat, 90), "p99_ms": pct(lat, 99),
                "max_ms": max(lat)}

        _, gz = timed_get(client, url, GZIP)
        if gz.headers.get("Content-Encoding") != "gzip":
            raise RuntimeError("exporter ignored Accept-Encoding: gzip")
        res["gzip_bytes"] = int(gz.headers["Content-Length"])
        glat, _ = sequential(client, url, GZIP, args)
        res |= {"gzip_n": len(glat), "gzip_p50_ms": pct(glat, 50), "gzip_p99_ms": pct(glat, 99),
                "gzip_max_ms": max(glat)}

        rate, clat = concurrent(url, args.scrapes, args.loop_budget_s)
        res |= {"conc_n": len(clat), "conc_scrapes_per_s": rate, "conc_p50_ms": pct(clat, 50),
                "conc_p99_ms": pct(clat, 99)}
        res["rss_mib"] = exporter.ps.memory_info().rss / MIB

        res |= idle_window(exporter.ps, client, url, args.idle_s, args.interval_ms / 1000.0,
                           res["cpu_ms_per_scrape"] / 1000.0)
    exporter.stop()
    started.remove(exporter)

    res |= bench_floor(body, args)
    res["ratio_p50"] = res["p50_ms"] / res["floor_p50_ms"]
    res["ratio_p99"] = res["p99_ms"] / res["floor_p99_ms"]
    return res


# -- output ----------------------------------------------------------------------------------------------------
TABLES: list[tuple[str, list[tuple[str, str, str]]]] = [
    ("/metrics, one keep-alive client, sequential (ms)", [
        ("GPUs", "gpus", "{:d}"), ("series", "series", "{:d}"), ("body bytes", "body_bytes", "{:,d}"),
        ("first", "first_scrape_ms", "{:.2f}"), ("n", "n", "{:d}"), ("p50", "p50_ms", "{:.3f}"),
        ("p90", "p90_ms", "{:.3f}"), ("p99", "p99_ms", "{:.3f}"), ("max", "max_ms", "{:.2f}"),
    ]),
    ("floor: ThreadingHTTPServer, static body of the same size, same client loop (ms)", [
        ("GPUs", "gpus", "{:d}"), ("n", "floor_n", "{:d}"), ("p50", "floor_p50_ms", "{:.3f}"),
        ("p99", "floor_p99_ms", "{:.3f}"), ("max", "floor_max_ms", "{:.2f}"),
        ("exporter/floor p50", "ratio_p50", "{:.2f}x"), ("exporter/floor p99", "ratio_p99", "{:.2f}x"),
    ]),
    ("gzip (sequential) and concurrency (identity)", [
        ("GPUs", "gpus", "{:d}"), ("gzip bytes", "gzip_bytes", "{:,d}"), ("gz n", "gzip_n", "{:d}"),
        ("gz p50 ms", "gzip_p50_ms", "{:.3f}"), ("gz p99 ms", "gzip_p99_ms", "{:.3f}"),
        ("gz max ms", "gzip_max_ms", "{:.2f}"), (f"{THREADS}-thr n", "conc_n", "{:d}"),
        (f"{THREADS}-thr scrapes/s", "conc_scrapes_per_s", "{:,.0f}"),
        (f"{THREADS}-thr p50 ms", "conc_p50_ms", "{:.2f}"), (f"{THREADS}-thr p99 ms", "conc_p99_ms", "{:.2f}"),
    ]),
    ("exporter process: CPU over the idle window, RSS", [
        ("GPUs", "gpus", "{:d}"), ("collections", "collections", "{:.0f}"),
        ("CPU ms/collection", "cpu_ms_per_collection", "{:.2f}"), ("idle CPU %", "cpu_pct_one_core", "{:.2f}"),
        ("duration gauge ms", "collection_duration_ms_mean", "{:.3f}"),
        ("CPU ms/scrape", "cpu_ms_per_scrape", "{:.3f}"),
        ("RSS start MiB", "rss_start_mib", "{:.1f}"), ("RSS MiB", "rss_mib", "{:.1f}"),
    ]),
]


def print_plain(results: list[dict[str, Any]]) -> None:
    for title, cols in TABLES:
        widths = [max(len(head), 9) for head, _, _ in cols]
        print(f"\n{title}\n" + "  ".join(h.rjust(w) for (h, _, _), w in zip(cols, widths, strict=True)))
        for res in results:
            print("  ".join(f.format(res[k]).rjust(w) for (_, k, f), w in zip(cols, widths, strict=True)))


def print_report(results: list[dict[str, Any]]) -> None:
    """One table per topic, one row per GPU count; rich when installed, else plain text."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print_plain(results)
        return
    console = Console(width=max(120, Console().width))
    for title, cols in TABLES:
        table = Table(title=title, title_justify="left")
        for head, _, _ in cols:
            table.add_column(head, justify="right")
        for res in results:
            table.add_row(*(f.format(res[k]) for _, k, f in cols))
        console.print(table)


def notes(results: list[dict[str, Any]]) -> list[str]:
    """Plain-language observations: missed goals and a known latency signature. Informational only."""
    out = []
    for res in results:
        g = res["gpus"]
        if g == 8 and res["p50_ms"] >= 1.0:
            out.append(f"{g} GPUs: p50 {res['p50_ms']:.2f} ms misses the 1 ms goal")
        if g == 8 and res["rss_mib"] * MIB >= 50e6:
            out.append(f"{g} GPUs: RSS {res['rss_mib'] * MIB / 1e6:.1f} MB misses the 50 MB goal")
        for key, what in (("p50_ms", "p50"), ("gzip_p50_ms", "gzip p50")):
            if 38.0 <= res[key] <= 50.0 and res[key] > 10 * res["floor_p50_ms"]:
                out.append(f"{g} GPUs: {what} {res[key]:.1f} ms is the Nagle + delayed-ACK signature (~40 ms), typical "
                           "of a response sent as two writes (headers, then body) without TCP_NODELAY")
    return out


def int_list(text: str) -> list[int]:
    """``"8,64"`` -> ``[8, 64]``."""
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--gpus", default="8,64", type=int_list,
                   help="comma-separated simulated GPU counts (default 8,64)")
    p.add_argument("--backend", choices=("fake", "nvml"), default="fake",
                   help="fake: simulated GPUs, a row per --gpus count; nvml: this machine's GPUs, one row")
    p.add_argument("--collectors", type=Path, default=None, metavar="CSV",
                   help="counters file for the exporter (-f); default: its built-in default set")
    p.add_argument("--scrapes", type=int, default=2000, help="timed scrapes per configuration and mode")
    p.add_argument("--interval-ms", type=int, default=1000, help="exporter --collect-interval")
    p.add_argument("--warmup", type=int, default=100, help="untimed scrapes before each timed loop")
    p.add_argument("--idle-s", type=float, default=10.0, help="idle window for CPU per collection")
    p.add_argument("--loop-budget-s", type=float, default=6.0,
                   help="wall-time cap per timed loop (warmup included); a loop stops early when reached")
    p.add_argument("--quick", action="store_true", help="500 scrapes, a 3 s idle window (about 15 s in all)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.scrapes, args.warmup, args.idle_s = 500, 50, 3.0
    return args


def exit_on_sigterm() -> None:
    """SIGTERM ends the run through SystemExit, so ``finally`` blocks stop every process the benchmark started."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)


def finish(args: argparse.Namespace, machine: str, goals: str, results: object, started: float) -> None:
    """The end of every benchmark: the goals and the wall time, and the results as JSON when ``--json`` asked."""
    print(f"\n{goals}\ntotal {time.monotonic() - started:.1f}s")
    if args.json:
        doc = {"machine": machine, "goals": goals, "args": {k: str(v) for k, v in vars(args).items()},
               "results": results}
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    exit_on_sigterm()
    header = [machine_line(), GOALS,
              f"backend={args.backend} scrapes={args.scrapes} warmup={args.warmup} interval={args.interval_ms}ms "
              f"idle={args.idle_s:g}s"]
    print("\n".join(header), flush=True)
    started: list[Proc] = []
    results: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        for gpus in args.gpus if args.backend == "fake" else [0]:
            print(f"... {gpus or 'NVML'} GPUs", flush=True)
            results.append(bench_gpus(gpus, args, started))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        for proc in started:
            proc.stop()
    print_report(results)
    for res in results:
        print(f"GPUs: {res['gpus']} x {res['model'] or 'unknown model'} ({args.backend} backend)")
    for note in notes(results):
        print("note:", note)
    finish(args, header[0], GOALS, results, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
