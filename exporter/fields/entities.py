"""What the exporter reports on: a physical GPU, or one MIG GPU instance of it (dcgm-exporter flex mode)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuEntity:
    """One series group on /metrics.

    For a MIG GPU instance, ``gpu``/``uuid``/``pci_bus_id``/``model_name`` are the parent GPU's, as
    dcgm-exporter labels them, and ``mig_uuids`` lists the MIG device UUIDs (one per compute instance)
    inside the GPU instance, so pod attribution can match device-plugin IDs against them.
    """

    gpu: int
    uuid: str
    pci_bus_id: str
    model_name: str
    gpu_instance_id: int | None = None
    gpu_instance_profile: str | None = None
    mig_uuids: tuple[str, ...] = field(default=())

    @property
    def device(self) -> str:
        return f"nvidia{self.gpu}"

    @property
    def is_mig(self) -> bool:
        return self.gpu_instance_id is not None

    @property
    def key(self) -> tuple[int, int | None]:
        """Stable identity: (physical GPU index, GPU-instance id or None)."""
        return (self.gpu, self.gpu_instance_id)
