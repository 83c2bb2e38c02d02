"""GPU nodes under the replicas, as pure models on the caller's clock: the cluster (scheduler, preemption, image
cache, ReplicaSets), Karpenter v1 and Cluster Autoscaler, the node and replica start-up phases, and the shape of the
capacity read from the project's manifests. Each module names the upstream sources its rules come from; the
table-driven tests (tests/test_loadtest_nodes.py) name the upstream file of each case.

    cluster = Cluster(NodeTimings())
    karpenter = Karpenter(load_nodepool())
    cluster.set_replicas("infer", PodTemplate(gpus=1), 3)
    for second in range(400):
        cluster.step(second)
        karpenter.tick(cluster, second)
    # karpenter.launches == [(1, 'g5.12xlarge', 3)]: one node for the three pods, the cheapest type with at least
    # 3 GPUs (4), requested at 1 s, when the batch window's idle second ends; the pods bind at 181 s, when its
    # GPUs are allocatable, and run at 515 s, once the image is pulled
"""

from loadtest.nodes.cluster import Cluster, Node, Pod, PodTemplate, ReplicaSet
from loadtest.nodes.cluster_autoscaler import AutoscalerSettings, ClusterAutoscaler
from loadtest.nodes.instances import INSTANCE_TYPES_FILE, InstanceType, InstanceTypeError, load_instance_types
from loadtest.nodes.karpenter import Karpenter, KarpenterSettings, NodeClaim
from loadtest.nodes.shapes import (
    NodeGroup,
    NodePool,
    ShapeError,
    load_node_groups,
    load_nodepool,
    nodepool_from_values,
)
from loadtest.nodes.timings import NodeTimings

Provisioner = Karpenter | ClusterAutoscaler

__all__ = ["INSTANCE_TYPES_FILE", "AutoscalerSettings", "Cluster", "ClusterAutoscaler", "InstanceType",
           "InstanceTypeError", "Karpenter", "KarpenterSettings", "Node", "NodeClaim", "NodeGroup", "NodePool",
           "NodeTimings", "Pod", "PodTemplate", "Provisioner", "ReplicaSet", "ShapeError", "load_instance_types",
           "load_node_groups", "load_nodepool", "nodepool_from_values"]
