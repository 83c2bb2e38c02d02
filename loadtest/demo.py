"""``gpu-loadtest demo``: the closed scaling loop on one machine, every part real except the GPUs and the cluster.

inference replicas (busy time) -> fake GPU state -> exporter (-k, labels from the PodResources socket) ->
Prometheus -> adapter (HTTPS, custom.metrics.k8s.io) -> HPA loop (discovery + Pods requests, ``loadtest.hpa``) ->
replicas started or stopped, while an open-loop load profile (ramp up, hold, ramp down) runs against them. The
replicas' own vLLM-shaped ``/metrics`` (requests waiting and running, KV-cache usage) go through the same
Prometheus and adapter; ``scale_on`` picks what the HPA scales on: GPU utilisation, requests waiting, or both.

Scale to zero (``scale_on`` gateway, ``min_replicas`` 0): a buffering gateway (:mod:`loadtest.gateway`) stands in
front of the replicas and holds requests while none is ready; its endpoint-picker metrics go through the same
Prometheus and the adapter's inference-gateway preset, and the HPA scales on them as External metrics selected by
``inference_pool``: the queue (which wakes the replicas from zero) and the pool's running requests (which hold them
while they serve). Replicas start with a cold start (the model load) before they are ready. The run records the
GPU time the replicas held and how long requests waited at the gateway for a replica.

GPU nodes in the loop (``capacity``, :mod:`loadtest.node_layer`): each new replica's pod waits for a node from
Karpenter or Cluster Autoscaler, then for its image, then loads its model; placeholders hold headroom (a fixed
count, or an HPA on the ``capacity-headroom`` preset's Object metric, read through the same adapter from a
kube-state-metrics stand-in and Prometheus' pod -> Deployment recording rule). The run is on a compressed clock:
every Kubernetes and cloud delay (HPA sync, windows and policies, provisioner timers, node phases, image pull, model
load) and the profile are real-time figures divided by the time scale. The summary adds each surge's time to
capacity and its phases (:mod:`loadtest.time_to_capacity`), pending pod-seconds and GPU-node-seconds, in real-time
equivalents.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import resource
import shutil
import signal
import tempfile
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from adapter.presets.capacity import GROWTH_METRIC, RATE_WINDOW, REQUEST_GROWTH_METRIC, STEP, WINDOW, capacity_yaml
from adapter.presets.inference import recording_rules
from clikit.durations import parse_prometheus_duration
from loadtest.capacity_options import CAPACITY_QUICK_PROFILE, PLACEHOLDER_IMAGES, capacity_profile
from loadtest.deployment import DeploymentConfig, LocalDeployment, Replica
from loadtest.gateway import QUEUE_METRIC as GATEWAY_QUEUE
from loadtest.gateway import RUNNING_METRIC as GATEWAY_RUNNING
from loadtest.gateway import Endpoint, Gateway, GatewayConfig
from loadtest.hpa import (
    DEFAULT_DOWNSCALE_STABILIZATION_SECONDS,
    DEFAULT_SCALE_DOWN_POLICIES,
    DEFAULT_SCALE_UP_POLICIES,
    DEFAULT_SYNC_PERIOD_SECONDS,
    Autoscaler,
    Behavior,
    ControllerConfig,
    ExternalValues,
    HPASpec,
    MetricSpec,
    ObjectValue,
    PodValues,
    PolicyType,
    Reading,
    ScalingPolicy,
    ScalingRules,
)
from loadtest.hpa_loop import HpaLoop
from loadtest.kube_state import KubeStateMetrics
from loadtest.kubelet import PodResourcesServer
from loadtest.live import Progress, Snapshot
from loadtest.loadgen import Arrivals, LoadGenerator, percentile
from loadtest.metrics_api import CustomMetricsClient
from loadtest.node_layer import NodeLayer, NodeLayerConfig, owners
from loadtest.processes import ChildProcesses
from loadtest.profile import Profile, parse_profile
from loadtest.scale_on import QUEUE_METRIC, ScaleOn
from loadtest.stack import MetricsStack, StackConfig
from loadtest.statefiles import atomic_write_json
from loadtest.summary import Summary, summarize
from loadtest.time_to_capacity import demand_for, measure, replicas_needed, surges
from loadtest.timeline import SyncRecord, TimelineRow, build_rows, phase_of, write_csv

__all__ = ["DEFAULT_SETTINGS", "GATEWAY_QUEUE", "GATEWAY_RUNNING", "QUEUE_METRIC", "QUICK_SETTINGS",
           "ZERO_QUICK_SETTINGS", "ZERO_SETTINGS", "DemoError", "DemoOutputs", "DemoResult", "DemoSettings",
           "ScaleOn", "cold_start_figures", "describe_gateway_hpa", "describe_hpa", "describe_metrics", "run_demo",
           "with_overrides"]


class DemoError(RuntimeError):
    pass


@dataclass(frozen=True)
class DemoSettings:
    """Sized so one replica is overloaded at the hold rate: a replica serves 1000/``service_ms`` requests/s
    (25 at 40 ms), so 55 requests/s need 4 replicas at the 60 % target. ``queue_target``: requests waiting per
    pod (AverageValue) when scaling on the queue, or waiting at the gateway per replica when scaling on the gateway.

    With the gateway (``scale_on`` gateway): ``running_target`` is the Value target of the pool's running requests
    per ready endpoint (a replica runs one request at a time, so this is its busy share, like GPU utilisation);
    ``cold_start_s`` each replica's model load; ``gateway_timeout_s`` how long the gateway holds a request for a
    replica; ``endpoint_limit`` the requests in flight that saturate a replica (more wait at the gateway). The HPA
    wakes at most ``wake_replicas`` replicas per cold start and sync (``behavior.scaleUp``: a Pods policy whose
    period covers both), so the queue that builds while the first replicas load asks for no more meanwhile.
    """

    profile: Profile
    sync_period_s: float
    scale_down_window_s: int
    target: float = 60.0
    min_replicas: int = 1
    max_replicas: int = 8
    service_ms: float = 40.0
    busy_window_s: float = 2.0
    collect_interval_ms: int = 500
    scrape_interval_s: float = 1.0
    relist_interval_s: float = 5.0
    request_timeout_s: float = 2.0
    max_inflight: int = 256
    arrivals: Arrivals = Arrivals.UNIFORM
    namespace: str = "demo"
    metric: str = "DCGM_FI_DEV_GPU_UTIL"
    scale_on: ScaleOn = ScaleOn.GPU
    queue_target: float = 5.0
    running_target: float = 0.6
    cold_start_s: float = 0.0
    gateway_timeout_s: float = 60.0
    endpoint_limit: int = 4
    wake_replicas: int = 2
    pool: str = "infer"
    capacity: NodeLayerConfig | None = None

    @property
    def time_scale(self) -> float:
        """Real seconds per demo second of the Kubernetes and cloud delays (1 without nodes)."""
        return 1.0 if self.capacity is None else self.capacity.time_scale

    @property
    def real_profile(self) -> Profile:
        """The load profile in real time (the demo runs it ``time_scale`` times faster)."""
        return self.profile.scaled(time_factor=self.time_scale)

    def _policies(self, policies: tuple[ScalingPolicy, ...]) -> tuple[ScalingPolicy, ...]:
        """The HPA's default rate-limit policies with their periods on the compressed clock."""
        return tuple(replace(p, period_seconds=max(1, round(p.period_seconds / self.time_scale))) for p in policies)

    @property
    def provisioning_s(self) -> float:
        """The expected time to capacity the auto headroom plans for (real seconds): a node, the image, the model."""
        assert self.capacity is not None
        t = self.capacity.timings
        return self.capacity.provisioning_s or t.node_s + t.image_pull_s + t.model_load_s

    @property
    def requests_per_replica(self) -> float:
        """Requests per second one replica serves at the HPA's GPU target (25 at 40 ms and 100 %, so 15 at 60)."""
        return 1000 / self.service_ms * self.target / 100

    @property
    def headroom_metric(self) -> tuple[str, float]:
        """What the auto headroom's HPA reads, and the demand one replica stands for in its unit: the request rate's
        growth and the requests per second a replica serves at target, or the queue's growth and the queue target
        per replica."""
        assert self.capacity is not None
        if self.capacity.headroom_signal == "queue":
            return GROWTH_METRIC, self.queue_target
        return REQUEST_GROWTH_METRIC, self.requests_per_replica

    def placeholder_hpa_spec(self) -> HPASpec:
        """The HPA on the placeholders: the preset's metric of the workload's Deployment (Object), AverageValue the
        demand a replica stands for / time to capacity (in demo seconds); its windows on the compressed clock."""
        assert self.capacity is not None
        c = self.capacity
        metric, per_replica = self.headroom_metric
        target = per_replica / (self.provisioning_s / self.time_scale)
        return HPASpec(
            max_replicas=c.headroom, min_replicas=c.headroom_min,
            metrics=(MetricSpec.object(metric, "Deployment/infer", average_value=f"{target:.4g}"),),
            behavior=Behavior(
                scale_up=ScalingRules(stabilization_window_seconds=round(c.headroom_scale_up_s / self.time_scale),
                                      policies=self._policies(DEFAULT_SCALE_UP_POLICIES)),
                scale_down=ScalingRules(stabilization_window_seconds=round(c.headroom_scale_down_s / self.time_scale),
                                        policies=self._policies(DEFAULT_SCALE_DOWN_POLICIES))))

    @property
    def gateway(self) -> bool:
        """A gateway in front of the replicas, and an HPA on its External metrics."""
        return self.scale_on is ScaleOn.GATEWAY

    @property
    def selector(self) -> str:
        """The External metrics' ``metric.selector``: the InferencePool."""
        return f"inference_pool={self.pool}"

    @property
    def client_timeout_s(self) -> float:
        """The load's request timeout; with the gateway, long enough for what it holds to be served."""
        return max(self.request_timeout_s, self.gateway_timeout_s + 30.0) if self.gateway else self.request_timeout_s

    @property
    def client_inflight(self) -> int:
        """The load's in-flight bound; with the gateway, room for every request it may hold at the peak rate (a
        request dropped at the client would be a loss the gateway never saw)."""
        if not self.gateway:
            return self.max_inflight
        return max(self.max_inflight, math.ceil(self.profile.peak_rate * self.client_timeout_s))

    @property
    def scale_up_period_s(self) -> int:
        """``behavior.scaleUp`` policy period with the gateway: one cold start and one sync."""
        return min(max(math.ceil(self.cold_start_s + self.sync_period_s), 1), 1800)

    @property
    def hpa_metrics(self) -> tuple[str, ...]:
        """The HPA's metrics, in its spec's order (GPU utilisation first, as in hpa-examples; the gateway's queue
        first)."""
        if self.gateway:
            return GATEWAY_QUEUE, GATEWAY_RUNNING
        return ((self.metric,) if self.scale_on is not ScaleOn.QUEUE else ()) + \
            ((QUEUE_METRIC,) if self.scale_on is not ScaleOn.GPU else ())

    @property
    def needed_replicas(self) -> int:
        """Replicas the peak rate needs for the GPU target (with the gateway: the running-requests target) to hold
        (what a scale-up should reach)."""
        share = self.running_target if self.gateway else self.target / 100
        return math.ceil(round(self.profile.peak_rate * self.service_ms / 1000 / share, 9))

    def hpa_spec(self) -> HPASpec:
        """The HPA; ``ValueError`` with the API server's message for minReplicas 0 without an External metric."""
        down = ScalingRules(stabilization_window_seconds=self.scale_down_window_s)
        if self.gateway:
            wake = ScalingPolicy(PolicyType.PODS, self.wake_replicas, self.scale_up_period_s)
            return HPASpec(
                max_replicas=self.max_replicas,
                min_replicas=self.min_replicas,
                metrics=(MetricSpec.external(GATEWAY_QUEUE, average_value=f"{self.queue_target:g}",
                                             selector=self.selector),
                         MetricSpec.external(GATEWAY_RUNNING, value=f"{self.running_target:g}",
                                             selector=self.selector)),
                behavior=Behavior(scale_up=ScalingRules(policies=(wake,)), scale_down=down),
            )
        targets = {QUEUE_METRIC: self.queue_target, self.metric: self.target}
        behavior = Behavior(scale_down=down)
        if self.capacity is not None:
            behavior = Behavior(scale_up=ScalingRules(policies=self._policies(DEFAULT_SCALE_UP_POLICIES)),
                                scale_down=replace(down, policies=self._policies(DEFAULT_SCALE_DOWN_POLICIES)))
        return HPASpec(
            max_replicas=self.max_replicas,
            min_replicas=self.min_replicas,
            metrics=tuple(MetricSpec.pods(name, average_value=f"{targets[name]:g}") for name in self.hpa_metrics),
            behavior=behavior,
        )

    def controller(self) -> ControllerConfig:
        return ControllerConfig(sync_period_seconds=self.sync_period_s)

    def describe(self) -> dict[str, Any]:
        return {"profile": self.profile.text(), "sync_period_seconds": self.sync_period_s,
                "scale_down_stabilization_seconds": self.scale_down_window_s, "scale_on": self.scale_on.value,
                "hpa_metrics": list(self.hpa_metrics), "metric": self.metric,
                "target_average_value": self.target, "queue_metric": QUEUE_METRIC,
                "queue_target_average_value": self.queue_target, "min_replicas": self.min_replicas,
                "max_replicas": self.max_replicas, "service_ms": self.service_ms,
                "busy_window_seconds": self.busy_window_s, "collect_interval_ms": self.collect_interval_ms,
                "scrape_interval_seconds": self.scrape_interval_s, "relist_interval_seconds": self.relist_interval_s,
                "request_timeout_seconds": self.client_timeout_s, "max_inflight": self.client_inflight,
                "arrivals": self.arrivals.value,
                **({"running_target_value": self.running_target, "cold_start_seconds": self.cold_start_s,
                    "gateway_timeout_seconds": self.gateway_timeout_s, "endpoint_limit": self.endpoint_limit,
                    "inference_pool": self.pool, "scale_up_policy": {
                        "type": "Pods", "value": self.wake_replicas, "periodSeconds": self.scale_up_period_s}}
                   if self.gateway else {}),
                **({"nodes": self.capacity.kind.value, "time_scale": self.time_scale,
                    "headroom": f"auto:{self.capacity.headroom}" if self.capacity.headroom_auto
                    else self.capacity.headroom,
                    "placeholder_image": next(name for name, image in PLACEHOLDER_IMAGES.items()
                                              if image == self.capacity.placeholder_image),
                    "node_timings_seconds": vars(self.capacity.timings),
                    "profile_real_time": self.real_profile.text(),
                    **({"headroom_hpa": {"metric": self.headroom_metric[0], "averageValue": str(
                        self.placeholder_hpa_spec().metrics[0].target_milli / 1000), "provisioning_seconds":
                        self.provisioning_s, "per_replica": self.headroom_metric[1],
                        "min_replicas": self.capacity.headroom_min, "max_replicas": self.capacity.headroom,
                        "scale_up_stabilization_seconds": self.capacity.headroom_scale_up_s,
                        "scale_down_stabilization_seconds": self.capacity.headroom_scale_down_s}}
                       if self.capacity.headroom_auto else {})}
                   if self.capacity is not None else {})}


DEFAULT_SETTINGS = DemoSettings(profile=parse_profile("15s:8,10s:8..55,60s:55,10s:55..8,55s:8"),
                                sync_period_s=15.0, scale_down_window_s=30)
QUICK_SETTINGS = DemoSettings(profile=parse_profile("5s:8,3s:8..55,20s:55,3s:55..8,17s:8"),
                              sync_period_s=3.0, scale_down_window_s=6)
# Scale to zero: a little load, an idle spell long enough to reach 0 (the 30 s window after a sync or two), a burst
# that wakes the replicas (10 requests/s: one replica at 40 %), and idle again. The gateway holds a request 60 s, more
# than a cold start plus a sync and the time the backlog takes to drain; the client waits longer still.
ZERO_SETTINGS = DemoSettings(profile=parse_profile("20s:5,120s:0,60s:10,120s:0"), sync_period_s=15.0,
                             scale_down_window_s=30, min_replicas=0, max_replicas=4, scale_on=ScaleOn.GATEWAY,
                             cold_start_s=20.0, gateway_timeout_s=60.0)
ZERO_QUICK_SETTINGS = DemoSettings(profile=parse_profile("3s:8,14s:0,6s:10,5s:0"), sync_period_s=2.0,
                                   scale_down_window_s=4, min_replicas=0, max_replicas=4, scale_on=ScaleOn.GATEWAY,
                                   cold_start_s=2.0, gateway_timeout_s=15.0)

def capacity_settings(capacity: NodeLayerConfig, *, quick: bool = False, profile: Profile | None = None,
                      sync_period_s: float = DEFAULT_SYNC_PERIOD_SECONDS,
                      scale_down_window_s: float = DEFAULT_DOWNSCALE_STABILIZATION_SECONDS) -> DemoSettings:
    """The demo with GPU nodes: ``profile`` (default one step surge, or the quick one), the HPA's sync period and
    scale-down window (the controller's defaults), all in real seconds, put on the compressed clock; each replica's
    cold start is the model load; Poisson arrivals."""
    k = capacity.time_scale
    real = profile or (parse_profile(CAPACITY_QUICK_PROFILE) if quick else capacity_profile())
    return DemoSettings(profile=real.scaled(time_factor=1 / k), sync_period_s=sync_period_s / k,
                        scale_down_window_s=round(scale_down_window_s / k),
                        cold_start_s=capacity.timings.model_load_s / k, arrivals=Arrivals.POISSON, capacity=capacity)


@dataclass(frozen=True)
class DemoOutputs:
    plot: Path | None = None
    summary: Path | None = None
    csv: Path | None = None


@dataclass
class DemoResult:
    summary: Summary
    rows: list[TimelineRow]
    syncs: list[SyncRecord]
    interrupted: bool = False
    error: str | None = None
    log_tails: dict[str, str] = field(default_factory=dict)


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
                                     time_scale=settings.time_scale)
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
                # load draws real-time counts: LoadGenerator(time_scale=...)).
                extra_rules = capacity_yaml(*(_prometheus_duration(parse_prometheus_duration(d) / s.time_scale)
                                              for d in (WINDOW, STEP, RATE_WINDOW)), count_window=RATE_WINDOW)
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
            asyncio.create_task(self._sample(), name="sample"),
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
        settle = sum(parse_prometheus_duration(d) for d in (RATE_WINDOW, WINDOW)) / s.time_scale
        await asyncio.sleep(settle)
        await hpa.run(s.sync_period_s, self._on_headroom_sync)

    def _on_headroom_sync(self, record: SyncRecord) -> None:
        if record.direction:
            self.progress.event(f"headroom: {_describe_sync(record)}")

    async def _sample(self) -> None:
        loop = asyncio.get_running_loop()
        k = 0
        while True:
            k += 1
            await asyncio.sleep(max(self._t0() + k - loop.time(), 0.0))
            self._record(k - 1)

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


def _prometheus_duration(seconds: float) -> str:
    """A PromQL range or resolution of at least 1 ms, in whole milliseconds (``6000ms``)."""
    return f"{max(round(seconds * 1000), 1)}ms"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


async def run_demo(settings: DemoSettings, outputs: DemoOutputs, progress: Progress) -> DemoResult:
    """Run the demo; a cancellation (Ctrl-C, SIGTERM) ends it early with a partial summary.

    Every child process is stopped and the temporary directory removed before this returns.
    """
    demo = _Demo(settings, progress)
    interrupted = False
    error: str | None = None
    tails: dict[str, str] = {}
    try:
        with progress:
            await demo.run()
    except asyncio.CancelledError:
        interrupted = True
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
    except Exception as exc:  # reported with a partial summary; the cleanup below must run in any case
        error = f"{type(exc).__name__}: {exc}"
        if getattr(exc, "log_tail", ""):
            tails["failing process"] = exc.log_tail  # type: ignore[attr-defined]
    finally:
        stopped = await demo.cleanup()
        tails = {**stopped, **{k: v for k, v in tails.items() if v not in stopped.values()}}
    rows = build_rows(settings.profile, demo.loadgen.seconds, demo.state)
    if interrupted or error:
        rows = rows[:len(demo.state)]
    syncs = list(demo.hpa.history) if demo.hpa else []
    outputs_doc = {"plot": str(outputs.plot) if outputs.plot and rows else None,
                   "csv": str(outputs.csv) if outputs.csv and rows else None}
    summary = summarize(rows, syncs, settings.profile.load_step_at, settings.profile.load_drop_at,
                        needed_replicas=settings.needed_replicas, extra={
        **settings.describe(), **outputs_doc,
        "startup_seconds": None if demo.startup_s is None else round(demo.startup_s, 2),
        "wall_seconds": round(time.monotonic() - demo.started, 2), "error_kinds": dict(demo.loadgen.error_kinds),
        "run_id": demo.processes.run_id, "child_pids": demo.processes.pids, "interrupted": interrupted,
        "error": error, **({"cold_start": cold_start_figures(demo.gateway)} if demo.gateway is not None else {}),
        **({"capacity": capacity_figures(demo, rows, syncs)} if demo.layer is not None else {})})
    if outputs.csv is not None and rows:
        write_csv(rows, outputs.csv)
    if outputs.plot is not None and rows:
        from loadtest.plot import plot_timeline  # matplotlib: the loadtest extra

        title = f"gpu-loadtest demo: {describe_hpa(settings)}"
        if settings.gateway:
            title = (f"gpu-loadtest demo --min-replicas {settings.min_replicas}: {summary.gpu_seconds} GPU-seconds "
                     f"used ({summary.seconds_at_zero} s at zero replicas)\n{describe_gateway_hpa(settings)}")
        if settings.capacity is not None:
            title = f"gpu-loadtest demo --nodes {settings.capacity.kind.value}: {describe_capacity(settings)}\n" \
                    f"{describe_hpa(settings)}"
        plot_timeline(rows, syncs, outputs.plot, load_step_at=settings.profile.load_step_at,
                      load_drop_at=settings.profile.load_drop_at, title=title, time_scale=settings.time_scale)
    if outputs.summary is not None:
        atomic_write_json(outputs.summary, summary.to_json())
    return DemoResult(summary, rows, syncs, interrupted, error, tails)


def capacity_figures(demo: _Demo, rows: Sequence[TimelineRow], syncs: Sequence[SyncRecord]) -> dict[str, Any]:
    """Time to capacity per surge and the node layer's totals, in real-time equivalents (demo seconds times the
    time scale)."""
    layer, s = demo.layer, demo.settings
    assert layer is not None
    end = None if layer.load_started is None else layer.load_started + s.profile.duration
    spans, launches = layer.spans(), layer.launches()
    figures = []
    for i, surge in enumerate(surges(s.profile)):
        needed = replicas_needed(s.profile, surge, s.requests_per_replica)
        figures.append(measure(i + 1, surge, syncs, spans, rows, launches, needed=needed, service_s=s.service_ms / 1000,
                               demand_at=demand_for(s.profile, surge, needed, s.requests_per_replica)))
    headroom_hpa = demo.headroom_hpa.history if demo.headroom_hpa is not None else []
    return {"time_scale": s.time_scale, "surges": [f.to_json(s.time_scale) for f in figures],
            **layer.totals(end if end is not None and end < layer.now() else None),
            "headroom_decisions": [{"t": round(r.t * s.time_scale, 1), "from": r.current, "to": r.desired,
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


def describe_capacity(settings: DemoSettings) -> str:
    """``headroom auto (1..4 on requests), pause placeholders, node 180 s, ...`` for titles and headers."""
    capacity = settings.capacity
    assert capacity is not None
    t = capacity.timings
    headroom = (f"auto ({capacity.headroom_min}..{capacity.headroom} on {capacity.headroom_signal})"
                if capacity.headroom_auto else str(capacity.headroom))
    return (f"headroom {headroom}, {describe_placeholders(capacity)}, node {t.node_s:g} s, image "
            f"{t.image_pull_s:g} s, model {t.model_load_s:g} s (real time; run {settings.time_scale:g}x faster)")


def describe_placeholders(capacity: NodeLayerConfig) -> str:
    """What the placeholders run, in the chart's terms."""
    if capacity.placeholder_image == PLACEHOLDER_IMAGES["pause"]:
        return "pause placeholders (the chart's default)"
    return "placeholders pre-pulling the workload's image (headroom.placeholders.prePullImage)"


def describe_metrics(settings: DemoSettings) -> str:
    """``X (Pods, target T) and Y (Pods, target U)``: what the HPA scales on."""
    if settings.gateway:
        return (f"{GATEWAY_QUEUE} (External, AverageValue {settings.queue_target:g}) and {GATEWAY_RUNNING} "
                f"(External, Value {settings.running_target:g}), {settings.selector}")
    targets = {QUEUE_METRIC: settings.queue_target, settings.metric: settings.target}
    return " and ".join(f"{name} (Pods, target {targets[name]:g})" for name in settings.hpa_metrics)


def describe_gateway_hpa(settings: DemoSettings) -> str:
    """The scale-to-zero HPA in a few lines, for plot titles."""
    return "\n".join((*textwrap.wrap(f"HPA on {describe_metrics(settings)}", 110),
                      f"sync every {settings.sync_period_s:g}s, cold start {settings.cold_start_s:g}s, gateway "
                      f"timeout {settings.gateway_timeout_s:g}s"))


def describe_hpa(settings: DemoSettings, *, min_replicas: bool = True) -> str:
    """``HPA on ..., sync every Ns`` for titles (with the gateway: minReplicas, unless told not to, and the cold
    start too)."""
    text = f"HPA on {describe_metrics(settings)}, sync every {settings.sync_period_s:g}s"
    if settings.time_scale != 1.0:  # the titles around it speak in real time
        text += f" ({settings.sync_period_s * settings.time_scale:g}s in real time)"
    if settings.gateway:
        text += (f", minReplicas {settings.min_replicas}" if min_replicas else "") + \
            f", cold start {settings.cold_start_s:g}s"
    return text


def with_overrides(settings: DemoSettings, **changes: Any) -> DemoSettings:
    """``settings`` with the given (non-None) fields replaced."""
    return replace(settings, **{k: v for k, v in changes.items() if v is not None})
