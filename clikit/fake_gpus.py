"""The identities of the exporter's fake GPUs (``gpu-exporter --backend fake``): the UUID of GPU ``index`` and of
each MIG compute instance, the same for a given seed in every process.

Shared by the fake backend, which reports them, and by whatever stands in for the kubelet beside it (the load test's
local Deployment, the tests), which must name the same devices in its PodResources answers."""

from __future__ import annotations

import uuid

__all__ = ["fake_gpu_uuid", "fake_mig_uuid"]


def fake_gpu_uuid(seed: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpu-autoscaler/fake/{seed}/{index}"))


def fake_mig_uuid(seed: str, index: int, gi: int, ci: int) -> str:
    return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpu-autoscaler/fake/{seed}/{index}/gi{gi}/ci{ci}"))
