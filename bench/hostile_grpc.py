"""Slow, flooding and oversized clients against the KEDA external scaler's gRPC port (``gpu-adapter serve
--keda-scaler-port``), with a KEDA-shaped client calling meanwhile; a real adapter and a real Prometheus on loopback.

Setup: Prometheus scraping one GPU-utilisation series per pod (10 pods selected by ``app=small``, 1,500 by
``app=large``), the adapter with ``--standalone-objects`` listing them, ``--query-cache-ttl 0`` (identical calls in
flight are still shared) and the scaler in plain text (``--keda-scaler-insecure``: every caller reaches the calls),
or with mutual TLS (the chart's default) for the slow attack's second row. The KEDA-shaped client
(``tests/support/hostile.py``: KEDA's one pooled connection, an ``IsActive`` for the 10-pod trigger every second
and one ``StreamIsActive``) connects from another source address (127.0.0.2, through a loopback relay), as KEDA's
pod does in a cluster; the attackers connect from 127.0.0.1 and run in a process of their own.

Attacks (each against a fresh adapter):

* ``slow``: ``connections`` TCP connections that send nothing (they stall in the TLS handshake or before the
  HTTP/2 preface), held for ``seconds``: connections the adapter held, when it closed them;
* ``flood``: ``callers`` concurrent ``GetMetrics`` calls over as many connections for the 1,500-pod trigger, each
  with a metric selector of its own (``UUID!=x<n>``: the same pods, a query no other call shares) for ``seconds``:
  the status codes the attackers got (RESOURCE_EXHAUSTED, UNAVAILABLE for a refused connection);
* ``oversized``: calls with ``metadata_mib`` MiB of metadata and with a ``message_mib`` MiB request message, ``calls``
  of each at once: the status codes.

Each prints: the adapter's RSS before, peak (sampled every 0.1 s) and 10 s after the attack ended; the
KEDA-shaped client's IsActive p50/p99/max and failures and its stream's ends during the attack. Nothing here
asserts a timing.

    python bench/hostile_grpc.py [--quick] [--json FILE] [--adapter-from DIR] [--only slow,flood,oversized]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from exporter_scrape import machine_line  # noqa: E402
from rss import MIB, RssSampler  # noqa: E402

from adapter.keda.externalscaler import externalscaler_pb2 as pb  # noqa: E402
from tests.support import hostile  # noqa: E402
from tests.support.adapter_process import AdapterProcess  # noqa: E402
from tests.support.certs import issue, make_ca  # noqa: E402
from tests.support.keda import KedaClient  # noqa: E402
from tests.support.metrics_endpoint import MetricsEndpoint  # noqa: E402
from tests.support.prometheus import PrometheusServer, free_port  # noqa: E402
from tests.support.service_proxy import ServiceProxy  # noqa: E402

NAMESPACE = "bench"
SIZES = {"small": 10, "large": 1500}
KEDA_SOURCE = "127.0.0.2"


def trigger(app: str) -> dict[str, str]:
    return {"metric": "DCGM_FI_DEV_GPU_UTIL", "resource": "pods", "labelSelector": f"app={app}", "targetValue": "60"}


@dataclass(frozen=True)
class Varied:
    """``GetMetrics`` for the 1,500-pod trigger, its metric selector different in every call (picklable: the
    attacking process builds its requests with it)."""

    def __call__(self, n: int) -> pb.GetMetricsRequest:
        ref = pb.ScaledObjectRef(name="attacker", namespace=NAMESPACE,
                                 scalerMetadata={**trigger("large"), "metricSelector": f"UUID!=x{n}"})
        return pb.GetMetricsRequest(metricName="DCGM_FI_DEV_GPU_UTIL", scaledObjectRef=ref)


# -- the environment ---------------------------------------------------------------------------------------------
@dataclass
class Env:
    """Prometheus with the pods' series, the objects file, and what each adapter is started with."""

    workdir: Path
    prometheus: PrometheusServer
    adapter_from: Path | None = None
    adapter_args: tuple[str, ...] = ()
    tls: dict[str, Any] = field(default_factory=dict)  # for mutual TLS: the files and KEDA's client pair


@contextlib.contextmanager
def environment(adapter_from: Path | None = None, adapter_args: Sequence[str] = ()) -> Iterator[Env]:
    """Prometheus scraping the pods' series (ready when it has them all); ``adapter_from``: another checkout's
    adapter; ``adapter_args``: more flags for every adapter started."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    pods = [(app, f"{app}-{i}") for app, count in SIZES.items() for i in range(count)]
    (workdir / "objects.json").write_text(json.dumps({"pods": [
        {"namespace": NAMESPACE, "name": pod, "labels": {"app": app}} for app, pod in pods]}))
    endpoint = MetricsEndpoint("".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-{k:08x}",namespace="{NAMESPACE}",pod="{pod}"}} {10 + k % 80}\n'
        for k, (_, pod) in enumerate(pods)))
    prometheus = PrometheusServer([endpoint.address], job="dcgm-exporter", honor_labels=True,
                                  scrape_interval="15s").start()
    try:
        prometheus.wait_for(f"count(DCGM_FI_DEV_GPU_UTIL) == {len(pods)}", timeout=60)
        yield Env(workdir, prometheus, adapter_from, tuple(adapter_args), _mutual_tls(workdir))
    finally:
        prometheus.stop()
        endpoint.stop()


def _mutual_tls(workdir: Path) -> dict[str, Any]:
    ca = make_ca("keda-scaler-ca")
    server = issue(ca, "keda-scaler", client=False, server_names=("localhost",))
    client = issue(ca, "keda-operator")
    (workdir / "ca.crt").write_bytes(ca.cert_pem)
    cert, key = server.write(workdir, "scaler")
    return {"args": ["--keda-scaler-tls-cert-file", cert, "--keda-scaler-tls-private-key-file", key,
                     "--keda-scaler-client-ca-file", str(workdir / "ca.crt")],
            "client": {"enable_tls": True, "ca_cert": ca.cert_pem, "client_cert": client.cert_pem,
                       "client_key": client.key_pem, "server_name": "localhost"}}


@dataclass
class Scaler:
    """One adapter serving the scaler, and the KEDA-shaped client's way in (from another source address)."""

    adapter: AdapterProcess
    port: int
    proxy: ServiceProxy
    client: KedaClient

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.client.close()
        self.adapter.stop()
        deadline = time.monotonic() + 5  # the relay's links end with the adapter's side of them
        while self.proxy.open_connections("adapter") and time.monotonic() < deadline:
            time.sleep(0.05)
        self.proxy.stop()


def start_scaler(env: Env, tls: bool = False) -> Scaler:
    port = free_port()
    scaler_args = env.tls["args"] if tls else ["--keda-scaler-insecure"]
    adapter = AdapterProcess(env.prometheus.url, str(env.workdir / "certs"), [
        "--standalone-objects", str(env.workdir / "objects.json"), "--query-cache-ttl", "0",
        "--metrics-relist-interval", "10s", "--keda-scaler-port", str(port), *scaler_args, *env.adapter_args],
        cwd=env.adapter_from)
    proxy = ServiceProxy(propagation_s=0.0, source=KEDA_SOURCE)
    proxy.set_endpoint("adapter", f"127.0.0.1:{port}", ready=True, at_once=True)
    client = KedaClient(proxy.address, **(env.tls["client"] if tls else {}))
    scaler = Scaler(adapter, port, proxy, client)
    deadline = time.monotonic() + 60
    while True:  # the first relist done: the small trigger answers
        try:
            client.trigger("keda", NAMESPACE, trigger("small")).is_active()
            return scaler
        except grpc.RpcError:
            if time.monotonic() > deadline:
                scaler.stop()
                raise
            time.sleep(0.2)


# -- measuring ---------------------------------------------------------------------------------------------------
def held_connections(pid: int, port: int) -> int:
    """TCP connections the adapter has open on the scaler's port."""
    return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp")
               if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)


@contextlib.contextmanager
def measured(scaler: Scaler, after_s: float = 10.0) -> Iterator[dict[str, Any]]:
    """RSS and the KEDA-shaped client around the block; ``after_s`` after it ends, the RSS 'after'."""
    rss = RssSampler(scaler.adapter.proc.pid)
    keda = hostile.KedaShaped(scaler.client.stub, scaler.client.trigger("keda", NAMESPACE, trigger("small")).ref)
    keda.start()
    figures: dict[str, Any] = {}
    try:
        yield figures
    finally:
        figures["keda"] = keda.stop().summary()
        time.sleep(after_s)
        figures.update(rss.stop())


def _attacker(target: Any, **kw: Any) -> dict[str, Any]:
    """``target(**kw)`` in a process of its own (the attackers' CPU is not the measured client's)."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(target, kwds=kw)  # type: ignore[no-any-return]


# -- the attacks -------------------------------------------------------------------------------------------------
def slow(env: Env, connections: int = 10_000, seconds: float = 150.0, tls: bool = False) -> dict[str, Any]:
    """``connections`` connections that never send a byte, held ``seconds`` (then closed by the bench)."""
    scaler = start_scaler(env, tls=tls)
    try:
        with measured(scaler) as figures:
            started = time.monotonic()
            stalled = hostile.StalledConnections(scaler.address, connections)
            opened_s = time.monotonic() - started
            held_peak = 0
            while time.monotonic() - started < seconds:
                held_peak = max(held_peak, held_connections(scaler.adapter.proc.pid, scaler.port))
                time.sleep(1.0)
            closed = sorted(stalled.closed_after)
            figures.update({
                "connections": connections, "opened_in_s": opened_s, "refused_dials": stalled.refused,
                "held_peak": held_peak, "held_at_end": stalled.open(), "closed_by_adapter": len(closed),
                "closed_median_s": closed[len(closed) // 2] if closed else None,
                "closed_max_s": closed[-1] if closed else None})
            stalled.close()
        figures["held_after"] = held_connections(scaler.adapter.proc.pid, scaler.port)
        return figures
    finally:
        scaler.stop()


def flood(env: Env, callers: int = 1000, seconds: float = 30.0) -> dict[str, Any]:
    """``callers`` concurrent expensive ``GetMetrics`` calls, each caller on a connection of its own."""
    scaler = start_scaler(env)
    try:
        with measured(scaler) as figures:
            attack = _attacker(hostile.flood_in_process, address=scaler.address, request=Varied(),
                               connections=callers, callers=callers, seconds=seconds)
            figures.update({"callers": callers, "seconds": seconds, "attacker": attack})
        return figures
    finally:
        scaler.stop()


def oversized(env: Env, metadata_mib: float = 16, message_mib: float = 64, calls: int = 20) -> dict[str, Any]:
    """``calls`` calls at once with ``metadata_mib`` MiB of metadata, then as many with a ``message_mib`` MiB
    request, each on a connection of its own (sent from a process of their own)."""
    scaler = start_scaler(env)
    try:
        with measured(scaler) as figures:
            figures["metadata_codes"] = _attacker(_oversized_calls, address=scaler.address, calls=calls,
                                                  metadata_bytes=int(metadata_mib * MIB))
            figures["message_codes"] = _attacker(_oversized_calls, address=scaler.address, calls=calls,
                                                 message_bytes=int(message_mib * MIB))
            figures.update({"metadata_mib": metadata_mib, "message_mib": message_mib, "calls": calls})
        return figures
    finally:
        scaler.stop()


def _oversized_calls(address: str, calls: int, metadata_bytes: int = 0, message_bytes: int = 0) -> dict[str, int]:
    ref = pb.ScaledObjectRef(name="attacker", namespace=NAMESPACE,
                             scalerMetadata={**trigger("small"), **({"pad": "a" * message_bytes} if message_bytes
                                                                    else {})})
    metadata = (("x-pad", "a" * metadata_bytes),) if metadata_bytes else None
    codes: dict[str, int] = {}
    lock = threading.Lock()

    def call() -> None:
        with grpc.insecure_channel(address, options=[hostile.SEPARATE_CONNECTION]) as channel:
            stub = hostile.pb_grpc.ExternalScalerStub(channel)
            try:
                stub.IsActive(ref, metadata=metadata, timeout=60)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
        with lock:
            codes[code] = codes.get(code, 0) + 1

    threads = [threading.Thread(target=call) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


# -- the report --------------------------------------------------------------------------------------------------
def _f(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.1f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def report(name: str, figures: dict[str, Any]) -> str:
    keda = figures["keda"]
    rss = [_f(figures[k], " MiB") for k in ("rss_before_mib", "rss_peak_mib", "rss_after_mib")]
    latency = [_f(keda[k], " ms") for k in ("p50_ms", "p99_ms", "max_ms")]
    lines = [f"{name}:", f"  adapter RSS before {rss[0]}, peak {rss[1]}, 10 s after {rss[2]}",
             f"  KEDA-shaped IsActive: {keda['calls']} calls, p50 {latency[0]}, p99 {latency[1]}, max {latency[2]}, "
             f"failed {keda['failed']} {keda['first_failures'] or ''}; stream opened {keda['stream_opened']}x, "
             f"ends {keda['stream_ends'] or '{}'}"]
    if "held_peak" in figures:
        closed = [_f(figures[k], " s") for k in ("closed_median_s", "closed_max_s")]
        lines.append(f"  {figures['connections']:,} stalled connections opened in {figures['opened_in_s']:.1f} s: "
                     f"held at most {figures['held_peak']:,} at once, {figures['held_at_end']:,} open at the end, "
                     f"{figures['closed_by_adapter']:,} closed by the adapter (median after {closed[0]}, last "
                     f"after {closed[1]}); held 10 s after: {figures['held_after']}")
    if "attacker" in figures:
        attack = figures["attacker"]
        lines.append(f"  {figures['callers']:,} attacking callers for {figures['seconds']:g} s: {attack['codes']}, "
                     f"answered p50 {_f(attack['answered_p50_ms'], ' ms')} p99 {_f(attack['answered_p99_ms'], ' ms')}")
    if "metadata_codes" in figures:
        lines.append(f"  {figures['calls']} calls with {figures['metadata_mib']:g} MiB of metadata: "
                     f"{figures['metadata_codes']}; with a {figures['message_mib']:g} MiB message: "
                     f"{figures['message_codes']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2,000 stalled connections for 30 s, 300 flooding callers for 10 s, 5 oversized calls")
    parser.add_argument("--only", default="slow,slow_tls,flood,oversized", help="which attacks, comma-separated")
    parser.add_argument("--adapter-from", type=Path, help="run the adapter from another checkout (before/after)")
    parser.add_argument("--adapter-arg", action="append", default=[], help="one more adapter flag (repeatable)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    print(machine_line())
    print(f"adapter from {args.adapter_from or ROOT}; extra flags: {args.adapter_arg or 'none'}", flush=True)
    if args.adapter_from:
        os.chdir(args.adapter_from)
    q = args.quick
    attacks = {
        "slow": lambda env: slow(env, 2000 if q else 10_000, 30 if q else 150),
        "slow_tls": lambda env: slow(env, 2000 if q else 10_000, 30 if q else 150, tls=True),
        "flood": lambda env: flood(env, 300 if q else 1000, 10 if q else 30),
        "oversized": lambda env: oversized(env, calls=5 if q else 20)}
    results: dict[str, Any] = {}
    with environment(args.adapter_from, args.adapter_arg) as env:
        for name in args.only.split(","):
            results[name] = attacks[name](env)
            print(report(name, results[name]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
