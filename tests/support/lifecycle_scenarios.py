"""The adapter's lifecycle, measured (docs/adapter.md "Lifecycle"): what an HPA fleet sees while the adapter is
upgraded, loses a replica, or a node's exporter restarts. tests/test_lifecycle_scenarios_e2e.py asserts the goals on
a small, fast setup; bench/lifecycle.py prints the figures at the controller's own pace.

The cluster, all real processes on loopback:

- two adapter replicas (``gpu-adapter serve``, the built-in GPU presets, its shutdown flags), each behind the
  Service stand-in (``tests.support.service_proxy``: round-robin over ready endpoints, changes applied after a
  propagation delay, established connections kept);
- Prometheus scraping one GPU node's real exporter (fake backend; each GPU attributed to its pod through a kubelet
  PodResources server, as on a node) and a static exposition with the other nodes' GPUs;
- the pods of the fleet's workloads in a ``--standalone-objects`` file (label selectors resolve without a
  Kubernetes API; delegated authentication is left out: it is not part of a drain, and bench/fleet.py measures it);
- the fleet: one HPA per workload with a Pods metric (its pods' ``DCGM_FI_DEV_GPU_UTIL``, selected by label), asked
  as kube-controller-manager asks: every sync period all HPAs are queued and 5 workers take them one at a time,
  after the custom-metrics discovery the controller's client re-reads each period. The client keeps its connections
  alive and, as Go's HTTP transport under the aggregator does, sends a GET again once when a kept-alive connection
  closes under it (aiohttp's own retry; Go retries only on a reused connection);
- other clients of the API beside the HPAs, in (a) and (b): twenty discovery requests a second, each on a new
  connection (kubectl, the controllers' discovery, the aggregator's availability checks are so many separate
  clients). With 200 HPAs a 15 s round lasts a fraction of a second, so these are what reach the Service at any
  moment, as in a cluster.

Scenarios: (a) a rolling update as the Deployment controller does it with maxSurge 1, maxUnavailable 0 (start a new
replica, wait until it is ready, add it; then delete an old one: SIGTERM and the endpoint's removal at once), for
both replicas; (b) SIGKILL of one replica mid-round (its endpoint removed after the propagation delay, a replacement
started); (c) the node's exporter stopped and started again in place (a container restart keeps the pod's address,
so Prometheus' target stays).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx

from clikit.fake_gpus import fake_gpu_uuid
from loadtest.standins.kubelet import PodResourcesServer, gpu_pod
from tests.support.adapter_process import AdapterProcess
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.processes import Output, terminate
from tests.support.prometheus import PrometheusServer, free_port
from tests.support.service_proxy import ServiceProxy
from tests.support.waiting import wait_until

NAMESPACE = "ml"
DISCOVERY = "/apis/custom.metrics.k8s.io/v1beta2"
EXPORTER_NODE = "gpu-node-0"


@dataclass(frozen=True)
class Settings:
    workloads: int = 40
    pods_per_workload: int = 4
    gpus_on_exporter_node: int = 8  # the first workloads' pods, one GPU each, are on the exporter's node
    sync_period_s: float = 15.0  # --horizontal-pod-autoscaler-sync-period
    workers: int = 5  # --concurrent-horizontal-pod-autoscaler-syncs
    propagation_s: float = 2.0
    shutdown_delay_s: float = 15.0
    drain_timeout_s: float = 10.0
    scrape_interval_s: float = 10.0  # the chart's exporter ServiceMonitor interval

    def adapter_args(self) -> list[str]:
        return ["--shutdown-delay-duration", f"{self.shutdown_delay_s:g}s",
                "--shutdown-drain-timeout", f"{self.drain_timeout_s:g}s"]


def workload(i: int) -> str:
    return f"infer-{i:03d}"


def pods_of(i: int, settings: Settings) -> list[str]:
    return [f"{workload(i)}-{j}" for j in range(settings.pods_per_workload)]


@dataclass(frozen=True)
class Asked:
    """One request of the fleet, as the HPA controller saw it."""

    hpa: str  # "" for the round's discovery request
    round: int
    started: float  # time.monotonic()
    ended: float
    status: int | None  # None: no HTTP answer (connection refused, reset)
    error: str = ""
    pods: int | None = None  # items in a 200 answer

    @property
    def ok(self) -> bool:
        return self.status == 200


# ----------------------------------------------------------------------------------------------- the HPA fleet

class Fleet:
    """The HPA controller's requests, on a loop of their own in a thread, recorded in :attr:`asked`."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self.asked: list[Asked] = []
        self.rounds_finished = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="hpa-fleet", daemon=True)

    def start(self) -> Fleet:
        self._thread.start()
        return self

    def stop(self) -> list[Asked]:
        self._stop.set()
        self._thread.join(self.settings.sync_period_s * 3 + 30)
        return self.asked

    def wait_rounds(self, count: int) -> None:
        """Until ``count`` more rounds have finished (a round under way counts as one)."""
        target = self.rounds_finished + count
        period = self.settings.sync_period_s
        wait_until(lambda: self.rounds_finished >= target, period * (count + 2) + 30, f"{count} more HPA round(s)",
                   interval=0.1)

    async def _run(self) -> None:
        tls = ssl.create_default_context()
        tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE  # the adapters' self-signed certificates
        connector = aiohttp.TCPConnector(limit=self.settings.workers + 1, ssl=tls)
        async with aiohttp.ClientSession(self.url, connector=connector, trust_env=False,
                                         timeout=aiohttp.ClientTimeout(total=30)) as session:
            began = time.monotonic()
            number = 0
            while not self._stop.is_set():
                await self._round(session, number)
                number += 1
                self.rounds_finished = number
                next_at = began + number * self.settings.sync_period_s
                while not self._stop.is_set() and time.monotonic() < next_at:
                    await asyncio.sleep(min(0.1, max(next_at - time.monotonic(), 0)))

    async def _round(self, session: aiohttp.ClientSession, number: int) -> None:
        await self._ask(session, "", number, DISCOVERY, {})
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(self.settings.workloads):
            queue.put_nowait(i)

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                await self._ask(session, workload(i), number,
                                f"{DISCOVERY}/namespaces/{NAMESPACE}/pods/*/DCGM_FI_DEV_GPU_UTIL",
                                {"labelSelector": f"app={workload(i)}"})

        await asyncio.gather(*(worker() for _ in range(self.settings.workers)))

    async def _ask(self, session: aiohttp.ClientSession, hpa: str, number: int, path: str,
                   params: dict[str, str]) -> None:
        started = time.monotonic()
        try:
            async with session.get(path, params=params) as response:
                body = await response.read()
                status = response.status
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            self.asked.append(Asked(hpa, number, started, time.monotonic(), None, f"{type(exc).__name__}: {exc}"))
            return
        pods = None
        error = ""
        if status == 200 and hpa:
            pods = len(json.loads(body)["items"])
        elif status != 200:
            error = body[:200].decode(errors="replace")
        self.asked.append(Asked(hpa, number, started, time.monotonic(), status, error, pods))


class Steady:
    """Clients of the API other than the HPAs, at a steady pace, each request on a connection of its own (kubectl,
    the controllers' discovery, the aggregator's availability checks are so many separate clients): ``asks(n)`` gives
    the n-th tick's requests as (label, path, params). Recorded in :attr:`asked` (round: the tick)."""

    def __init__(self, url: str, interval_s: float, asks: Callable[[int], list[tuple[str, str, dict[str, str]]]],
                 ) -> None:
        self.url, self.interval_s, self.asks = url, interval_s, asks
        self.asked: list[Asked] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-clients", daemon=True)

    def __enter__(self) -> Steady:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        no_reuse = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(base_url=self.url, verify=False, timeout=10, limits=no_reuse) as client:
            tick = 0
            while not self._stop.is_set():
                for label, path, params in self.asks(tick):
                    started = time.monotonic()
                    try:
                        response = client.get(path, params=params)
                    except httpx.TransportError as exc:
                        self.asked.append(Asked(label, tick, started, time.monotonic(), None, repr(exc)))
                        continue
                    items = response.json().get("items") if response.status_code == 200 else None
                    self.asked.append(Asked(label, tick, started, time.monotonic(), response.status_code,
                                            "" if response.status_code == 200 else response.text[:200],
                                            len(items) if items is not None else None))
                tick += 1
                self._stop.wait(self.interval_s)


def discovery_clients(url: str) -> Steady:
    """Twenty discovery requests a second, each from a new connection."""
    return Steady(url, 0.05, lambda _: [("discovery client", DISCOVERY, {})])


# ------------------------------------------------------------------------------------------------ the cluster

class NodeExporter:
    """The exporter of one GPU node, restartable in place (same address, as a container restart keeps its pod's)."""

    def __init__(self, workdir: Path, settings: Settings) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.settings = settings
        self.kubelet = PodResourcesServer(str(workdir / "kubelet.sock"))
        gpus = settings.gpus_on_exporter_node
        pods = [pod for i in range(settings.workloads) for pod in pods_of(i, settings)][:gpus]
        self.pods = pods
        self.kubelet.set_pods([gpu_pod(pod, NAMESPACE, [fake_gpu_uuid("", k)], container="server")
                               for k, pod in enumerate(pods)])
        self.kubelet.start()
        self.proc: subprocess.Popen[str] | None = None
        self.output: Output | None = None

    def start(self) -> float:
        """Start it; the seconds until it serves its pods' series (what a scrape then finds)."""
        began = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "-a", self.address, "--backend", "fake", "--fake-gpu-count",
             str(self.settings.gpus_on_exporter_node), "-c", "1000", "-k", "--pod-resources-kubelet-socket",
             self.kubelet.socket_path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "NODE_NAME": EXPORTER_NODE}, start_new_session=True)
        self.output = Output(self.proc)
        wait_until(self._serves_its_pods, 30, "the exporter serving its pods' series", interval=0.01)
        return time.monotonic() - began

    def _serves_its_pods(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"exporter exited: {self.output.finish() if self.output else ''}")
        try:
            body = httpx.get(f"http://{self.address}/metrics", timeout=2).text
        except httpx.TransportError:
            return False
        return f'pod="{self.pods[-1]}"' in body

    def stop(self) -> str:
        if self.proc is None:
            return ""
        log = terminate(self.proc, output=self.output)
        self.proc = None
        return log

    def close(self) -> None:
        self.stop()
        self.kubelet.stop()


def other_nodes_exposition(settings: Settings) -> str:
    """dcgm-exporter's series for the GPUs of the pods not on the exporter's node (one GPU each, 8 per node)."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    pods = [pod for i in range(settings.workloads) for pod in pods_of(i, settings)]
    for k, pod in enumerate(pods[settings.gpus_on_exporter_node:], start=settings.gpus_on_exporter_node):
        node, gpu = divmod(k, 8)
        lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-{k:08x}",Hostname="gpu-node-{node}",'
                     f'container="server",namespace="{NAMESPACE}",pod="{pod}"}} {(k * 37) % 100}')
    return "\n".join(lines) + "\n"


@dataclass
class Replica:
    name: str
    process: AdapterProcess


@dataclass
class Cluster:
    settings: Settings
    workdir: Path
    proxy: ServiceProxy
    prometheus: PrometheusServer
    others: MetricsEndpoint
    exporter: NodeExporter
    replicas: list[Replica] = field(default_factory=list)
    exporter_start_s: list[float] = field(default_factory=list)
    _names: int = 0

    def start_replica(self) -> Replica:
        """A new pod: started, ready (its /readyz, as the kubelet's startup probe sees it), then added to the
        Service (after the propagation delay)."""
        self._names += 1
        name = f"adapter-{self._names}"
        process = AdapterProcess(self.prometheus.url, str(self.workdir / name), [
            "--standalone-objects", str(self.workdir / "objects.json"), *self.settings.adapter_args()])
        replica = Replica(name, process)
        self.replicas.append(replica)
        self.proxy.set_endpoint(name, f"127.0.0.1:{process.port}", ready=True)
        return replica

    def wait_in_service(self, replica: Replica) -> None:
        wait_until(lambda: replica.name in self.proxy.ready(), self.settings.propagation_s + 10,
                   f"{replica.name} in the Service", interval=0.05)


@contextmanager
def cluster(settings: Settings) -> Iterator[Cluster]:
    with tempfile.TemporaryDirectory(prefix="lifecycle-") as tmp:
        workdir = Path(tmp)
        objects = {"pods": [{"namespace": NAMESPACE, "name": pod, "labels": {"app": workload(i)}}
                            for i in range(settings.workloads) for pod in pods_of(i, settings)]}
        (workdir / "objects.json").write_text(json.dumps(objects))
        others = MetricsEndpoint(other_nodes_exposition(settings))
        exporter = NodeExporter(workdir, settings)
        proxy = ServiceProxy(settings.propagation_s)
        prometheus: PrometheusServer | None = None
        made: Cluster | None = None
        try:
            start_s = exporter.start()
            prometheus = PrometheusServer([others.address, exporter.address], honor_labels=True,
                                          scrape_interval=f"{settings.scrape_interval_s:g}s",
                                          tmp_prefix="prometheus-lifecycle-").start()
            expected = settings.workloads * settings.pods_per_workload
            prometheus.wait_for("count(DCGM_FI_DEV_GPU_UTIL)", lambda r: bool(r) and r[0]["value"][1] == str(expected),
                                timeout=60)
            made = Cluster(settings, workdir, proxy, prometheus, others, exporter, exporter_start_s=[start_s])
            for _ in range(2):
                replica = made.start_replica()
                proxy.set_endpoint(replica.name, f"127.0.0.1:{replica.process.port}", ready=True, at_once=True)
            yield made
        finally:
            if made is not None:
                for replica in made.replicas:
                    replica.process.stop()
            proxy.stop()
            if prometheus is not None:
                prometheus.stop()
            exporter.close()
            others.stop()


# ---------------------------------------------------------------------------------------------- the scenarios

@dataclass
class Report:
    """What the fleet saw during one scenario."""

    case: str
    asked: list[Asked]  # the HPA fleet's
    others: list[Asked] = field(default_factory=list)  # the steady clients'
    notes: dict[str, float | int | str] = field(default_factory=dict)

    @property
    def failed(self) -> list[Asked]:
        return [a for a in self.asked if not a.ok]

    @property
    def others_failed(self) -> list[Asked]:
        return [a for a in self.others if not a.ok]

    def next_sync_after_each_failure_succeeded(self) -> bool:
        """Every HPA whose request failed in round r had a successful request in round r + 1."""
        by = {(a.hpa, a.round): a for a in self.asked}
        return all((nxt := by.get((a.hpa, a.round + 1))) is not None and nxt.ok
                   for a in self.failed if a.hpa)

    def summary(self) -> str:
        line = f"{self.case}: HPAs {len(self.asked)} requests, {len(self.failed)} failed"
        if self.others:
            line += f"; other clients {len(self.others)} requests, {len(self.others_failed)} failed"
        if self.notes:
            line += "; " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                     for k, v in self.notes.items())
        return line


def mid_round(fleet: Fleet) -> None:
    """Wait until a round is under way (requests flowing), so what follows lands among them."""
    done = len(fleet.asked)
    wait_until(lambda: len(fleet.asked) >= done + 3, fleet.settings.sync_period_s * 2 + 30, "a round under way",
               interval=0.005)


def rolling_update(c: Cluster) -> Report:
    """(a) Each old replica replaced as the Deployment controller does it with maxSurge 1, maxUnavailable 0; each
    old one told to leave while a round's requests flow."""
    fleet = Fleet(c.proxy.url, c.settings).start()
    fleet.wait_rounds(1)
    old = list(c.replicas)
    exits = []
    with discovery_clients(c.proxy.url) as others:
        for replica in old:
            replace_replica(c, fleet, replica, exits)
        fleet.wait_rounds(1)
    return Report("(a) rolling update", fleet.stop(), others.asked, {
        "longest old-replica exit (s)": max(s for s, _ in exits),
        "exit codes": ",".join(str(code) for _, code in exits)})


def replace_replica(c: Cluster, fleet: Fleet, replica: Replica, exits: list[tuple[float, int]]) -> None:
    """One step of the rollout: a new replica in the Service, then the old one told to leave."""
    new = c.start_replica()
    c.wait_in_service(new)
    replica.process.client.close()  # the test's own probe connection: the kubelet's probes do not keep one
    mid_round(fleet)
    began = time.monotonic()
    replica.process.proc.send_signal(signal.SIGTERM)
    c.proxy.set_endpoint(replica.name, f"127.0.0.1:{replica.process.port}", ready=False)
    code = replica.process.proc.wait(c.settings.shutdown_delay_s + c.settings.drain_timeout_s + 30)
    exits.append((time.monotonic() - began, code))
    c.replicas.remove(replica)
    replica.process.stop()


def kill_one(c: Cluster) -> Report:
    """(b) SIGKILL of one replica in the middle of a round; its endpoint leaves the Service after the propagation
    delay, and a replacement is started, as the ReplicaSet controller does."""
    fleet = Fleet(c.proxy.url, c.settings).start()
    fleet.wait_rounds(1)
    victim = c.replicas[0]
    with discovery_clients(c.proxy.url) as others:
        mid_round(fleet)
        in_flight, connected = c.proxy.in_flight(victim.name), c.proxy.open_connections(victim.name)
        killed_at = time.monotonic()
        victim.process.proc.send_signal(signal.SIGKILL)
        c.proxy.set_endpoint(victim.name, f"127.0.0.1:{victim.process.port}", ready=False)
        c.replicas.remove(victim)
        victim.process.stop()
        c.wait_in_service(c.start_replica())
        fleet.wait_rounds(2)
    report = Report("(b) SIGKILL of one replica", fleet.stop(), others.asked)
    late = [a for a in report.failed + report.others_failed
            if a.started > killed_at + c.settings.propagation_s + 1.0]
    report.notes.update({"connections open to it at the kill": connected,
                         "of which with a request waiting": in_flight,
                         "connections the Service sent it after the kill (refused)": c.proxy.stats.refused[
                             victim.name],
                         "failures later than the propagation delay": len(late)})
    return report


def restart_exporter(c: Cluster) -> Report:
    """(c) The exporter of one node stopped and started again in place, down long enough for a scrape to fail (a
    restart between two scrapes goes unseen: Prometheus never marks the series stale). Beside the HPAs, an observer
    asks the affected workloads' Pods metric every 0.2 s through the Service, each ask unique (a
    metricLabelSelector that matches every series), so the adapter's query reuse, which an HPA asking every 15 s
    never hits, does not stand between its answer and Prometheus: when pods went missing and came back."""
    affected = [workload(i) for i in range(c.settings.workloads)
                if set(pods_of(i, c.settings)) & set(c.exporter.pods)]
    expected = c.settings.pods_per_workload

    def ask(tick: int) -> list[tuple[str, str, dict[str, str]]]:
        return [(name, f"{DISCOVERY}/namespaces/{NAMESPACE}/pods/*/DCGM_FI_DEV_GPU_UTIL",
                 {"labelSelector": f"app={name}", "metricLabelSelector": f"gpu!=ask-{tick}"}) for name in affected]

    fleet = Fleet(c.proxy.url, c.settings).start()
    fleet.wait_rounds(1)
    with Steady(c.proxy.url, 0.2, ask) as observer:
        stopped_at = time.monotonic()
        c.exporter.stop()
        c.prometheus.wait_for(f'up{{instance="{c.exporter.address}"}} == 0',
                              timeout=c.settings.scrape_interval_s * 3 + 30)
        start_s = c.exporter.start()
        back_at = time.monotonic()
        c.exporter_start_s.append(start_s)
        fleet.wait_rounds(2)
    report = Report("(c) exporter restart", fleet.stop())
    # A 404 is every pod missing: the metric had no value for any of the workload's pods.
    seen_missing = [a.started for a in observer.asked
                    if a.status == 404 or (a.status == 200 and (a.pods or 0) < expected)]
    fleet_missing = [a for a in report.asked if a.hpa in affected and a.ok and (a.pods or 0) < expected]
    # While the node's series are stale (the exporter down, then until its next scrape), an HPA whose pods all live
    # there gets 404: no value is the truth, never a made-up one. Any other failure, or a 404 asked before the
    # exporter was stopped or later than one scrape interval after it is back, breaks the goal.
    window_end = back_at + c.settings.scrape_interval_s + 0.5
    stale_404 = [a for a in report.failed
                 if a.hpa in affected and a.status == 404 and stopped_at <= a.started <= window_end]
    report.notes.update({
        "exporter down (s)": back_at - stopped_at, "exporter start (s)": start_s,
        "pods missing, as the adapter answered (s)": (max(seen_missing) - min(seen_missing)) if seen_missing else 0.0,
        "latest missing pod after the exporter was back (s)": max((t - back_at for t in seen_missing), default=0.0),
        "HPA requests that saw a pod missing": len(fleet_missing),
        "HPA requests answered 404 while the node's series were stale": len(stale_404),
        "HPA requests failed otherwise": len(report.failed) - len(stale_404),
        "observer errors": len([a for a in observer.asked if a.status not in (200, 404)]),
        "scrape interval (s)": c.settings.scrape_interval_s})
    return report
