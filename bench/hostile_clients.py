"""Slow, flooding and oversized clients against a real adapter (in front of a real Prometheus) and a real exporter
(scraped by a real Prometheus), while an HPA-shaped client keeps asking.

Attacks (bench/hostile.py says exactly what each client sends):
  slow       N TLS connections (12,000) that send a request line and then a header every 5 s, held for a while
  stalled    N TCP connections that never start TLS (TLS ports only)
  flood      1,000 kept-alive connections asking an expensive request again as soon as it is answered (the adapter:
             a Pods metric over a 1,500-pod label selector with the query cache off; the exporter: /metrics)
  oversized  one request whose header line is 200 MB
Printed per target and attack: the most connections the server held at once, how long until it closed the slow ones,
its RSS before, at the peak and 10 s after (next to the chart's memory limit), the HPA-shaped client's requests during
and after the attack (p50/p99/max, failed; on one kept-alive connection as the aggregator holds one, and on a new
connection each time), the 429s the server sent; for the exporter, the scrapes the real Prometheus missed.
``--before DIR`` runs the same attacks against another checkout (e.g. a git worktree of main before the limits) in
the same run. The KEDA port's attacks are in bench/hostile_grpc.py.

Usage: ``python bench/hostile_clients.py [--targets adapter,exporter] [--attacks slow,stalled,flood,oversized]
[--slow 12000] [--flood 1000] [--hold 40] [--before DIR] [--quick] [--json FILE]`` (about 12 minutes for both
targets; ``--quick``: 2,000 slow connections, 200 flooding, about 4 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapter_load import NAMESPACE, exposition, objects_document  # noqa: E402  (bench/adapter_load.py)
from exporter_scrape import machine_line  # noqa: E402
from hostile import MIB, Probe, flood, oversized, slow_heads, stalled_handshakes  # noqa: E402
from rss import RssSampler  # noqa: E402

from tests.support.adapter_process import AdapterProcess  # noqa: E402
from tests.support.certs import issue, make_ca  # noqa: E402
from tests.support.exporter_process import ExporterProcess  # noqa: E402
from tests.support.metrics_endpoint import MetricsEndpoint  # noqa: E402
from tests.support.prometheus import PrometheusServer  # noqa: E402

CHART_MEMORY_LIMIT_MIB = {"adapter": 512, "exporter": 256}
EXPENSIVE_PODS, PROBE_PODS = 1500, 10
PODS_PATH = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{NAMESPACE}/pods/*/DCGM_FI_DEV_GPU_UTIL"


@dataclass
class Target:
    name: str  # "adapter", "adapter (before)", "exporter", ...
    port: int
    pid: int
    tls: bool
    probe_path: str
    flood_path: str
    missed_scrapes: Callable[[float, float], int | None] = lambda _a, _b: None


@dataclass
class Settings:
    slow: int
    flood: int
    hold_s: float
    settle_s: float


def attack_in_child(port: int, tls: bool, attack: str, path: str, s: Settings) -> dict[str, Any]:
    """Run one attack in this (child) process and return what it saw: the attacking client's own CPU (thousands of
    TLS handshakes) must not delay the probes, which run in the parent."""

    async def go() -> dict[str, Any]:
        if attack == "oversized":
            big = await oversized(port, tls)
            return {"sent_mib": round(big.sent_bytes / MIB, 1), "answer": big.status, "seconds": round(big.seconds, 1)}
        stop = asyncio.Event()
        if attack == "slow":
            running = asyncio.ensure_future(slow_heads(port, tls, s.slow, stop))
        elif attack == "stalled":
            running = asyncio.ensure_future(stalled_handshakes(port, s.slow, stop))
        else:
            running = asyncio.ensure_future(flood(port, tls, path, s.flood, stop))
        await asyncio.sleep(s.hold_s)
        stop.set()
        outcome = await running
        if attack == "flood":
            return {"answers": outcome.answers, "errors": outcome.errors}
        closed = sorted(outcome.closed_after_s)
        return {"opened": outcome.opened, "failed_to_open": outcome.failed_to_open, "most_open": outcome.most_open,
                "closed_by_server": len(closed),
                "close_median_s": round(closed[len(closed) // 2], 1) if closed else None,
                "close_max_s": round(closed[-1], 1) if closed else None}

    return asyncio.run(go())


async def run_attack(target: Target, attack: str, s: Settings) -> dict[str, Any]:
    """One attack (in a child process) with both probes running here, from before it to ``settle_s`` after it."""
    sampler = RssSampler(target.pid)
    stop_probes = asyncio.Event()
    probes = [Probe(target.port, target.tls, target.probe_path),
              Probe(target.port, target.tls, target.probe_path, fresh=True)]
    probing = [asyncio.ensure_future(p.run(stop_probes)) for p in probes]
    await asyncio.sleep(2)
    start, wall_start = time.monotonic(), time.time()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        seen = await asyncio.get_running_loop().run_in_executor(
            pool, attack_in_child, target.port, target.tls, attack, target.flood_path, s)
    result: dict[str, Any] = {"target": target.name, "attack": attack, **seen}
    ended = time.monotonic()
    await asyncio.sleep(s.settle_s)
    rss = sampler.stop()
    stop_probes.set()
    await asyncio.gather(*probing)
    result.update({k: round(v, 1) for k, v in rss.items()},
                  memory_limit_mib=CHART_MEMORY_LIMIT_MIB[target.name.split()[0]])
    for probe, kind in zip(probes, ("kept-alive", "new connection"), strict=True):
        result[f"probe {kind}, during"] = probe.summary(start, ended)
        result[f"probe {kind}, after"] = probe.summary(ended)
        result[f"probe {kind} 429 retries"] = probe.retries_429
    missed = target.missed_scrapes(wall_start, time.time())
    if missed is not None:
        result["prometheus scrapes missed"] = missed
    return result


def line(r: dict[str, Any]) -> str:
    parts = [f"{r['target']:18} {r['attack']:9}"]
    if "most_open" in r:
        parts.append(f"held max {r['most_open']:>5} of {r['opened']:>5} opened ({r['failed_to_open']} refused), "
                     f"closed by server {r['closed_by_server']} (median {r['close_median_s']} s, "
                     f"max {r['close_max_s']} s)")
    if "answers" in r:
        parts.append(f"answers {r['answers']} errors {r['errors']}")
    if "sent_mib" in r:
        parts.append(f"sent {r['sent_mib']} MiB before the answer {r['answer']} ({r['seconds']} s)")
    parts.append(f"RSS {r['rss_before_mib']} -> peak {r['rss_peak_mib']} -> after {r['rss_after_mib']} MiB "
                 f"(limit {r['memory_limit_mib']})")
    for kind in ("kept-alive", "new connection"):
        during, after = r[f"probe {kind}, during"], r[f"probe {kind}, after"]
        parts.append(f"probe {kind}: during {_probe(during)}, after {_probe(after)}, "
                     f"429 retries {r[f'probe {kind} 429 retries']}")
    if "prometheus scrapes missed" in r:
        parts.append(f"Prometheus scrapes missed {r['prometheus scrapes missed']}")
    return "\n    ".join(parts)


def _probe(p: dict[str, Any]) -> str:
    if "p50_ms" not in p:
        return f"{p['requests']} requests, {p['failed']} failed"
    return f"{p['requests']} req p50 {p['p50_ms']} p99 {p['p99_ms']} max {p['max_ms']} ms, {p['failed']} failed"


# -- targets ---------------------------------------------------------------------------------------------------------
@contextmanager
def adapter_target(workdir: Path, name: str, checkout: Path | None, extra: list[str] | None = None) -> Iterator[Target]:
    groups = {f"a{n}": [f"a{n}-{i}" for i in range(n)] for n in (PROBE_PODS, EXPENSIVE_PODS)}
    endpoint = MetricsEndpoint(exposition(groups))
    prom = PrometheusServer([endpoint.address], honor_labels=True, scrape_interval="5s").start()
    objects = workdir / "objects.yaml"
    objects.write_text(yaml.safe_dump(objects_document(groups)))
    adapter = None
    try:
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", lambda r: len(r) == PROBE_PODS + EXPENSIVE_PODS, timeout=60)
        adapter = AdapterProcess(prom.url, str(workdir / f"certs-{name}"), [
            "--standalone-objects", str(objects), "--query-cache-ttl", "0", "--prometheus-timeout", "10s",
            *(extra or [])],
            ready_timeout=60.0, cwd=checkout)
        yield Target(name, adapter.port, adapter.proc.pid, True, f"{PODS_PATH}?labelSelector=app%3Da{PROBE_PODS}",
                     f"{PODS_PATH}?labelSelector=app%3Da{EXPENSIVE_PODS}")
    finally:
        if adapter is not None:
            adapter.stop()
        prom.stop()
        endpoint.stop()


@contextmanager
def exporter_target(workdir: Path, name: str, checkout: Path | None, tls: bool) -> Iterator[Target]:
    args = ["--backend", "fake", "--fake-gpu-count", "8"]
    client: dict[str, Any] = {}
    if tls:
        ca = make_ca("bench exporter CA")
        issue(ca, "gpu-exporter", client=False, server_names=("127.0.0.1",)).write(workdir, "exporter")
        (workdir / "web.yaml").write_text(yaml.safe_dump({"tls_server_config": {
            "cert_file": str(workdir / "exporter.crt"), "key_file": str(workdir / "exporter.key")}}))
        args += ["--web-config-file", str(workdir / "web.yaml")]
        client = {"verify": False}
    exp = ExporterProcess(args, scheme="https" if tls else "http", client=client, cwd=checkout)
    prom = PrometheusServer([exp.address], scrape_interval="1s", scrape_options={
        "scheme": "https", "tls_config": {"insecure_skip_verify": True}} if tls else None).start()
    try:
        prom.wait_for("up", lambda r: len(r) == 1 and r[0]["value"][1] == "1", timeout=60)

        def missed(start: float, end: float) -> int | None:
            window = max(1, int(end - start) + 1)
            found = prom.query(f"count_over_time(up[{window}s]) - sum_over_time(up[{window}s])", at=end)
            return int(float(found[0]["value"][1])) if found else None

        yield Target(name, exp.port, exp.proc.pid, tls, "/metrics", "/metrics", missed)
    finally:
        prom.stop()
        exp.stop()


async def attack_target(target: Target, attacks: list[str], s: Settings, out: list[dict[str, Any]]) -> None:
    for attack in attacks:
        if attack == "stalled" and not target.tls:
            continue
        result = await run_attack(target, attack, s)
        out.append(result)
        print(line(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="adapter,exporter", help="adapter, exporter (plain and TLS)")
    parser.add_argument("--attacks", default="slow,stalled,flood,oversized")
    parser.add_argument("--slow", type=int, default=12000, help="slow (and stalled) connections")
    parser.add_argument("--flood", type=int, default=1000, help="flooding connections")
    parser.add_argument("--hold", type=float, default=40.0, help="seconds each attack lasts after it began")
    parser.add_argument("--before", type=Path, help="another checkout to attack the same way, in the same run")
    parser.add_argument("--adapter-arg", action="append", default=[], help="an extra gpu-adapter serve flag")
    parser.add_argument("--quick", action="store_true", help="2,000 slow, 200 flooding, 20 s each")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    s = Settings(args.slow, args.flood, args.hold, 10.0)
    if args.quick:
        s = Settings(2000, 200, 20.0, 10.0)
    attacks = [a.strip() for a in args.attacks.split(",")]
    print(machine_line())
    print(f"settings: {s}; chart memory limits (MiB): {CHART_MEMORY_LIMIT_MIB}")
    rows: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    checkouts = [("", None)] + ([(" (before)", args.before.resolve())] if args.before else [])
    try:
        for target in args.targets.split(","):
            for suffix, checkout in checkouts:
                if target.strip() == "adapter":
                    with adapter_target(workdir, "adapter" + suffix, checkout,
                                        args.adapter_arg if checkout is None else []) as t:
                        asyncio.run(attack_target(t, attacks, s, rows))
                else:
                    for tls in (False, True):
                        name = f"exporter{' tls' if tls else ''}{suffix}"
                        directory = workdir / name.replace(" ", "-").replace("(", "").replace(")", "")
                        directory.mkdir()
                        with exporter_target(directory, name, checkout, tls) as t:
                            asyncio.run(attack_target(t, attacks, s, rows))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"settings": str(s), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
