"""How long the adapter's other requests wait while its kubeconfig's exec credential plugin runs.

A real adapter (delegated auth on, ``--kubeconfig`` whose user is an exec plugin: ``tests/support/exec_plugin.py``,
which takes ``--plugin-seconds`` to answer, as a slow ``aws eks get-token`` does, with a token valid for
``--valid-seconds``) in front of the fake Kubernetes API on loopback, which requires that token. For ``--seconds``:

- every second a request with a new bearer token (so a TokenReview, which needs the adapter's own credentials:
  the plugin runs whenever they have expired);
- every 50 ms the requests that need nothing from the Kubernetes API: ``/healthz``, and the aggregator's discovery
  probe through the front proxy as ``system:masters`` (no review).

Prints the probes' latency (p50, p99, max, how many took over 1 s), the token requests' latency and how many plugin
runs there were. Baseline in the same run: the same adapter with a plugin that answers at once. ``--adapter-from
DIR`` runs the adapter of another checkout (before/after). Nothing here asserts a timing.

    python bench/kube_exec_plugin.py [--quick] [--adapter-from DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from exporter_scrape import machine_line  # noqa: E402

from tests.support.adapter_process import AdapterProcess  # noqa: E402
from tests.support.certs import issue, make_ca  # noqa: E402
from tests.support.exec_plugin import exec_user, runs  # noqa: E402
from tests.support.fake_kube import FakeKube, configmap  # noqa: E402
from tests.support.metrics_endpoint import MetricsEndpoint  # noqa: E402
from tests.support.prometheus import PrometheusServer  # noqa: E402

C2 = "/apis/custom.metrics.k8s.io/v1beta2"
METRIC = "DCGM_FI_DEV_GPU_UTIL"
ADAPTER_TOKEN = "adapter-exec-token"


class AnyUserToken(dict):
    """Every ``user-N`` bearer token authenticates as alice (the fake API's TokenReview looks tokens up here)."""

    def get(self, key: object, default: object = None) -> object:
        return {"username": "alice", "groups": ["devs"]} if str(key).startswith("user-") else default


def front_proxy_context(tmp: Path) -> tuple[bytes, ssl.SSLContext]:
    ca = make_ca("front-proxy-ca")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(*issue(ca, "front-proxy-client").write(tmp, "front-proxy-client"))
    return ca.cert_pem, ctx


def quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else ordered * 99
    return {"n": len(ordered), "p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000, "max_ms": ordered[-1] * 1000,
            "over_1s": sum(1 for s in ordered if s > 1.0)}


async def drive(url: str, proxy: ssl.SSLContext, seconds: float) -> dict[str, dict[str, float]]:
    probes: list[float] = []
    tokens: list[float] = []
    failures = [0]
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(base_url=url, verify=proxy, timeout=60, limits=limits) as client:
        async def timed(into: list[float], path: str, headers: dict[str, str]) -> None:
            started = time.perf_counter()
            try:
                await client.get(path, headers=headers)
            except httpx.HTTPError:  # timed out (60 s) or the connection dropped: counted, its wait kept
                failures[0] += 1
            into.append(time.perf_counter() - started)

        async def every(interval: float, make: object) -> None:
            pending: set[asyncio.Task[None]] = set()
            number = 0
            while time.monotonic() < deadline:
                for coroutine in make(number):  # type: ignore[operator]
                    pending.add(asyncio.ensure_future(coroutine))
                number += 1
                await asyncio.sleep(interval)
            await asyncio.gather(*pending)

        aggregator = {"X-Remote-User": "system:kube-aggregator", "X-Remote-Group": "system:masters"}
        await asyncio.gather(
            every(0.05, lambda n: (timed(probes, "/healthz", {}), timed(probes, C2, aggregator))),
            every(1.0, lambda n: (timed(tokens, C2, {"Authorization": f"Bearer user-{n}"}),)))
    return {"probes": quantiles(probes), "token_requests": quantiles(tokens), "failed": failures[0]}


def measure(adapter_from: str | None, plugin_seconds: float, valid_seconds: float, seconds: float,
            prometheus: PrometheusServer) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="kube-exec-bench-"))
    state = tmp / "plugin"
    state.mkdir()
    (state / "token").write_text(ADAPTER_TOKEN)
    (state / "valid").write_text(str(valid_seconds))
    (state / "sleep").write_text(str(plugin_seconds))
    ca_pem, proxy = front_proxy_context(tmp)
    kube = FakeKube(require_token=ADAPTER_TOKEN, tokens=AnyUserToken(), authorize=lambda spec: (True, ""))
    kube.start()
    kube.put("", "v1", "configmaps", configmap("kube-system", "extension-apiserver-authentication", {
        "requestheader-client-ca-file": ca_pem.decode(), "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]', "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]'}))
    adapter = None
    try:
        kubeconfig = kube.write_kubeconfig(tmp / "kubeconfig", user=exec_user(state))
        started = time.monotonic()
        adapter = AdapterProcess(prometheus.url, str(tmp / "certs"), ["--kubeconfig", kubeconfig], disable_auth=False,
                                 ready_timeout=180, cwd=adapter_from)
        ready_s = time.monotonic() - started
        before = sum(1 for what, _, _ in runs(state) if what == "start")
        figures = asyncio.run(drive(adapter.url, proxy, seconds))
        during = sum(1 for what, _, _ in runs(state) if what == "start") - before
    finally:
        if adapter is not None:
            adapter.stop()
        kube.stop()
    return {**figures, "plugin_runs_during": during, "plugin_runs_before": before, "ready_s": ready_s}


def show(name: str, result: dict[str, object]) -> None:
    print(f"{name}: ready after {result['ready_s']:.1f} s ({result['plugin_runs_before']} plugin runs), "
          f"{result['plugin_runs_during']} plugin runs while measured, {result['failed']} requests failed "
          "(no answer in 60 s, or dropped)")
    for kind in ("probes", "token_requests"):
        r = result[kind]
        assert isinstance(r, dict)
        print(f"  {kind:15} n={r['n']:4d}  p50 {r['p50_ms']:8.1f} ms  p99 {r['p99_ms']:8.1f} ms  "
              f"max {r['max_ms']:8.1f} ms  over 1 s: {r['over_1s']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 s per measurement instead of 20")
    parser.add_argument("--plugin-seconds", type=float, default=3.0)
    parser.add_argument("--valid-seconds", type=float, default=2.0)
    parser.add_argument("--adapter-from", help="run the adapter of this checkout")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    print(machine_line())
    print(f"adapter from {args.adapter_from or ROOT}; plugin answers in {args.plugin_seconds:g} s, its token is valid "
          f"for {args.valid_seconds:g} s")
    seconds = 8.0 if args.quick else 20.0
    endpoint = MetricsEndpoint(f'{METRIC}{{gpu="0",UUID="GPU-0",namespace="ml",pod="p-0"}} 50\n')
    prometheus = PrometheusServer([endpoint.address], job="dcgm", honor_labels=True).start()
    try:
        prometheus.wait_for(METRIC, timeout=40)
        results = {"baseline_instant_plugin": measure(args.adapter_from, 0.0, args.valid_seconds, seconds, prometheus),
                   "slow_plugin": measure(args.adapter_from, args.plugin_seconds, args.valid_seconds, seconds,
                                          prometheus)}
    finally:
        prometheus.stop()
        endpoint.stop()
    for name, result in results.items():
        show(name, result)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
