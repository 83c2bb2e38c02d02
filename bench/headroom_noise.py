"""How often the capacity-headroom preset's request-rate growth reads above 0 for a flat Poisson load, measured
through a real Prometheus: the false positives that make a scale-from-zero HPA buy a GPU node for nothing.

For each case (a rate in requests/s, a scrape interval) the script writes a flat Poisson arrival counter (counts
per second from ``random.Random(seed)``, summed per scrape, each scrape a fixed fraction of its interval after the
minute so that no sample sits on a window's edge) as the endpoint picker's request counter
(``llm_d_epp_request_total``, labels ``namespace``, ``pod``, ``model_name``) beside the pool-saturation gauge the
External rule is discovered from and joins on (``llm_d_epp_flow_control_pool_saturation``, labels
``inference_pool``, ``namespace``, ``pod``): two series per case, the External path (``gateway_arrivals_query``; the
Object path would need three series per server and kube-state-metrics' owner series). The flow-control queue has no
series, read as 0 by the query's ``or vector(0)``. The file is backfilled with ``promtool tsdb create-blocks-from
openmetrics``, a Prometheus started on those blocks (no scrape targets), and the query the adapter sends for
``inference_request_rate_growth`` (``gpu-adapter explain --output json`` of the External request, the rules file
``include: [capacity-headroom]``) evaluated with ``query_range`` at a 15 s step over the flat stretch, after the
first WINDOW + RATE_WINDOW.

Baseline in the same run: the same arrivals without the noise margin (NOISE_SIGMAS = 0: the preset's plain
``clamp_min(deriv((arrivals)[WINDOW:STEP]), 0)``, rendered by the adapter from a rules file that holds only that),
which a flat load reads above 0 about half the time. Both cases of a rate share one arrival sequence, scraped at
15 s and at 30 s. Nothing here asserts a figure.

    python bench/headroom_noise.py [--quick] [--minutes 1200] [--seed 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from exporter_scrape import machine_line  # noqa: E402

from adapter.presets.capacity import (  # noqa: E402
    EPP_REQUESTS,
    NOISE_SIGMAS,
    POOL_SERIES,
    RATE_WINDOW,
    REQUEST_GROWTH_METRIC,
    STEP,
    WINDOW,
    _growth,
    gateway_arrivals_query,
)
from adapter.presets.gateway import NAMESPACE_ONLY, preset_rule  # noqa: E402
from clikit.durations import parse_prometheus_duration  # noqa: E402
from loadtest.standins.prometheus import free_port  # noqa: E402

RATES = (8.0, 55.0, 100.0)
"""Requests/s: a small service, the demo's load, a busy one."""
SCRAPES = (15, 30)
"""Scrape intervals (s): Prometheus' common settings."""
EVAL_STEP = 15
"""The query_range step (s): the HPA's sync period."""
SCRAPE_PHASE = 0.37
"""Where in its interval each scrape falls (a fraction): off the subquery's 15 s grid, as a real scrape is."""
COUNTER = EPP_REQUESTS[0]
POOL_GAUGE = "llm_d_epp_flow_control_pool_saturation"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"


@dataclass(frozen=True)
class Case:
    rate: float
    scrape_s: int

    @property
    def name(self) -> str:
        return f"r{self.rate:g}-s{self.scrape_s}".replace(".", "p")


@dataclass
class Reads:
    """One query's reads over the flat stretch."""

    evaluations: int
    above_zero: int
    excursions: int
    max_value: float
    minutes: float

    @property
    def share(self) -> float:
        return self.above_zero / self.evaluations if self.evaluations else math.nan

    @property
    def per_100_min(self) -> float:
        return self.excursions * 100 / self.minutes if self.minutes else math.nan


def poisson(rng: random.Random, lam: float) -> int:
    """A Poisson(lam) count (Knuth's product of uniforms; exact, O(lam), fine up to several hundred)."""
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def per_second_counts(rate: float, seconds: int, seed: int) -> list[int]:
    rng = random.Random(f"{seed}-{rate:g}")
    return [poisson(rng, rate) for _ in range(seconds)]


def openmetrics(cases: Sequence[Case], counts: dict[float, list[int]], t0: int) -> str:
    """The backfill file: per case its request counter and its pool's saturation gauge, one sample per scrape; a
    scrape reads the arrivals of every whole second before it (per scrape interval, the sum of its seconds)."""
    counter_rows, gauge_rows = [], []
    for case in cases:
        labels = f'namespace="{case.name}",pod="epp-0"'
        so_far = list(itertools.accumulate(counts[case.rate], initial=0))  # so_far[s]: arrivals in seconds < s
        lag = int(SCRAPE_PHASE * case.scrape_s)  # the whole seconds elapsed at the scrape, past the interval's start
        for start in range(0, len(so_far) - lag, case.scrape_s):
            ts = t0 + start + SCRAPE_PHASE * case.scrape_s
            counter_rows.append(f'{COUNTER}{{{labels},model_name="m"}} {so_far[start + lag]} {ts:.3f}\n')
            gauge_rows.append(f'{POOL_GAUGE}{{{labels},inference_pool="pool"}} 0.1 {ts:.3f}\n')
    family = COUNTER.removesuffix("_total")
    return (f"# TYPE {family} counter\n" + "".join(counter_rows)
            + f"# TYPE {POOL_GAUGE} gauge\n" + "".join(gauge_rows) + "# EOF\n")


@contextlib.contextmanager
def prometheus_on(data_dir: Path, workdir: Path) -> Iterator[str]:
    """A Prometheus serving ``data_dir`` (no scrape targets) on a free loopback port; its URL."""
    exe = shutil.which("prometheus")
    if exe is None:
        raise SystemExit("headroom_noise: prometheus is not on PATH (sudo apt-get install prometheus)")
    config = workdir / "prometheus.yml"
    config.write_text("scrape_configs: []\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen([exe, f"--config.file={config}", f"--storage.tsdb.path={data_dir}",
                             "--storage.tsdb.retention.time=30d", f"--web.listen-address=127.0.0.1:{port}",
                             "--log.level=warn"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"headroom_noise: prometheus exited:\n{(workdir / 'prometheus.log').read_text()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/-/ready", timeout=2, trust_env=False).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("headroom_noise: prometheus not ready after 60 s")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def adapter_query(url: str, rules: Path, case: Case, max_age: str) -> str:
    """The PromQL the adapter sends for ``inference_request_rate_growth`` of the case's pool (``gpu-adapter
    explain``); the one binding discovered from the pool gauge."""
    path = f"{EXTERNAL}/namespaces/{case.name}/{REQUEST_GROWTH_METRIC}?labelSelector=inference_pool%3Dpool"
    done = subprocess.run([sys.executable, "-m", "adapter", "explain", "--prometheus-url", url, "--config",
                           str(rules), "--metrics-max-age", max_age, "--output", "json", path],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"headroom_noise: gpu-adapter explain failed: {done.stderr.strip()}")
    queries = {r["promql"] for r in json.loads(done.stdout)["rules"] if r.get("series") == POOL_GAUGE}
    if len(queries) != 1:
        raise SystemExit(f"headroom_noise: expected one rule bound to {POOL_GAUGE}, got {done.stdout[:2000]}")
    return queries.pop()


def read_range(url: str, promql: str, start: float, end: float) -> list[float]:
    """``query_range`` at :data:`EVAL_STEP`: one value at every step (a gap in the data is an error here)."""
    resp = httpx.post(f"{url}/api/v1/query_range", data={"query": promql, "start": start, "end": end,
                                                         "step": EVAL_STEP}, timeout=120, trust_env=False)
    body = resp.json()
    if body.get("status") != "success":
        raise SystemExit(f"headroom_noise: query_range failed: {body.get('error')}")
    result = body["data"]["result"]
    if len(result) != 1:
        raise SystemExit(f"headroom_noise: expected one series, got {len(result)}: {promql[:300]}")
    values = [float(v) for _, v in result[0]["values"]]
    if len(values) != round((end - start) / EVAL_STEP) + 1:
        raise SystemExit(f"headroom_noise: {len(values)} reads, expected one every {EVAL_STEP} s: {promql[:300]}")
    return values


def summarise(values: Sequence[float]) -> Reads:
    above = [v > 0 for v in values]
    runs = sum(1 for i, a in enumerate(above) if a and (i == 0 or not above[i - 1]))
    return Reads(len(values), sum(above), runs, max(values, default=0.0), len(values) * EVAL_STEP / 60)


def measure(cases: Sequence[Case], minutes: int, seed: int = 1, workdir: Path | None = None) -> dict[str, Any]:
    """Backfill every case, start Prometheus, read the preset's query and the baseline over ``minutes`` of flat
    load per case. Returns ``{"queries": {case: {"preset", "baseline"}}, "rows": [...]}``."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("headroom_noise: promtool is not on PATH (sudo apt-get install prometheus)")
    skip = int(parse_prometheus_duration(WINDOW) + parse_prometheus_duration(RATE_WINDOW))
    total_s = skip + minutes * 60 + 2 * max(c.scrape_s for c in cases)
    counts = {rate: per_second_counts(rate, total_s, seed) for rate in sorted({c.rate for c in cases})}
    # Recent enough that discovery (``--metrics-max-age``) and the blocks' retention keep it, on a whole minute so
    # that the scrapes sit in the same place on the evaluation grid in every run.
    t0 = (int(time.time()) - total_s - 600) // 60 * 60
    max_age = f"{time.time() - t0 + 3600:.0f}s"  # discovery's look-back: the whole stretch
    tmp = Path(tempfile.mkdtemp(prefix="headroom-noise-", dir=workdir))
    try:
        om = tmp / "arrivals.om"
        om.write_text(openmetrics(cases, counts, t0))
        done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tmp / "data")],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"headroom_noise: promtool failed: {done.stderr.strip()[-2000:]}")
        preset_rules = tmp / "preset.yaml"
        preset_rules.write_text("include: [capacity-headroom]\n")
        baseline_rules = tmp / "baseline.yaml"
        baseline_rules.write_text("externalRules:\n" + preset_rule(
            REQUEST_GROWTH_METRIC, NAMESPACE_ONLY, _growth(gateway_arrivals_query(RATE_WINDOW), WINDOW, STEP),
            POOL_SERIES))
        start, end = t0 + skip, t0 + skip + (minutes * 60 // EVAL_STEP - 1) * EVAL_STEP
        queries: dict[str, dict[str, str]] = {}
        rows: list[dict[str, Any]] = []
        with prometheus_on(tmp / "data", tmp) as url:
            for case in cases:
                preset = adapter_query(url, preset_rules, case, max_age)
                baseline = adapter_query(url, baseline_rules, case, max_age)
                if not (baseline.endswith("), 0)") and preset.startswith(baseline[:-len(", 0)")] + " - ")):
                    raise SystemExit(f"headroom_noise: the baseline is not the preset's slope without its margin:\n"
                                     f"{preset}\n{baseline}")
                queries[case.name] = {"preset": preset, "baseline": baseline}
                [arrived] = httpx.post(f"{url}/api/v1/query", data={
                    "query": f'increase({COUNTER}{{namespace="{case.name}"}}[{end - start:.0f}s])', "time": end},
                    timeout=60, trust_env=False).json()["data"]["result"]
                rows.append({"rate": case.rate, "scrape_s": case.scrape_s,
                             "counted_rate": float(arrived["value"][1]) / (end - start),
                             "preset": asdict(summarise(read_range(url, preset, start, end))),
                             "baseline": asdict(summarise(read_range(url, baseline, start, end)))})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"minutes": minutes, "seed": seed, "noise_sigmas": NOISE_SIGMAS, "window": WINDOW, "step": STEP,
            "rate_window": RATE_WINDOW, "eval_step_s": EVAL_STEP, "queries": queries, "rows": rows}


def table(result: dict[str, Any]) -> str:
    head = (f"{'rate/s':>6} {'scrape':>6} {'evals':>6} | {'preset >0':>9} {'exc/100min':>10} {'max':>8} | "
            f"{'no margin >0':>12} {'exc/100min':>10} {'max':>8}")
    lines = [f"inference_request_rate_growth over {result['minutes']} min of flat Poisson load per case "
             f"(NOISE_SIGMAS={result['noise_sigmas']}, deriv[{result['window']}:{result['step']}] of "
             f"rate[{result['rate_window']}], read every {result['eval_step_s']} s; max in requests/s per second)",
             head, "-" * len(head)]
    for row in result["rows"]:
        p, b = Reads(**row["preset"]), Reads(**row["baseline"])
        lines.append(f"{row['rate']:>6g} {row['scrape_s']:>5}s {p.evaluations:>6} | {p.share:>8.1%} "
                     f"{p.per_100_min:>10.1f} {p.max_value:>8.4f} | {b.share:>11.1%} {b.per_100_min:>10.1f} "
                     f"{b.max_value:>8.4f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one case (55 requests/s, 30 s scrape), 40 minutes")
    parser.add_argument("--minutes", type=int, default=None, help="minutes of flat load per case (default 1200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)
    cases = [Case(55.0, 30)] if args.quick else [Case(r, s) for r in RATES for s in SCRAPES]
    minutes = args.minutes or (40 if args.quick else 1200)
    result = measure(cases, minutes, args.seed)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
