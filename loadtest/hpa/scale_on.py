"""What the demo's HPA scales on (``gpu-loadtest demo --metric``); a module of its own so the CLI can offer the
choices without importing the demo (replica processes start through the same CLI)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["PODS_CHOICES", "QUEUE_METRIC", "ScaleOn"]

QUEUE_METRIC = "vllm:num_requests_waiting"


class ScaleOn(StrEnum):
    GPU = "gpu"  # DCGM_FI_DEV_GPU_UTIL per pod
    QUEUE = "queue"  # vllm:num_requests_waiting per pod
    BOTH = "both"  # both metrics: the HPA takes the larger proposal
    GATEWAY = "gateway"  # a gateway in front: its queue and the pool's running requests (External, by pool)


PODS_CHOICES = (ScaleOn.GPU, ScaleOn.QUEUE, ScaleOn.BOTH)
"""The per-pod choices ``--compare`` runs side by side."""
