"""First fit, the one placement rule the provisioners' simulations share (pure).

Karpenter's scheduling round puts pods on the existing and in-flight nodes before it opens NodeClaims; Cluster
Autoscaler counts pods that fit on its upcoming nodes as placed, and its binpacking estimator fills template nodes of
a group; both scale-downs ask whether a node's pods fit on the other nodes. Each does it the same way here: every
pod, in order, goes to the first node with enough free GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable

from loadtest.nodes.cluster import Pod

__all__ = ["first_fit"]


def first_fit(pods: Iterable[Pod], free: list[int], *, open_nodes: int = 0, node_gpus: int = 0,
              ) -> tuple[list[Pod], list[Pod]]:
    """Place each of ``pods``, in order, on the first node of ``free`` (free GPUs per node, in the nodes' order) with
    room for it, taking its GPUs there; failing that, on a new node of ``node_gpus`` GPUs, appended to ``free``, while
    fewer than ``open_nodes`` were opened. Returns the pods placed and those that fit nowhere."""
    placed: list[Pod] = []
    left: list[Pod] = []
    opened = 0
    for pod in pods:
        i = next((i for i, room in enumerate(free) if room >= pod.gpus), None)
        if i is not None:
            free[i] -= pod.gpus
        elif opened < open_nodes and pod.gpus <= node_gpus:
            free.append(node_gpus - pod.gpus)
            opened += 1
        else:
            left.append(pod)
            continue
        placed.append(pod)
    return placed, left
