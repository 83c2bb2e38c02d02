"""Recording rules that measure, from kube-state-metrics, how long a GPU workload's new replicas wait for a node and
for readiness, per Deployment and over days; and, where Prometheus scrapes Karpenter, its own view of GPU capacity.

kube-state-metrics exports each pod's timestamps as gauges (``internal/store/pod.go``; labels ``namespace``, ``pod``,
``uid``): ``kube_pod_created`` (creation), ``kube_pod_status_scheduled_time`` (when PodScheduled turned True),
``kube_pod_status_ready_time`` (when Ready last turned True), ``kube_pod_info`` (label ``node``) and
``kube_pod_container_resource_requests`` (label ``resource``, the name sanitised: ``nvidia.com/gpu`` reads
``nvidia_com_gpu``); ``kube_node_created`` per node (``internal/store/node.go``). From them, per GPU pod of a
Deployment (pod -> ReplicaSet -> Deployment through ``kube_pod_owner`` and ``kube_replicaset_owner``):

* :data:`PLACEMENT`: the node it runs on and ``new_node``: ``"true"`` when that node was created after the pod, i.e.
  the pod had to wait for a node to be added (a pod that took a free GPU, or a placeholder's, reads ``"false"``);
* :data:`TO_SCHEDULED` and :data:`TO_READY`: seconds from its creation to scheduled and to ready.

Every series of a pod lasts as long as the pod, so a quantile over time would weigh a pod by its lifetime. The
history group (every :data:`HISTORY_INTERVAL`) takes one value per pod instead, the smallest its series had over
:data:`HISTORY_WINDOW` (``kube_pod_status_ready_time`` is the *last* transition to Ready: a pod that flapped later
reads larger afterwards, so the first value is the startup), then per Deployment and ``new_node`` the quantiles
(label ``quantile``: 0.5, 0.9, 1) and the count of pods behind them. :data:`PROVISIONING` is what the
``capacity-headroom`` preset's provisioning time comes from: the p90 creation -> ready of the Deployment's pods
that waited for a new node, over the last day that had any, held for :data:`HOLD_WINDOW`. It reads only pods that
waited for a node, so headroom that works (replicas landing on placeholders' nodes) leaves it unchanged instead of
shrinking it; docs/capacity.md ("Headroom from history").
"""

from __future__ import annotations

from adapter.presets.inference import POD_DEPLOYMENT_EXPR

__all__ = ["GPU_REQUESTS", "HEADROOM_INFO", "HEADROOM_PROVISIONING", "HISTORY_INTERVAL", "HISTORY_WINDOW",
           "HOLD_WINDOW", "KARPENTER_BOUND", "KARPENTER_GPU_USAGE", "PLACEMENT", "PROVISIONING", "QUANTILES",
           "TO_READY", "TO_SCHEDULED", "capacity_groups", "first_of", "per_workload"]

GPU_REQUESTS = "namespace_pod:kube_pod_container_resource_requests_gpu:sum"
"""GPUs (any ``nvidia.com/*`` extended resource: whole GPUs, MIG slices, shared GPUs) a pod's containers request,
only pods that request some (labels ``namespace``, ``pod``, ``uid``)."""
PLACEMENT = "namespace_deployment_pod:kube_pod_gpu_placement:info"
"""1 per GPU pod of a Deployment that runs on a node (labels ``namespace``, ``deployment``, ``pod``, ``uid``,
``node``, ``new_node``)."""
TO_SCHEDULED = "namespace_deployment_pod:kube_pod_time_to_scheduled_seconds:gpu"
TO_READY = "namespace_deployment_pod:kube_pod_time_to_ready_seconds:gpu"
PROVISIONING = "namespace_deployment:gpu_provisioning_seconds:p90"
"""Per Deployment: p90 seconds from creation to ready of its pods that waited for a new node."""
HEADROOM_PROVISIONING = "namespace_deployment:headroom_provisioning_seconds"
"""The provisioning time ``headroom.auto`` uses, recorded by the chart for its workload (labels ``namespace``,
``deployment`` or ``inference_pool``, ``source``: history, fallback or fixed); the preset's ``*_ahead`` metrics
multiply the demand's growth by it."""
HEADROOM_INFO = "namespace_workload:headroom:info"
"""1 per workload the chart renders headroom for (labels ``namespace``, ``workload``, ``workload_kind``,
``placeholders``, ``capacitybuffer``): what the dashboard's headroom panels join on."""
KARPENTER_GPU_USAGE = "nodepool:karpenter_nodepools_usage_gpu:ratio"
KARPENTER_BOUND = "cluster_quantile:karpenter_pods_bound_duration_seconds:histogram_quantile"

HISTORY_WINDOW = "1d"
HOLD_WINDOW = "7d"
HISTORY_INTERVAL = "5m"
"""The history group's evaluation interval: each of its rules reads a day of every GPU pod's series."""
QUANTILES = ("0.5", "0.9", "1")
KARPENTER_WINDOW = "1h"

_KEY = "namespace, pod, uid"
_CREATED = f"max by ({_KEY}) (kube_pod_created)"
_NODE_CREATED = (
    f'(max by ({_KEY}, node) (kube_pod_info{{node!=""}}) and on ({_KEY}) {GPU_REQUESTS})'
    f" * on (namespace, pod) group_left (deployment) {POD_DEPLOYMENT_EXPR}"
    " * on (node) group_left () max by (node) (kube_node_created)")
"""Per GPU pod of a Deployment that has a node: the node's creation time (labels ``namespace``, ``pod``, ``uid``,
``node``, ``deployment``)."""


def _placement() -> str:
    """1 per pod, ``new_node`` "true" where its node was created after it (the comparisons keep the node's
    creation time, ``0 * ... + 1`` turns it into 1)."""
    sides = []
    for op, value in ((">", "true"), ("<=", "false")):
        sides.append(f'label_replace(0 * ({_NODE_CREATED} {op} on ({_KEY}) group_left () {_CREATED}) + 1, '
                     f'"new_node", "{value}", "", "")')
    return " or ".join(sides)


def _since_created(timestamp: str) -> str:
    """Seconds from each GPU pod's creation to ``timestamp`` (a kube-state-metrics pod gauge), with its placement's
    labels."""
    return (f"(max by ({_KEY}) ({timestamp}) - on ({_KEY}) {_CREATED})"
            f" * on ({_KEY}) group_left (deployment, node, new_node) {PLACEMENT}")


def first_of(record: str) -> str:
    """The name of the per-pod smallest value over the history window of a per-pod rule."""
    return record.rsplit(":", 1)[0] + f":min_{HISTORY_WINDOW}"


def per_workload(record: str, what: str) -> str:
    """The name of a per-Deployment figure (``quantile_1d``, ``count_1d``) of a per-pod rule."""
    level, metric, _ = record.split(":")
    return f"{level.removesuffix('_pod')}:{metric}:{what}_{HISTORY_WINDOW}"


def _history(record: str) -> list[dict[str, object]]:
    first = first_of(record)
    rules: list[dict[str, object]] = [{"record": first, "expr": f"min_over_time({record}[{HISTORY_WINDOW}])"}]
    by = "namespace, deployment, new_node"
    rules += [{"record": per_workload(record, "quantile"), "expr": f"quantile by ({by}) ({q}, {first})",
               "labels": {"quantile": q}} for q in QUANTILES]
    rules.append({"record": per_workload(record, "count"), "expr": f"count by ({by}) ({first})"})
    return rules


def _karpenter() -> list[dict[str, object]]:
    """Karpenter's own metrics, where Prometheus scrapes it: the GPU share of each NodePool's limit in use
    (``pkg/controllers/metrics/nodepool/controller.go``: ``karpenter_nodepools_usage`` and ``_limit``, label
    ``resource_type`` the resource name lower-cased) and the time from a pod's creation until it is bound, all pods
    of the cluster (``pkg/controllers/metrics/pod/controller.go``: ``karpenter_pods_bound_duration_seconds``, a
    histogram without labels)."""
    gpu = 'resource_type="nvidia.com/gpu"'
    rules: list[dict[str, object]] = [{
        "record": KARPENTER_GPU_USAGE,
        "expr": (f"max by (nodepool) (karpenter_nodepools_usage{{{gpu}}})"
                 f" / max by (nodepool) (karpenter_nodepools_limit{{{gpu}}})")}]
    rules += [{"record": KARPENTER_BOUND,
               "expr": (f"histogram_quantile({q}, sum by (le) "
                        f"(rate(karpenter_pods_bound_duration_seconds_bucket[{KARPENTER_WINDOW}])))"),
               "labels": {"quantile": q}} for q in ("0.5", "0.9")]
    return rules


def capacity_groups() -> list[dict[str, object]]:
    """The two rule groups: per pod (and Karpenter) at Prometheus' evaluation interval; the history every
    :data:`HISTORY_INTERVAL`, its per-pod firsts before the figures that read them (rules of a group run in order
    and see what the rules before them recorded in the same evaluation)."""
    per_pod: list[dict[str, object]] = [
        {"record": GPU_REQUESTS,
         "expr": (f"sum by ({_KEY}) (max by ({_KEY}, container, resource) "
                  '(kube_pod_container_resource_requests{resource=~"nvidia_com_.+"})) > 0')},
        {"record": PLACEMENT, "expr": _placement()},
        {"record": TO_SCHEDULED, "expr": _since_created("kube_pod_status_scheduled_time")},
        {"record": TO_READY, "expr": _since_created("kube_pod_status_ready_time")},
        *_karpenter(),
    ]
    history = _history(TO_SCHEDULED) + _history(TO_READY)
    ready_p90 = per_workload(TO_READY, "quantile")
    history.append({"record": PROVISIONING, "expr": (
        f'max by (namespace, deployment) (last_over_time({ready_p90}{{quantile="0.9",new_node="true"}}'
        f"[{HOLD_WINDOW}]))")})
    return [{"name": "gpu-autoscaler.capacity", "rules": per_pod},
            {"name": "gpu-autoscaler.capacity-history", "interval": HISTORY_INTERVAL, "rules": history}]
