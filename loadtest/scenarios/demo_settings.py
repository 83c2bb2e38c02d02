"""The demo's settings: one :class:`DemoSettings` holds the load profile, the HPA and its targets, the replicas, the
gateway and the GPU nodes of a run, and builds the HPA specs from them; the defaults for each demo (the default and
``--quick``, scale to zero, GPU nodes on the compressed clock)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from adapter.presets.capacity import GROWTH_METRIC, REQUEST_GROWTH_METRIC
from loadtest.clock import REAL_TIME, DemoClock
from loadtest.hpa import (
    DEFAULT_DOWNSCALE_STABILIZATION_SECONDS,
    DEFAULT_SCALE_DOWN_POLICIES,
    DEFAULT_SCALE_UP_POLICIES,
    DEFAULT_SYNC_PERIOD_SECONDS,
    Behavior,
    ControllerConfig,
    HPASpec,
    MetricSpec,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
)
from loadtest.hpa.scale_on import QUEUE_METRIC, ScaleOn
from loadtest.loadgen.open_loop import Arrivals
from loadtest.loadgen.profile import Profile, parse_profile
from loadtest.measure.time_to_capacity import replicas_for
from loadtest.nodes.layer import NodeLayerConfig
from loadtest.scenarios.capacity_options import CAPACITY_QUICK_PROFILE, PLACEHOLDER_IMAGES, capacity_profile
from loadtest.standins.gateway import QUEUE_METRIC as GATEWAY_QUEUE
from loadtest.standins.gateway import RUNNING_METRIC as GATEWAY_RUNNING

__all__ = ["DEFAULT_SETTINGS", "QUICK_SETTINGS", "ZERO_QUICK_SETTINGS", "ZERO_SETTINGS", "DemoSettings",
           "capacity_settings", "with_overrides"]


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
    seed: int | None = None  # the load's random arrivals (None: a fresh draw each run)
    replay: tuple[str, ...] = ()  # --from-report: the file, and what the run took from it

    @property
    def clock(self) -> DemoClock:
        """The clock of the Kubernetes and cloud delays (real time without nodes)."""
        return REAL_TIME if self.capacity is None else self.capacity.clock

    @property
    def real_profile(self) -> Profile:
        """The load profile in real time (the demo runs it ``time_scale`` times faster)."""
        return self.clock.real_profile(self.profile)

    def _policies(self, policies: tuple[ScalingPolicy, ...]) -> tuple[ScalingPolicy, ...]:
        """The HPA's default rate-limit policies with their periods on the compressed clock."""
        return tuple(replace(p, period_seconds=self.clock.demo_whole_seconds(p.period_seconds, least=1))
                     for p in policies)

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
        target = self.clock.demo_rate(per_replica / self.provisioning_s)
        return HPASpec(
            max_replicas=c.headroom, min_replicas=c.headroom_min,
            metrics=(MetricSpec.object(metric, "Deployment/infer", average_value=f"{target:.4g}"),),
            behavior=Behavior(
                scale_up=ScalingRules(stabilization_window_seconds=self.clock.demo_whole_seconds(c.headroom_scale_up_s),
                                      policies=self._policies(DEFAULT_SCALE_UP_POLICIES)),
                scale_down=ScalingRules(stabilization_window_seconds=self.clock.demo_whole_seconds(
                    c.headroom_scale_down_s),
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
    def replica_rate(self) -> float:
        """Requests per second one replica serves at what the workload's HPA holds it to, for "replicas needed": its
        GPU target's share of a replica's capacity (15 at 60 % and 40 ms; with the gateway, the running-requests
        target's); on the queue alone, its whole capacity (25), the most a replica serves before its queue grows
        without end: fewer replicas than the rate over that and the queue, and the HPA on it, keeps rising; more and
        it stays short. With both metrics the controller takes the larger proposal: the GPU target's."""
        if self.scale_on is ScaleOn.QUEUE:
            return 1000 / self.service_ms
        return 1000 / self.service_ms * (self.running_target if self.gateway else self.target / 100)

    @property
    def needed_replicas(self) -> int:
        """Replicas the peak rate needs at :attr:`replica_rate` each (what a scale-up should reach)."""
        return replicas_for(self.profile.peak_rate, self.replica_rate)

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
                "arrivals": self.arrivals.value, "seed": self.seed,
                **({"replay": list(self.replay)} if self.replay else {}),
                **({"running_target_value": self.running_target, "cold_start_seconds": self.cold_start_s,
                    "gateway_timeout_seconds": self.gateway_timeout_s, "endpoint_limit": self.endpoint_limit,
                    "inference_pool": self.pool, "scale_up_policy": {
                        "type": "Pods", "value": self.wake_replicas, "periodSeconds": self.scale_up_period_s}}
                   if self.gateway else {}),
                **({"nodes": self.capacity.kind.value, "time_scale": self.clock.time_scale,
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
    clock = capacity.clock
    real = profile or (parse_profile(CAPACITY_QUICK_PROFILE) if quick else capacity_profile())
    return DemoSettings(profile=clock.demo_profile(real), sync_period_s=clock.demo_seconds(sync_period_s),
                        scale_down_window_s=clock.demo_whole_seconds(scale_down_window_s),
                        cold_start_s=clock.demo_seconds(capacity.timings.model_load_s), arrivals=Arrivals.POISSON,
                        capacity=capacity)


def with_overrides(settings: DemoSettings, **changes: Any) -> DemoSettings:
    """``settings`` with the given (non-None) fields replaced."""
    return replace(settings, **{k: v for k, v in changes.items() if v is not None})
