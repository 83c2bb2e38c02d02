"""How the demo's settings read in titles and table headers: what the HPA scales on, its sync, the gateway, the
GPU nodes and their placeholders."""

from __future__ import annotations

import textwrap

from loadtest.hpa.scale_on import QUEUE_METRIC
from loadtest.nodes.layer import NodeLayerConfig
from loadtest.scenarios.capacity_options import PLACEHOLDER_IMAGES
from loadtest.scenarios.demo_settings import DemoSettings
from loadtest.standins.gateway import QUEUE_METRIC as GATEWAY_QUEUE
from loadtest.standins.gateway import RUNNING_METRIC as GATEWAY_RUNNING

__all__ = ["describe_capacity", "describe_gateway_hpa", "describe_hpa", "describe_metrics", "describe_placeholders"]


def describe_capacity(settings: DemoSettings) -> str:
    """``headroom auto (1..4 on requests), pause placeholders, node 180 s, ...`` for titles and headers."""
    capacity = settings.capacity
    assert capacity is not None
    t = capacity.timings
    headroom = (f"auto ({capacity.headroom_min}..{capacity.headroom} on {capacity.headroom_signal})"
                if capacity.headroom_auto else str(capacity.headroom))
    return (f"headroom {headroom}, {describe_placeholders(capacity)}, node {t.node_s:g} s, image "
            f"{t.image_pull_s:g} s, model {t.model_load_s:g} s (real time; run {settings.clock.time_scale:g}x faster)")


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
    if settings.clock.compressed:  # the titles around it speak in real time
        text += f" ({settings.clock.real_seconds(settings.sync_period_s):g}s in real time)"
    if settings.gateway:
        text += (f", minReplicas {settings.min_replicas}" if min_replicas else "") + \
            f", cold start {settings.cold_start_s:g}s"
    return text
