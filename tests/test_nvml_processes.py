"""The NVML backend's per-process data (real pynvml, simulated libnvidia-ml) feeding per-pod shared-GPU series."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from exporter.backends.nvml import NvmlBackend
from exporter.fields.counters import load_counters
from exporter.pods.directory import KubeletLogDirectory
from exporter.pods.mapping import DeviceAllocation, PodRef
from exporter.pods.podresources.client import PodResourcesStatus
from exporter.pods.process_attribution import ProcessAttribution
from exporter.pods.procfs import ProcFs
from exporter.serving.collector import Collector, CollectorOptions, PodAttribution
from tests import fakenvml
from tests.exporter_helpers import parse_metrics, series, value
from tests.fake_node import FakeNode
from tests.fakenvml import MIB, FakeNvml, FakeProcess, FakeProcessSample

pytestmark = pytest.mark.unit

fake_nvml = fakenvml.fake_nvml

SM, FB = "gpu_pod_sm_utilization_ratio", "gpu_pod_framebuffer_used_bytes"


def entity_report(backend: NvmlBackend, gpu: int, gi: int | None = None):  # type: ignore[no-untyped-def]
    backend.begin_collection()
    entity = next(e for e in backend.entities("f") if e.key == (gpu, gi))
    return backend.processes(entity)


def test_process_lists_are_joined_with_the_newest_utilisation_sample(fake_nvml: FakeNvml) -> None:
    gpu = fake_nvml.gpus[0]
    gpu.processes = [
        FakeProcess(pid=10, used_memory=1000 * MIB),
        FakeProcess(pid=10, used_memory=1000 * MIB, kind="graphics"),  # C+G: one allocation, listed twice
        FakeProcess(pid=11, used_memory=300 * MIB, kind="mps"),  # an MPS client
        FakeProcess(pid=12, used_memory=None),  # WDDM: unknown
    ]
    gpu.process_samples = [
        FakeProcessSample(pid=10, timestamp_us=1_000, sm=90),
        FakeProcessSample(pid=10, timestamp_us=3_000, sm=40),  # the newest sample of pid 10 wins
        FakeProcessSample(pid=11, timestamp_us=2_000, sm=25),
        FakeProcessSample(pid=99, timestamp_us=2_500, sm=70),  # exited: in no process list
    ]
    backend = NvmlBackend(pynvml)
    backend.open()
    try:
        report = entity_report(backend, 0)
        assert report.sm_util_supported
        assert [(p.pid, p.fb_used_bytes, p.sm_util) for p in report.processes] == [
            (10, 1000 * MIB, 40), (11, 300 * MIB, 25), (12, None, 0)]
        # the next collection only sees samples newer than the last one seen
        gpu.process_samples.append(FakeProcessSample(pid=11, timestamp_us=4_000, sm=5))
        report = entity_report(backend, 0)
        assert [(p.pid, p.sm_util) for p in report.processes] == [(10, 0), (11, 5), (12, 0)]
        # no new sample at all (NVML answers NOT_FOUND): everything idle, not an error
        report = entity_report(backend, 0)
        assert [p.sm_util for p in report.processes] == [0, 0, 0] and report.sm_util_supported
    finally:
        backend.close()


def test_mig_instance_processes_over_all_its_compute_instances_without_utilisation(fake_nvml: FakeNvml) -> None:
    gpu = fake_nvml.gpus[0]
    gpu.add_mig("3g.40gb", gpu_instance_id=2, compute_instance_id=0, index=0)
    gpu.add_mig("3g.40gb", gpu_instance_id=2, compute_instance_id=1, index=1)
    gpu.add_mig("1g.10gb", gpu_instance_id=9, index=2)
    gpu.processes = [FakeProcess(pid=1, used_memory=MIB, gpu_instance_id=2, compute_instance_id=0),
                     FakeProcess(pid=2, used_memory=2 * MIB, gpu_instance_id=2, compute_instance_id=1),
                     FakeProcess(pid=3, used_memory=3 * MIB, gpu_instance_id=9, compute_instance_id=0)]
    backend = NvmlBackend(pynvml)
    backend.open()
    try:
        report = entity_report(backend, 0, 2)
    finally:
        backend.close()
    assert [(p.pid, p.fb_used_bytes) for p in report.processes] == [(1, MIB), (2, 2 * MIB)]
    assert not report.sm_util_supported
    assert fake_nvml.calls["nvmlDeviceGetProcessUtilization"] == 0


def test_older_driver_without_the_graphics_and_mps_lists(fake_nvml: FakeNvml) -> None:
    fake_nvml.hide_symbol("nvmlDeviceGetGraphicsRunningProcesses_v3")
    fake_nvml.hide_symbol("nvmlDeviceGetMPSComputeRunningProcesses_v3")
    fake_nvml.gpus[0].processes = [FakeProcess(pid=10, used_memory=MIB)]
    backend = NvmlBackend(pynvml)
    backend.open()
    try:
        assert [p.pid for p in entity_report(backend, 0).processes] == [10]
    finally:
        backend.close()


def test_shared_gpu_per_pod_series_from_nvml(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    a, b = node.pod("infer-a", "ml", "main"), node.pod("infer-b", "ml", "main")
    node.run(4242, a, "main")
    node.run(4343, b, "main")
    gpu = fake_nvml.gpus[0]
    gpu.processes = [FakeProcess(pid=4242, used_memory=2048 * MIB), FakeProcess(pid=4343, used_memory=1024 * MIB)]
    gpu.process_samples = [FakeProcessSample(pid=4242, timestamp_us=10, sm=35)]
    allocations = (DeviceAllocation("nvidia.com/gpu", f"{gpu.uuid}::0", PodRef("infer-a", "ml", "main")),
                   DeviceAllocation("nvidia.com/gpu", f"{gpu.uuid}::1", PodRef("infer-b", "ml", "main")))
    attribution = ProcessAttribution(ProcFs(str(node.proc)), KubeletLogDirectory(str(node.logs)))
    pods = PodAttribution(lambda: PodResourcesStatus(allocations, True, 1.0), processes=attribution)
    backend = NvmlBackend(pynvml)
    backend.open()
    collector = Collector(backend, load_counters(None), CollectorOptions(pods=pods))
    try:
        collector.collect_once()
        rows = parse_metrics(collector.snapshot.body.decode())
    finally:
        backend.close()
    assert value(rows, SM, pod="infer-a") == 0.35
    assert value(rows, SM, pod="infer-b") == 0  # no sample: it ran no kernels
    assert value(rows, FB, pod="infer-a") == 2048 * MIB
    assert value(rows, FB, pod="infer-b") == 1024 * MIB
    assert "pod" not in series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]
