"""A cluster's records in the exact shapes Kubernetes, Karpenter and Cluster Autoscaler write them, for the capacity
report's tests (``gpu-loadtest capacity``). Each builder names the upstream file its shape and message come from.

Times: ``metav1.Time`` is written to the second (RFC 3339: object timestamps, condition transitions, core v1 events'
``firstTimestamp``/``lastTimestamp``), ``metav1.MicroTime`` to the microsecond (``eventTime`` of events from the
newer recorder, k8s.io/client-go ``tools/events``, which kube-scheduler uses). The kubelet, the HPA, the
Deployment and ReplicaSet controllers, Cluster Autoscaler and Karpenter record through the older recorder
(``tools/record``): core v1 events with a ``source`` and a count. The API server serves every event through both
APIs, converting as ``pkg/apis/events/v1/conversion.go`` does (:func:`as_events_v1`, :func:`as_core_v1`).
"""

from __future__ import annotations

import copy
import itertools
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC).timestamp()  # the recorded scale-ups' window starts here
_serial = itertools.count(1)


def seconds(t: float) -> str:
    """``metav1.Time``: RFC 3339 truncated to the second (``apimachinery/pkg/apis/meta/v1/time.go`` MarshalJSON)."""
    return datetime.fromtimestamp(int(t // 1), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro(t: float) -> str:
    """``metav1.MicroTime``: ``2006-01-02T15:04:05.000000Z07:00`` (``micro_time.go``)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def go_duration(s: float) -> str:
    """Go's ``time.Duration.String`` of a duration truncated to the millisecond (the kubelet's ``Truncate``)."""
    ms = round(s * 1000)
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest = divmod(ms, 60_000)
    hours, minutes = divmod(minutes, 60)
    text = f"{rest // 1000}.{rest % 1000:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def _uid() -> str:
    return str(uuid.uuid4())


# -- objects -----------------------------------------------------------------------------------------------------

def pod(name: str, created: float, *, namespace: str = "ml", owner: str | None = None, uid: str | None = None,
        labels: dict[str, str] | None = None, node: str | None = None, priority: int = 0,
        priority_class: str | None = None, scheduled: float | None = None, started: float | None = None,
        ready: float | None = None, nominated: str | None = None, gpus: int = 1, restarts: int = 0,
        deleting: float | None = None, image: str = "vllm/vllm-openai:v0.10.1", container: str = "vllm") -> Obj:
    """A core v1 Pod as the API server returns it (``k8s.io/api/core/v1/types.go``): the ReplicaSet owner with
    ``controller: true``, ``pod-template-hash``, conditions with ``lastTransitionTime`` (``PodScheduled`` is written
    by the scheduler's binding; ``Initialized``, ``ContainersReady`` and ``Ready`` by the kubelet's status manager),
    ``containerStatuses[].state.running.startedAt``, ``nominatedNodeName`` set by preemption."""
    meta: Obj = {"name": name, "namespace": namespace, "uid": uid or _uid(), "creationTimestamp": seconds(created),
                 "resourceVersion": str(next(_serial)), "labels": dict(labels or {})}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": _uid(),
                                    "controller": True, "blockOwnerDeletion": True}]
        meta["labels"].setdefault("pod-template-hash", owner.rsplit("-", 1)[-1])
    if deleting is not None:
        meta["deletionTimestamp"] = seconds(deleting)
        meta["deletionGracePeriodSeconds"] = 5
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    spec: Obj = {"containers": [{"name": container, "image": image, "resources": resources}],
                 "priority": priority, "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node is not None:
        spec["nodeName"] = node
    conditions = []
    for kind, at in (("PodScheduled", scheduled), ("Initialized", started), ("ContainersReady", ready),
                     ("Ready", ready)):
        if at is not None:
            conditions.append({"type": kind, "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": seconds(at)})
    if scheduled is None:
        conditions.append({"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                           "lastTransitionTime": seconds(created), "reason": "Unschedulable",
                           "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."})
    status: Obj = {"phase": "Running" if started is not None else "Pending", "conditions": conditions,
                   "qosClass": "Burstable"}
    if nominated is not None:
        status["nominatedNodeName"] = nominated
    if started is not None:
        status["containerStatuses"] = [{
            "name": container, "image": image, "imageID": f"docker.io/{image}@sha256:{'0' * 64}",
            "containerID": f"containerd://{'1' * 64}", "ready": ready is not None, "started": True,
            "restartCount": restarts, "state": {"running": {"startedAt": seconds(started)}}, "lastState": {}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def node(name: str, created: float, *, ready: float | None, gpus: int = 4, labels: dict[str, str] | None = None,
         instance: str = "g5.12xlarge") -> Obj:
    """A core v1 Node: ``creationTimestamp`` when the kubelet registered it, the Ready condition's transition,
    ``nvidia.com/gpu`` in capacity and allocatable (the device plugin's, once it registered)."""
    conditions = [{"type": "Ready", "status": "True" if ready is not None else "False",
                   "lastHeartbeatTime": seconds(ready or created), "lastTransitionTime": seconds(ready or created),
                   "reason": "KubeletReady" if ready is not None else "KubeletNotReady",
                   "message": "kubelet is posting ready status" if ready is not None else "container runtime "
                   "network not ready"}]
    resources = {"cpu": "48", "memory": "195784Mi", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": _uid(), "creationTimestamp": seconds(created),
                         "resourceVersion": str(next(_serial)),
                         "labels": {"node.kubernetes.io/instance-type": instance, **(labels or {})}},
            "spec": {"providerID": f"aws:///us-west-2a/i-{uuid.uuid4().hex[:17]}"},
            "status": {"capacity": resources, "allocatable": resources, "conditions": conditions}}


def nodeclaim(name: str, created: float, *, node_name: str | None, launched: float | None,
              registered: float | None, initialized: float | None, nodepool: str = "gpu", gpus: int = 1) -> Obj:
    """A Karpenter NodeClaim (karpenter.sh/v1): conditions as ``pkg/apis/v1/nodeclaim_status.go`` names them and
    operatorpkg's ``status.ConditionSet`` writes them (a True condition's reason is its type, with an empty message;
    the root ``Ready`` is True once Launched, Registered and Initialized are)."""
    conditions = []
    for kind, at, waiting in (("Launched", launched, "NodeClaim hasn't succeeded launch"),
                              ("Registered", registered, "Node not registered with cluster"),
                              ("Initialized", initialized, "Node status is NotReady")):
        conditions.append({"type": kind, "status": "True" if at is not None else "Unknown",
                           "observedGeneration": 1, "lastTransitionTime": seconds(at if at is not None else created),
                           "reason": kind if at is not None else "AwaitingReconciliation",
                           "message": "" if at is not None else waiting})
    ready = initialized if None not in (launched, registered, initialized) else None
    conditions.append({"type": "Ready", "status": "True" if ready else "Unknown", "observedGeneration": 1,
                       "lastTransitionTime": seconds(ready or created), "reason": "Ready" if ready else
                       "UnhealthyDependents", "message": ""})
    status: Obj = {"conditions": conditions}
    if node_name is not None:
        status.update(nodeName=node_name, providerID=f"aws:///us-west-2a/i-{uuid.uuid4().hex[:17]}",
                      capacity={"nvidia.com/gpu": "4"}, allocatable={"nvidia.com/gpu": "4"})
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "uid": _uid(), "creationTimestamp": seconds(created),
                         "resourceVersion": str(next(_serial)), "labels": {"karpenter.sh/nodepool": nodepool}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                     "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}},
            "status": status}


def deployment(name: str, *, namespace: str = "ml", replicas: int = 1) -> Obj:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "uid": _uid(), "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.10.1"}]}}}}


def hpa(name: str, target: str, *, namespace: str = "ml") -> Obj:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace, "uid": _uid()},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": 1, "maxReplicas": 8,
                     "metrics": [{"type": "Pods", "pods": {"metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                                                           "target": {"type": "AverageValue",
                                                                      "averageValue": "60"}}}]},
            "status": {"currentReplicas": 1, "desiredReplicas": 1}}


# -- events ------------------------------------------------------------------------------------------------------

def _ref(kind: str, name: str, namespace: str, uid: str, api: str, field_path: str = "") -> Obj:
    ref = {"kind": kind, "namespace": namespace, "name": name, "uid": uid, "apiVersion": api,
           "resourceVersion": str(next(_serial))}
    if field_path:
        ref["fieldPath"] = field_path
    if not namespace:
        del ref["namespace"]
    return ref


def core_event(reason: str, message: str, about: Obj, at: float, *, component: str, host: str = "",
               last: float | None = None, count: int = 1, kind_type: str = "Normal") -> Obj:
    """A core v1 Event from client-go's ``tools/record`` (``makeEvent``): first and last timestamps to the second, a
    count, ``source`` and the same as ``reportingComponent``/``reportingInstance``, no ``eventTime``."""
    namespace = about.get("namespace") or "default"
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{about['name']}.{uuid.uuid4().hex[:16]}", "namespace": namespace,
                         "uid": _uid(), "creationTimestamp": seconds(at), "resourceVersion": str(next(_serial))},
            "involvedObject": about, "reason": reason, "message": message,
            "source": {"component": component, **({"host": host} if host else {})},
            "firstTimestamp": seconds(at), "lastTimestamp": seconds(last if last is not None else at),
            "count": count, "type": kind_type, "eventTime": None, "reportingComponent": component,
            "reportingInstance": host}


def new_event(reason: str, note: str, regarding: Obj, at: float, *, controller: str, action: str,
              related: Obj | None = None, kind_type: str = "Normal") -> Obj:
    """An events.k8s.io/v1 Event from client-go's ``tools/events`` recorder (``generateEvent``): ``eventTime`` to
    the microsecond, no deprecated timestamps."""
    doc: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": f"{regarding['name']}.{uuid.uuid4().hex[:16]}",
                             "namespace": regarding.get("namespace") or "default", "uid": _uid(),
                             "creationTimestamp": seconds(at), "resourceVersion": str(next(_serial))},
                "eventTime": micro(at), "reportingController": controller,
                "reportingInstance": f"{controller}-control-plane-1", "action": action, "reason": reason,
                "regarding": regarding, "note": note, "type": kind_type}
    if related is not None:
        doc["related"] = related
    return doc


def as_events_v1(event: Obj) -> Obj:
    """A core v1 event as the API server serves it through events.k8s.io/v1 (``pkg/apis/events/v1/conversion.go``:
    Message -> note, InvolvedObject -> regarding, Source -> deprecatedSource, FirstTimestamp, LastTimestamp and Count
    -> the deprecated ones, reportingComponent -> reportingController)."""
    if event["apiVersion"] == "events.k8s.io/v1":
        return copy.deepcopy(event)
    out: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": copy.deepcopy(event["metadata"]),
                "eventTime": event.get("eventTime"), "reportingController": event.get("reportingComponent", ""),
                "reportingInstance": event.get("reportingInstance", ""), "action": event.get("action", ""),
                "reason": event["reason"], "regarding": copy.deepcopy(event["involvedObject"]),
                "note": event["message"], "type": event["type"], "deprecatedSource": event.get("source", {}),
                "deprecatedFirstTimestamp": event.get("firstTimestamp"),
                "deprecatedLastTimestamp": event.get("lastTimestamp"), "deprecatedCount": event.get("count", 0)}
    for key in ("related", "series"):
        if event.get(key):
            out[key] = copy.deepcopy(event[key])
    return out


def as_core_v1(event: Obj) -> Obj:
    """An events.k8s.io/v1 event as the API server serves it through core v1 (the same conversion backwards)."""
    if event["apiVersion"] == "v1":
        return copy.deepcopy(event)
    out: Obj = {"apiVersion": "v1", "kind": "Event", "metadata": copy.deepcopy(event["metadata"]),
                "involvedObject": copy.deepcopy(event["regarding"]), "reason": event["reason"],
                "message": event["note"], "source": event.get("deprecatedSource", {}),
                "firstTimestamp": event.get("deprecatedFirstTimestamp"),
                "lastTimestamp": event.get("deprecatedLastTimestamp"), "count": event.get("deprecatedCount", 0),
                "type": event["type"], "eventTime": event["eventTime"], "action": event.get("action", ""),
                "reportingComponent": event["reportingController"], "reportingInstance": event["reportingInstance"]}
    for key in ("related", "series"):
        if event.get(key):
            out[key] = copy.deepcopy(event[key])
    return out


def pod_ref(p: Obj, container: str | None = None) -> Obj:
    meta = p["metadata"]
    return _ref("Pod", meta["name"], meta["namespace"], meta["uid"], "v1",
                f"spec.containers{{{container}}}" if container else "")


@dataclass
class Records:
    """A cluster's objects and events, written as its controllers write them."""

    pods: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    nodeclaims: list[Obj] = field(default_factory=list)
    deployments: list[Obj] = field(default_factory=list)
    hpas: list[Obj] = field(default_factory=list)
    events: list[Obj] = field(default_factory=list)  # each in the API its recorder writes to

    # kube-scheduler: pkg/scheduler/schedule_one.go (Scheduled, FailedScheduling), framework/preemption
    def scheduled(self, p: Obj, node_name: str, at: float) -> None:
        meta = p["metadata"]
        self.events.append(new_event("Scheduled", f"Successfully assigned {meta['namespace']}/{meta['name']} to "
                                     f"{node_name}", pod_ref(p), at, controller="default-scheduler",
                                     action="Binding"))

    def failed_scheduling(self, p: Obj, at: float, nodes: int = 2) -> None:
        """``handleSchedulingFailure`` (schedule_one.go) with ``FitError.Error`` (framework/types.go): the filters'
        reasons, then the preemption PostFilter's."""
        self.events.append(new_event(
            "FailedScheduling", f"0/{nodes} nodes are available: {nodes} Insufficient nvidia.com/gpu. preemption: "
            f"0/{nodes} nodes are available: {nodes} No preemption victims found for incoming pod.", pod_ref(p), at,
            controller="default-scheduler", action="Scheduling", kind_type="Warning"))

    def preempted(self, victim: Obj, preemptor: Obj, node_name: str, at: float, *, before_1_28: bool = False) -> None:
        """On the victim, naming the preemptor: by UID since Kubernetes 1.28, by namespace/name before."""
        meta = preemptor["metadata"]
        who = f"{meta['namespace']}/{meta['name']}" if before_1_28 else f"pod {meta['uid']}"
        self.events.append(new_event("Preempted", f"Preempted by {who} on node {node_name}", pod_ref(victim), at,
                                     controller="default-scheduler", action="Preempting", related=pod_ref(preemptor)))

    # kubelet: pkg/kubelet/images/image_manager.go, pkg/kubelet/kuberuntime/kuberuntime_container.go
    def pulled(self, p: Obj, pulling_at: float, pull_s: float, waited_s: float, *, node_name: str,
               size: int | None = 9_512_345_678, waiting: bool = True, container: str = "vllm") -> float:
        """Pulling, then Pulled once the pull (``pull_s``; ``waited_s`` with the wait for a serialised pull) is
        done: ``... in %v (%v including waiting). Image size: %v bytes.`` (1.30+), without the size (1.27-1.29), or
        ``... in %v`` alone (before 1.27, ``waiting=False``). Returns when Pulled was recorded."""
        image = p["spec"]["containers"][0]["image"]
        about = pod_ref(p, container)
        self.events.append(core_event("Pulling", f'Pulling image "{image}"', about, pulling_at, component="kubelet",
                                      host=node_name))
        done = pulling_at + waited_s
        message = f'Successfully pulled image "{image}" in {go_duration(pull_s)}'
        if waiting:
            message += f" ({go_duration(waited_s)} including waiting)"
            message += f". Image size: {size} bytes." if size is not None else ""
        self.events.append(core_event("Pulled", message, about, done, component="kubelet", host=node_name))
        return done

    def image_present(self, p: Obj, at: float, *, node_name: str, container: str = "vllm") -> None:
        image = p["spec"]["containers"][0]["image"]
        self.events.append(core_event("Pulled", f'Container image "{image}" already present on machine',
                                      pod_ref(p, container), at, component="kubelet", host=node_name))

    def started(self, p: Obj, at: float, *, node_name: str, container: str = "vllm") -> None:
        about = pod_ref(p, container)
        self.events.append(core_event("Created", f"Created container: {container}", about, at, component="kubelet",
                                      host=node_name))
        self.events.append(core_event("Started", f"Started container {container}", about, at, component="kubelet",
                                      host=node_name))

    # HPA: pkg/controller/podautoscaler/horizontal.go
    def rescaled(self, hpa_name: str, size: int, reason: str, at: float, *, namespace: str = "ml",
                 last: float | None = None, count: int = 1) -> None:
        uid = next(h["metadata"]["uid"] for h in self.hpas if h["metadata"]["name"] == hpa_name)
        self.events.append(core_event("SuccessfulRescale", f"New size: {size}; reason: {reason}",
                                      _ref("HorizontalPodAutoscaler", hpa_name, namespace, uid, "autoscaling/v2"),
                                      at, component="horizontal-pod-autoscaler", last=last, count=count))

    # Deployment controller: pkg/controller/deployment/sync.go; ReplicaSet: pkg/controller/replicaset
    def scaled_replica_set(self, deploy: str, replica_set: str, to: int, old: int, at: float,
                           namespace: str = "ml") -> None:
        uid = next(d["metadata"]["uid"] for d in self.deployments if d["metadata"]["name"] == deploy)
        way = "up" if to > old else "down"
        self.events.append(core_event("ScalingReplicaSet", f"Scaled {way} replica set {replica_set} to {to} from "
                                      f"{old}", _ref("Deployment", deploy, namespace, uid, "apps/v1"), at,
                                      component="deployment-controller"))

    def created_pod(self, replica_set: str, p: Obj, at: float) -> None:
        meta = p["metadata"]
        self.events.append(core_event("SuccessfulCreate", f"Created pod: {meta['name']}",
                                      _ref("ReplicaSet", replica_set, meta["namespace"], _uid(), "apps/v1"), at,
                                      component="replicaset-controller"))

    # Karpenter: pkg/controllers/provisioning/scheduling/events.go
    def nominated(self, p: Obj, claim: str, at: float) -> None:
        self.events.append(core_event("Nominated", f"Pod should schedule on: nodeclaim/{claim}", pod_ref(p), at,
                                      component="karpenter"))

    # Cluster Autoscaler: processors/status/eventing_scale_up_processor.go
    def triggered_scale_up(self, p: Obj, at: float, group: str, current: int, new: int, most: int = 10) -> None:
        self.events.append(core_event("TriggeredScaleUp", f"pod triggered scale-up: [{{{group} {current}->{new} "
                                      f"(max: {most})}}]", pod_ref(p), at, component="cluster-autoscaler"))

    def killed(self, p: Obj, at: float, *, node_name: str, container: str = "vllm") -> None:
        self.events.append(core_event("Killing", f"Stopping container {container}", pod_ref(p, container), at,
                                      component="kubelet", host=node_name))

    def objects(self) -> dict[str, list[Obj]]:
        """By the report's resource names, every event in the events.k8s.io/v1 view the report reads first."""
        return {"pods": self.pods, "nodes": self.nodes, "nodeclaims": self.nodeclaims,
                "deployments": self.deployments, "hpas": self.hpas,
                "events": [as_events_v1(e) for e in self.events]}


# -- the recorded scale-ups --------------------------------------------------------------------------------------

RS = "vllm-7d9c5b8f4"
PLACEHOLDERS_RS = "vllm-headroom-6b7c9d5f8"
HEADROOM = {"app.kubernetes.io/component": "headroom", "app.kubernetes.io/name": "gpu-autoscaler"}
GPU_REASON = "pods metric DCGM_FI_DEV_GPU_UTIL above target"


@dataclass(frozen=True)
class Truth:
    """What a recorded scale-up really spent, to check the report against."""

    time_to_capacity_s: float
    phases_s: dict[str, float]
    replicas: dict[str, dict[str, float]]  # pod -> sub-phase -> seconds
    first_replica_wait_s: float
    pending_pod_seconds: float
    nodes_launched: int


def karpenter_scale_up(t0: float = T0, *, jitter: float = 0.0) -> tuple[Records, Truth]:
    """Deployment vllm at one replica on node gpu-a (with a placeholder beside it); the HPA asks for 3 at
    ``t0 + 100``, the ReplicaSet creates the pods a second later. Replica b preempts the placeholder and takes its
    GPU (image cached: the placeholder pre-pulled it); replica c waits for a node Karpenter launches (NodeClaim
    gpu-x7k2p: the autoscaler 2 s, launch 8 s, registration 37 s, Ready 20 s, GPUs 115 s), pulls the image (333.601 s
    as the kubelet reports it) and loads its model (48 s); the preempted placeholder's refill gets a NodeClaim of its
    own. Every moment is a whole second (the records keep seconds), so the report must give exactly these phases;
    ``jitter`` moves each true moment by up to that fraction of a second, for the report's error per phase."""
    r = Records()
    j = (lambda k: jitter * ((k * 0.618) % 1.0)) if jitter else (lambda k: 0.0)
    r.deployments.append(deployment("vllm", replicas=3))
    r.hpas.append(hpa("vllm", "vllm"))
    r.nodes.append(node("gpu-a", t0 - 7200, ready=t0 - 7150, labels={"karpenter.sh/nodepool": "gpu"}))
    r.nodeclaims.append(nodeclaim("gpu-a7q9r", t0 - 7250, node_name="gpu-a", launched=t0 - 7240,
                                  registered=t0 - 7200, initialized=t0 - 7100))
    r.pods.append(pod(f"{RS}-aaaaa", t0 - 3600, owner=RS, node="gpu-a", scheduled=t0 - 3599, started=t0 - 3597,
                      ready=t0 - 3549))
    decided = t0 + 100 + j(1)
    created = decided + 1 + j(2)
    b_bound, b_started, b_ready = created + 7 + j(3), created + 9 + j(4), created + 57 + j(5)
    b = pod(f"{RS}-bbbbb", created, owner=RS, node="gpu-a", scheduled=b_bound, started=b_started, ready=b_ready)
    claim_at = created + 2 + j(6)
    launched, registered = claim_at + 8 + j(7), claim_at + 45 + j(8)
    node_ready, gpus_at = registered + 20 + j(9), registered + 135 + j(10)
    c_bound = gpus_at + 1 + j(11)
    pull_s, waited_s = 333.512, 333.601
    c_started = c_bound + 337 + j(12)
    c_ready = c_started + 48 + j(13)
    c = pod(f"{RS}-ccccc", created, owner=RS, node="gpu-x7k2p", scheduled=c_bound, started=c_started, ready=c_ready)
    r.pods += [b, c]
    victim = pod(f"{PLACEHOLDERS_RS}-ppppp", t0 - 3000, owner=PLACEHOLDERS_RS, labels=dict(HEADROOM),
                 node="gpu-a", priority=-10, priority_class="gpu-autoscaler-headroom", scheduled=t0 - 2999,
                 started=t0 - 2990, ready=t0 - 2990, image="registry.k8s.io/pause:3.10", container="pause")
    refill = pod(f"{PLACEHOLDERS_RS}-qqqqq", created + 1, owner=PLACEHOLDERS_RS, labels=dict(HEADROOM),
                 priority=-10, priority_class="gpu-autoscaler-headroom", image="registry.k8s.io/pause:3.10",
                 container="pause")
    r.pods.append(refill)  # the victim is gone: only the events speak of it
    r.nodes.append(node("gpu-x7k2p", registered, ready=node_ready, labels={"karpenter.sh/nodepool": "gpu"}))
    r.nodeclaims.append(nodeclaim("gpu-x7k2p", claim_at, node_name="gpu-x7k2p", launched=launched,
                                  registered=registered, initialized=gpus_at))
    r.nodeclaims.append(nodeclaim("gpu-m4n8z", created + 3, node_name=None, launched=None, registered=None,
                                  initialized=None))
    r.rescaled("vllm", 3, GPU_REASON, decided)
    r.scaled_replica_set("vllm", RS, 3, 1, decided)
    r.created_pod(RS, b, created)
    r.created_pod(RS, c, created)
    r.failed_scheduling(b, created + 0.2)
    r.failed_scheduling(c, created + 0.2)
    r.preempted(victim, b, "gpu-a", created + 0.3)
    r.nominated(c, "gpu-x7k2p", claim_at)
    r.nominated(refill, "gpu-m4n8z", created + 3)
    r.scheduled(b, "gpu-a", b_bound)
    r.image_present(b, b_bound + 1, node_name="gpu-a")
    r.started(b, b_started, node_name="gpu-a")
    r.scheduled(c, "gpu-x7k2p", c_bound)
    r.pulled(c, c_bound + 1, pull_s, waited_s, node_name="gpu-x7k2p")
    r.started(c, c_started, node_name="gpu-x7k2p")
    truth = Truth(
        time_to_capacity_s=c_ready - decided,
        phases_s={"decision": created - decided, "node": c_bound - created, "image": c_started - c_bound,
                  "model": c_ready - c_started},
        replicas={b["metadata"]["name"]: {"node": b_bound - created, "image": b_started - b_bound,
                                          "model": b_ready - b_started, "scheduling": b_bound - created,
                                          "image_pull": 0.0, "container_start": b_started - b_bound,
                                          "readiness": b_ready - b_started},
                  c["metadata"]["name"]: {"node": c_bound - created, "image": c_started - c_bound,
                                          "model": c_ready - c_started, "autoscaler": claim_at - created,
                                          "launch": launched - claim_at, "registration": registered - launched,
                                          "node_ready": node_ready - registered, "gpus": gpus_at - node_ready,
                                          "scheduling": c_bound - gpus_at, "image_pull": waited_s,
                                          "container_start": c_started - c_bound - waited_s,
                                          "readiness": c_ready - c_started}},
        first_replica_wait_s=b_bound - created, pending_pod_seconds=(b_bound - created) + (c_bound - created),
        nodes_launched=2)
    return r, truth
