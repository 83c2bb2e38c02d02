"""How long a new GPU node and a replica on it take, phase by phase.

Every default is a real-world figure in seconds (docs/capacity.md has the table with sources):

* ``launch_s`` 45 and ``ready_s`` 20: the provisioner's request to the Node registering (instance launch, boot,
  kubelet TLS bootstrap), then to the Node's Ready condition (CNI). 65 s launch to Ready is what Outreach measured on
  EKS nodes before tuning them (KubeFM, "Faster EKS Node and Pod Startup", 2026: 65 s, 45 s after).
* ``gpu_s`` 115: Ready to ``nvidia.com/gpu`` allocatable (NVIDIA driver, container toolkit, device plugin). An
  estimate, derived: no source measures this phase on its own. The Cluster Autoscaler FAQ ("How fast is HPA when
  combined with CA?") says that on GCE it usually takes 3 to 4 minutes from the autoscaler's request to pods
  schedulable on a new node, for nodes in general, not GPU nodes; 115 s is what remains of its lower end, 3
  minutes, after the 65 s above. Cluster Autoscaler's ``utils/gpu`` commit says a GPU node can take up to 15
  minutes to report its GPUs once Ready, and Red Hat measured precompiled driver containers saving 2 to 3 minutes
  of a GPU node's provisioning ("How precompiled drivers improve NVIDIA GPU autoscaling on Red Hat OpenShift").
* ``image_pull_s`` 334: a 9.5 GB (compressed; 20.4 GB on disk) inference image pulled onto a node that does not
  have it: the EKS Blueprints "EKS Cluster w/ Cached ML Images" pattern measured 334 s for
  ``nvcr.io/nvidia/pytorch:24.08-py3`` (under 5 s from its EBS snapshot cache). The kubelet keeps pulled images, so
  a node pulls an image once.
* ``model_load_s`` 48: vLLM loading Llama-3-8B's safetensors from a gp3 volume on a g5.12xlarge: 47.99 s with
  vLLM's default loader (NVIDIA, "Reducing Cold Start Latency for LLM Inference with NVIDIA Run:ai Model
  Streamer", 2025).

The demo puts them on its compressed clock with the other settings dataclasses' ``*_s`` fields
(:meth:`loadtest.clock.DemoClock.demo_settings`), so the phases keep their proportions to each other and to the HPA's
sync period.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NodeTimings"]


@dataclass(frozen=True)
class NodeTimings:
    launch_s: float = 45.0
    ready_s: float = 20.0
    gpu_s: float = 115.0
    image_pull_s: float = 334.0
    model_load_s: float = 48.0

    @property
    def node_s(self) -> float:
        """Request to GPUs allocatable: the node phase of a scale-up that needs a new node."""
        return self.launch_s + self.ready_s + self.gpu_s
