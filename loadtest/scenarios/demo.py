"""``gpu-loadtest demo``: the closed scaling loop on one machine, every part real except the GPUs and the cluster.

inference replicas (busy time) -> fake GPU state -> exporter (-k, labels from the PodResources socket) ->
Prometheus -> adapter (HTTPS, custom.metrics.k8s.io) -> HPA loop (discovery + Pods requests, ``loadtest.hpa``) ->
replicas started or stopped, while an open-loop load profile (ramp up, hold, ramp down) runs against them. The
replicas' own vLLM-shaped ``/metrics`` (requests waiting and running, KV-cache usage) go through the same
Prometheus and adapter; ``scale_on`` picks what the HPA scales on: GPU utilisation, requests waiting, or both.

Scale to zero (``scale_on`` gateway, ``min_replicas`` 0): a buffering gateway (:mod:`loadtest.standins.gateway`)
stands in front of the replicas and holds requests while none is ready; its endpoint-picker metrics go through the same
Prometheus and the adapter's inference-gateway preset, and the HPA scales on them as External metrics selected by
``inference_pool``: the queue (which wakes the replicas from zero) and the pool's running requests (which hold them
while they serve). Replicas start with a cold start (the model load) before they are ready. The run records the
GPU time the replicas held and how long requests waited at the gateway for a replica.

GPU nodes in the loop (``capacity``, :mod:`loadtest.nodes.layer`): each new replica's pod waits for a node from
Karpenter or Cluster Autoscaler, then for its image, then loads its model; placeholders hold headroom (a fixed
count, or an HPA on the ``capacity-headroom`` preset's Object metric, read through the same adapter from a
kube-state-metrics stand-in and Prometheus' pod -> Deployment recording rule). The run is on a compressed clock:
every Kubernetes and cloud delay (HPA sync, windows and policies, provisioner timers, node phases, image pull, model
load) and the profile are real-time figures divided by the time scale. The summary adds each surge's time to
capacity and its phases (:mod:`loadtest.measure.time_to_capacity`), pending pod-seconds and GPU-node-seconds, in
real-time equivalents.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adapter.presets.capacity import RATE_WINDOW, STEP, WINDOW, capacity_yaml
from adapter.presets.inference import recording_rules
from clikit.durations import parse_prometheus_duration
from loadtest.hpa import (
    Autoscaler,
    ExternalValues,
    ObjectValue,
    PodValues,
    Reading,
)
from loadtest.hpa.loop import HpaLoop
from loadtest.hpa.metrics_api import CustomMetricsClient
from loadtest.hpa.record import SyncRecord
from loadtest.hpa.scale_on import QUEUE_METRIC
from loadtest.loadgen.open_loop import LoadGenerator, percentile
from loadtest.measure.progress import Progress, Snapshot
from loadtest.measure.summary import Summary, summarize
from loadtest.measure.time_to_capacity import demand_for, measure, replicas_needed, surges
from loadtest.measure.timeline import TimelineRow, build_rows, each_second, phase_of
from loadtest.nodes.layer import NodeLayer, owners
from loadtest.scenarios.demo_settings import DemoSettings
from loadtest.scenarios.describe import describe_capacity, describe_gateway_hpa, describe_hpa
from loadtest.scenarios.outputs import Outputs, RunResult, cancelled, write_outputs
from loadtest.standins.deployment import DeploymentConfig, DeploymentError, LocalDeployment, Replica
from loadtest.standins.gateway import QUEUE_METRIC as GATEWAY_QUEUE
from loadtest.standins.gateway import RUNNING_METRIC as GATEWAY_RUNNING
from loadtest.standins.gateway import Endpoint, Gateway, GatewayConfig
from loadtest.standins.kube_state import KubeStateMetrics
from loadtest.standins.kubelet import PodResourcesServer
from loadtest.standins.processes import ChildProcesses
from loadtest.standins.stack import MetricsStack, StackConfig, StackError

__all__ = ["DemoError", "capacity_figures", "cold_start_figures", "plot_title", "run_demo"]


class DemoError(RuntimeError):
    pass


def _describe_sync(record: SyncRecord) -> str:
    seen = ", ".join(f"{name} {'no value' if value is None else f'{value:.1f}'}"
                     for name, value in record.readings.items())
    if record.direction:
        return f"[{record.t:5.1f}s] scale {record.current} -> {record.desired}: {record.reason} ({seen})"
    if record.error:
        return f"[{record.t:5.1f}s] no change ({record.error})"
    return f"[{record.t:5.1f}s] keep {record.current} ({seen})"


class _Demo:
    def __init__(self, settings: DemoSettings, progress: Progress) -> None:
        self.settings = settings
        self.progress = progress
        self.workdir = Path(tempfile.mkdtemp(prefix="gpu-loadtest-"))
        self.processes = ChildProcesses(self.workdir / "logs", self.workdir.name)
        self.kubelet = PodResourcesServer(str(self.workdir / "kubelet.sock"))
        self.state: dict[int, dict[str, Any]] = {}
        self.loadgen = LoadGenerator(settings.profile, self._next_url, timeout_s=settings.client_timeout_s,
                                     max_inflight=settings.client_inflight, arrivals=settings.arrivals,
                                     seed=settings.seed, clock=settings.clock)
        self.gateway = Gateway(GatewayConfig(pool=settings.pool, timeout_s=settings.gateway_timeout_s,
                                             endpoint_limit=settings.endpoint_limit)) if settings.gateway else None
        self.gateway_url: str | None = None
        self._gpu_base = 0.0
        self.deployment: LocalDeployment | None = None
        self.stack: MetricsStack | None = None
        self._stack_start: asyncio.Future[None] | None = None
        self.hpa: HpaLoop | None = None
        self.layer = NodeLayer(settings.capacity, "infer") if settings.capacity is not None else None
        self.headroom_hpa: HpaLoop | None = None
        self.kube_state: KubeStateMetrics | None = None
        self.started = time.monotonic()
        self.startup_s: float | None = None
        self.last_decision = ""

    def _next_url(self) -> str | None:
        if self.gateway_url is not None:
            return self.gateway_url
        return None if self.deployment is None else self.deployment.next_url()

    def _to_gateway(self, ready: Sequence[Replica]) -> None:
        """The ready replicas become the gateway's endpoints, with what they report (busy share: running)."""
        if self.gateway is not None:
            self.gateway.set_endpoints([Endpoint(r.name, r.url or "", r.busy, r.waiting) for r in ready])

    async def run(self) -> None:
        s = self.settings
        s.hpa_spec().validate()  # before anything starts: minReplicas 0 needs an Object or External metric
        self.kubelet.start()
        gateway_target = None
        if self.gateway is not None:
            _allow_open_files(4 * s.client_inflight + 1024)  # the client's and the gateway's end of each held request
            port = await self.gateway.start()
            self.gateway_url = f"http://127.0.0.1:{port}/infer"
            gateway_target = (f"127.0.0.1:{port}", {"namespace": s.namespace, "pod": f"{s.pool}-epp-0"})
        self.deployment = LocalDeployment(
            DeploymentConfig(max_replicas=s.max_replicas, namespace=s.namespace, service_s=s.service_ms / 1000,
                             busy_window_s=s.busy_window_s, cold_start_s=s.cold_start_s),
            self.processes, self.kubelet, self.workdir / "gpu-state.json", self.workdir / "objects.json",
            self.workdir / "inference-targets.json", on_endpoints=self._to_gateway, gate=self.layer)
        # A Deployment created at 0 replicas counts as paused by hand: the HPA would never wake it. Start at 1 (or
        # minReplicas) and let the HPA take it to 0.
        await self.deployment.scale(max(s.min_replicas, 1))
        kube_state, extra_rules, recording = None, "", []
        if self.layer is not None:
            self.layer.bootstrap()
            if self.layer.config.headroom_auto:
                layer = self.layer
                self.kube_state = KubeStateMetrics(s.namespace, lambda: owners(layer))
                kube_state = f"127.0.0.1:{self.kube_state.start()}"
                # The windows on the compressed clock; the noise margin counts over the real rate window (the
                # load draws real-time counts: LoadGenerator(clock=...)).
                window, step, rate_window = (s.clock.demo_promql_duration(d) for d in (WINDOW, STEP, RATE_WINDOW))
                extra_rules = capacity_yaml(window, step, rate_window, count_window=RATE_WINDOW)
                recording = recording_rules([])
        self.stack = MetricsStack(StackConfig(
            gpu_count=s.max_replicas, gpu_state=self.workdir / "gpu-state.json",
            kubelet_socket=self.workdir / "kubelet.sock", objects_file=self.workdir / "objects.json",
            cert_dir=self.workdir / "certs", inference_targets=self.workdir / "inference-targets.json",
            rules_file=self.workdir / "rules.yaml", collect_interval_ms=s.collect_interval_ms,
            scrape_interval_s=s.scrape_interval_s, relist_interval_s=s.relist_interval_s,
            gateway=gateway_target, kube_state=kube_state, extra_rules=extra_rules, recording_rules=recording),
            self.processes)
        self.progress.event("starting the exporter, Prometheus and the adapter ...")
        # In a task of its own so that a cancellation cannot leave it spawning processes after the cleanup.
        self._stack_start = asyncio.ensure_future(asyncio.to_thread(self.stack.start))
        await asyncio.shield(self._stack_start)
        await self.deployment.wait_ready(30.0 + s.cold_start_s)
        metrics = CustomMetricsClient(self.stack.adapter_url, verify=str(self.stack.adapter_ca))
        try:
            loop = asyncio.get_running_loop()
            self.hpa = HpaLoop(Autoscaler(s.hpa_spec(), s.controller()), metrics, self.deployment,
                               namespace=s.namespace, selector=self.deployment.config.selector,
                               clock=lambda: loop.time() - self._t0())
            if self.layer is not None and self.layer.config.headroom_auto:
                # The steady state before the load: flat, so the HPA has taken the placeholders (created at 1, a
                # Deployment's default) to 0 and holds the ScaledToZero condition that lets it wake them.
                scaler = Autoscaler(s.placeholder_hpa_spec(), s.controller(),
                                    scaled_to_zero=True if self.layer.config.headroom_min == 0 else None)
                self.headroom_hpa = HpaLoop(scaler, metrics, self.layer.placeholders, namespace=s.namespace,
                                            selector=f"app={self.layer.placeholder_name}",
                                            clock=lambda: loop.time() - self._t0())
            names = " and ".join(s.hpa_metrics)
            of = f"pool {s.pool}" if s.gateway else f"{self.deployment.config.name}-0"
            self.progress.event(f"waiting for {names} of {of} to reach the HPA ...")
            await self._wait_for_metric(90.0)
            self.startup_s = time.monotonic() - self.started
            self.progress.event(f"ready after {self.startup_s:.1f}s; load profile {s.profile.text()} "
                                f"({describe_hpa(s)})")
            await self._drive()
        finally:
            await metrics.aclose()

    def _t0(self) -> float:
        return self.loadgen.started_at if self.loadgen.started_at is not None else asyncio.get_running_loop().time()

    async def _wait_for_metric(self, timeout_s: float) -> None:
        """Until the HPA reads every metric: a Pods metric for every pod, an External metric with a value (the
        gateway's queue reads 0 once the adapter has discovered the pool), an Object metric."""
        assert self.hpa is not None and self.deployment is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        wanted = {p.name for p in self.deployment.pods()}

        def complete(reading: Reading) -> bool:
            if isinstance(reading, PodValues):
                return wanted <= set(reading.milli_by_pod)
            return isinstance(reading, ObjectValue) or (isinstance(reading, ExternalValues) and
                                                        bool(reading.milli_items))

        last: dict[str, object] = {}
        while True:
            readings = await self.hpa.read()
            if self.headroom_hpa is not None:
                readings.update(await self.headroom_hpa.read())
            last = dict(readings)
            if all(complete(r) for r in readings.values()):
                return
            if loop.time() > deadline:
                raise DemoError(f"the HPA did not get {' and '.join(last)} in {timeout_s:.0f}s: {last}")
            await asyncio.sleep(0.5)

    async def _drive(self) -> None:
        assert self.hpa is not None and self.deployment is not None
        s = self.settings
        load = asyncio.create_task(self.loadgen.run(), name="load")
        await asyncio.sleep(0)  # let the generator take its start time before the HPA reads the clock
        self._gpu_base = self.deployment.gpu_seconds()
        workers = [
            asyncio.create_task(self.deployment.run_refresh(s.collect_interval_ms / 1000), name="refresh"),
            asyncio.create_task(self.hpa.run(s.sync_period_s, self._on_sync), name="hpa"),
            asyncio.create_task(each_second(self.loadgen, self._record), name="sample"),
        ]
        if self.layer is not None:
            self.layer.load_started = self.layer.now() - (asyncio.get_running_loop().time() - self._t0())
            workers.append(asyncio.create_task(self.layer.run(), name="nodes"))
        if self.headroom_hpa is not None:
            workers.append(asyncio.create_task(self._run_headroom(self.headroom_hpa), name="headroom-hpa"))
        try:
            done, _ = await asyncio.wait([load, *workers], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not load:
                    task.result()  # a worker ended: re-raise its error
                    raise DemoError(f"{task.get_name()} stopped unexpectedly")
            load.result()
            await asyncio.sleep(0)
            self._record(len(self.state))  # the last second
        finally:
            for task in (load, *workers):
                task.cancel()
            await asyncio.gather(load, *workers, return_exceptions=True)

    def _on_sync(self, record: SyncRecord) -> None:
        line = _describe_sync(record)
        history = self.hpa.history if self.hpa else []
        previous_error = history[-2].error if len(history) > 1 else None
        if record.direction:
            self.last_decision = line
            self.progress.event(line)
        elif record.error and record.error != previous_error:  # a metrics problem: say so once, not every sync
            self.progress.event(line)

    async def _run_headroom(self, hpa: HpaLoop) -> None:
        """The placeholders' HPA, from the moment the preset's windows hold only the load's samples: before, the
        request rate over its window counts the seconds before the load started as idle, and its slope would read
        as a surge (in a cluster the load has been there for hours)."""
        s = self.settings
        settle = s.clock.demo_seconds(sum(parse_prometheus_duration(d) for d in (RATE_WINDOW, WINDOW)))
        await asyncio.sleep(settle)
        await hpa.run(s.sync_period_s, self._on_headroom_sync)

    def _on_headroom_sync(self, record: SyncRecord) -> None:
        if record.direction:
            self.progress.event(f"headroom: {_describe_sync(record)}")

    def _record(self, second: int) -> None:
        """What was observed at the end of ``second``; feeds the timeline and the live view."""
        if second in self.state or self.deployment is None or not self.loadgen.has_row(second):
            return
        s = self.settings
        seen = self.hpa.history[-1].readings if self.hpa and self.hpa.history else {}
        hpa_seen = seen.get(s.metric)
        util = self.deployment.mean_utilisation()
        waiting = self.deployment.mean_waiting()
        gpu, queue = s.metric in s.hpa_metrics, QUEUE_METRIC in s.hpa_metrics
        self.state[second] = {
            "gpu_util": None if util is None else round(util, 2), "hpa_metric": hpa_seen,
            "metric_target": s.target if gpu else None, "desired_replicas": self.deployment.spec_replicas,
            "current_replicas": self.deployment.ready_count,
            "waiting": None if waiting is None else round(waiting, 2), "hpa_waiting": seen.get(QUEUE_METRIC),
            "waiting_target": s.queue_target if queue or s.gateway else None,
            "pods": len(self.deployment.replicas),
            "gpu_seconds": round(self.deployment.gpu_seconds() - self._gpu_base, 3)}
        if self.layer is not None:
            self.state[second].update(self.layer.sample())
        held = None
        if self.gateway is not None:
            held = self.gateway.queued
            self.state[second].update({"gateway_queue": held, "hpa_gateway_queue": seen.get(GATEWAY_QUEUE),
                                       "hpa_running": seen.get(GATEWAY_RUNNING), "running_target": s.running_target})
        load = self.loadgen.second(second)
        totals = self.loadgen.totals()
        profile = self.settings.profile
        self.progress.update(Snapshot(
            t=second + 1, duration=profile.duration, phase=phase_of(profile, second),
            target_rps=profile.rate_at(second + 0.5), sent=load.sent, ok=load.ok, errors_total=totals.errors,
            dropped_total=totals.dropped, p50_ms=_ms(load.p(50)), p95_ms=_ms(load.p(95)),
            gpu_util=util, hpa_metric=hpa_seen, metric_target=s.target if gpu else None,
            current=self.deployment.ready_count, desired=self.deployment.spec_replicas,
            last_decision=self.last_decision, waiting=waiting, hpa_waiting=seen.get(QUEUE_METRIC),
            waiting_target=s.queue_target if queue else None, held=held,
            seen=(("queue", seen.get(GATEWAY_QUEUE), None), ("running", seen.get(GATEWAY_RUNNING), s.running_target))
            if s.gateway else ()))

    async def cleanup(self) -> dict[str, str]:
        """Stop everything started; return log tails of processes that failed (for the error report)."""
        tails = {c.name: c.log_tail() for c in self.processes.children
                 if c.process.poll() not in (None, 0, -signal.SIGTERM)}
        if self.deployment is not None:
            with contextlib.suppress(Exception):
                await self.deployment.close()
        if self.gateway is not None:
            with contextlib.suppress(Exception):
                await self.gateway.close()
        if self.kube_state is not None:
            self.kube_state.close()
        if self.stack is not None:
            self.stack.abort()
            if self._stack_start is not None:
                await asyncio.wait([self._stack_start])
                self._stack_start.exception()  # reported already where it was awaited, if it was
            await asyncio.to_thread(self.stack.stop)
        await asyncio.to_thread(self.processes.stop_all, 5.0)
        self.kubelet.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
        return tails


def _allow_open_files(wanted: int) -> None:
    """Raise this process's soft open-file limit towards ``wanted`` (as far as the hard limit allows)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


async def run_demo(settings: DemoSettings, outputs: Outputs, progress: Progress) -> RunResult:
    """Run the demo; a cancellation (Ctrl-C, SIGTERM) ends it early with a partial summary.

    Every child process is stopped and the temporary directory removed before this returns.
    """
    demo = _Demo(settings, progress)
    interrupted = False
    error: str | None = None
    tails: dict[str, str] = {}
    try:
        with progress:
            interrupted = await cancelled(demo.run())
    except Exception as exc:  # reported with a partial summary; the cleanup below must run in any case
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (DeploymentError, StackError)) and exc.log_tail:  # a child process failed
            tails["failing process"] = exc.log_tail
    finally:
        stopped = await demo.cleanup()
        tails = {**stopped, **{k: v for k, v in tails.items() if v not in stopped.values()}}
    rows = build_rows(settings.profile, demo.loadgen.seconds, demo.state)
    if interrupted or error:
        rows = rows[:len(demo.state)]
    syncs = list(demo.hpa.history) if demo.hpa else []
    summary = summarize(rows, syncs, settings.profile.load_step_at, settings.profile.load_drop_at,
                        needed_replicas=settings.needed_replicas, extra={
        **settings.describe(), **outputs.named(rows),
        "startup_seconds": None if demo.startup_s is None else round(demo.startup_s, 2),
        "wall_seconds": round(time.monotonic() - demo.started, 2), "error_kinds": dict(demo.loadgen.error_kinds),
        "run_id": demo.processes.run_id, "child_pids": demo.processes.pids, "interrupted": interrupted,
        "error": error, **({"cold_start": cold_start_figures(demo.gateway)} if demo.gateway is not None else {}),
        **({"capacity": capacity_figures(demo, rows, syncs)} if demo.layer is not None else {})})

    def draw(path: Path) -> None:
        from loadtest.measure.plot import plot_timeline  # matplotlib: the loadtest extra

        plot_timeline(rows, syncs, path, load_step_at=settings.profile.load_step_at,
                      load_drop_at=settings.profile.load_drop_at, title=plot_title(settings, summary),
                      clock=settings.clock)

    write_outputs(outputs, summary, rows, draw)
    return RunResult(summary, rows, syncs, interrupted, error, tails)


def plot_title(settings: DemoSettings, summary: Summary) -> str:
    """The demo's plot title: what the HPA scaled on; with the gateway, the GPU time used; with nodes, theirs."""
    if settings.capacity is not None:
        return (f"gpu-loadtest demo --nodes {settings.capacity.kind.value}: {describe_capacity(settings)}\n"
                f"{describe_hpa(settings)}")
    if settings.gateway:
        return (f"gpu-loadtest demo --min-replicas {settings.min_replicas}: {summary.gpu_seconds} GPU-seconds "
                f"used ({summary.seconds_at_zero} s at zero replicas)\n{describe_gateway_hpa(settings)}")
    return f"gpu-loadtest demo: {describe_hpa(settings)}"


def capacity_figures(demo: _Demo, rows: Sequence[TimelineRow], syncs: Sequence[SyncRecord]) -> dict[str, Any]:
    """Time to capacity per surge and the node layer's totals, in real-time equivalents (demo seconds times the
    time scale)."""
    layer, s = demo.layer, demo.settings
    assert layer is not None
    end = None if layer.load_started is None else layer.load_started + s.profile.duration
    spans, launches = layer.spans(), layer.launches()
    surge_docs = []
    for i, surge in enumerate(surges(s.profile)):
        needed = replicas_needed(s.profile, surge, s.replica_rate)
        up = measure(i + 1, surge, syncs, spans, rows, launches, needed=needed, service_s=s.service_ms / 1000,
                     demand_at=demand_for(s.profile, surge, needed, s.replica_rate))
        # each new replica as the capacity report writes it (gpu-loadtest demo --from-report reads either)
        surge_docs.append({**up.to_json(s.clock), "replicas": layer.replicas(surge.start, surge.end)})
    headroom_hpa = demo.headroom_hpa.history if demo.headroom_hpa is not None else []
    return {"time_scale": s.clock.time_scale, "surges": surge_docs,
            **layer.totals(end if end is not None and end < layer.now() else None),
            "headroom_decisions": [{"t": s.clock.real_figure(r.t), "from": r.current, "to": r.desired,
                                    "growth": r.readings.get(s.headroom_metric[0])}
                                   for r in headroom_hpa if r.direction]}


def cold_start_figures(gateway: Gateway) -> dict[str, Any]:
    """How long requests that found no replica ready waited at the gateway (until forwarded, timed out or given
    up), and the first of each such spell (the first request after the pool went idle); the gateway's outcomes."""
    counts = gateway.counts
    waits = counts.cold_waits

    def seconds(value: float | None) -> float | None:
        return None if value is None else round(value, 2)

    return {"requests": len(waits), "wait_p50_seconds": seconds(percentile(waits, 50)),
            "wait_max_seconds": seconds(max(waits, default=None)),
            "first_request_waits_seconds": [round(w, 2) for w in counts.first_waits],
            "received": counts.received, "forwarded": counts.forwarded, "timed_out": counts.timed_out,
            "abandoned": counts.abandoned, "upstream_errors": counts.upstream_errors}
