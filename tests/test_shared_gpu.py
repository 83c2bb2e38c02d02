"""Per-pod attribution on shared GPUs with the fake backend's simulated processes and a fake /proc tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clikit.fake_gpus import fake_gpu_uuid, fake_mig_uuid
from exporter.backends.base import GpuProcess, ProcessReport
from exporter.backends.fake import FakeBackend, FakeStateError, parse_state
from exporter.fields.counters import load_counters
from exporter.fields.entities import GpuEntity
from exporter.pods.directory import KubeletLogDirectory, PodName
from exporter.pods.mapping import DeviceAllocation, PodRef, build_share_index
from exporter.pods.podresources.client import PodResourcesStatus
from exporter.pods.process_attribution import ProcessAttribution
from exporter.pods.procfs import ProcFs
from exporter.pods.shared_gpu import EntityShares, PodShare, Unplaced, attribute
from exporter.serving.collector import Collector, CollectorOptions, PodAttribution
from tests.exporter_helpers import parse_metrics, series, value, write_state
from tests.fake_node import FakeNode, FakePod

pytestmark = pytest.mark.unit

MIB = 1024 * 1024
SHARED = "nvidia.com/gpu.shared"
SM, FB = "gpu_pod_sm_utilization_ratio", "gpu_pod_framebuffer_used_bytes"
UUID0, UUID1 = fake_gpu_uuid("", 0), fake_gpu_uuid("", 1)

# --------------------------------------------------------------------------- pure: which entities are shared


ENTITIES = [GpuEntity(0, UUID0, "b0", "m"), GpuEntity(1, UUID1, "b1", "m")]
A, B = PodRef("a", "ml", "main"), PodRef("b", "ml", "main")


def test_share_index_counts_replicas_and_co_holders() -> None:
    allocations = [DeviceAllocation(SHARED, f"{UUID0}::3", A),  # one replica holder: already shared
                   DeviceAllocation("nvidia.com/gpu", UUID1, B)]  # an exclusive GPU: not shared
    extra = frozenset({SHARED})
    assert build_share_index(allocations, ENTITIES, extra_resource_names=extra) == {(0, None): (A,)}
    allocations.append(DeviceAllocation(SHARED, f"{UUID0}::0", B))
    assert build_share_index(allocations, ENTITIES, extra_resource_names=extra) == {(0, None): (A, B)}
    # the shared resource name is ignored unless configured, as for the device-level pod labels
    assert build_share_index(allocations, ENTITIES) == {}
    # GKE's time-sharing IDs in device-name mode
    gke = [DeviceAllocation("nvidia.com/gpu", "nvidia1/vgpu0", A),
           DeviceAllocation("nvidia.com/gpu", "nvidia1/vgpu1", B)]
    assert build_share_index(gke, ENTITIES, id_type="device-name") == {(1, None): (A, B)}


# --------------------------------------------------------------------------- pure: summing per holder


def report(*procs: tuple[int, int | None, int], util: bool = True) -> ProcessReport:
    return ProcessReport(tuple(GpuProcess(pid, fb, sm) for pid, fb, sm in procs), util)


def test_each_holder_gets_the_sum_of_its_processes_and_idle_holders_get_zero() -> None:
    c = PodRef("c", "ml", "main")
    owners = {1: A, 2: A, 3: B, 4: Unplaced.OUTSIDE_PODS, 5: PodRef("other", "ml", "x")}
    result = attribute((A, B, c), report((1, 100, 30), (2, 50, 5), (3, 10, 0), (4, 999, 50), (5, 999, 50)), owners)
    assert result == EntityShares((PodShare(A, 150, 0.35), PodShare(B, 10, 0.0), PodShare(c, 0, 0.0)), 0)


def test_pod_known_but_container_unknown() -> None:
    owners = {1: PodName("ml", "a")}
    assert attribute((A, B), report((1, 100, 20)), owners).shares[0] == PodShare(A, 100, 0.2)
    # two containers of that pod hold shares: whose process it is cannot be told
    sidecar = PodRef("a", "ml", "sidecar")
    assert attribute((A, sidecar, B), report((1, 100, 20)), owners) == EntityShares((), 1)
    # a pod that holds no share here is simply not a holder
    assert attribute((B,), report((1, 100, 20)), owners) == EntityShares((PodShare(B, 0, 0.0),), 0)


def test_one_unresolved_process_withholds_every_holder() -> None:
    owners = {1: A, 2: Unplaced.UNKNOWN_POD}
    assert attribute((A, B), report((1, 100, 30), (2, 10, 10)), owners) == EntityShares((), 1)
    assert attribute((A, B), report((1, 100, 30), (9, 10, 10)), owners) == EntityShares((), 1)  # never looked up


def test_unknown_memory_and_unsupported_utilisation_are_left_out_not_zero() -> None:
    result = attribute((A, B), report((1, None, 0), (2, 64, 0), util=False), {1: A, 2: B})
    assert result.shares == (PodShare(A, None, None), PodShare(B, 64, None))


# --------------------------------------------------------------------------- fake state: processes


def test_fake_state_processes_and_their_validation() -> None:
    state = parse_state({"gpus": {"0": {"processes": [{"pid": 7, "sm_util": 35, "fb_used_mib": 2048}]}}}, "s", 1)
    assert state.gpus[0].processes[0].pid == 7
    for doc, message in [
        ({"processes": [{"pid": 0}]}, "gpus.0.processes[0].pid: required, a positive integer"),
        ({"processes": [{"pid": 1, "sm_util": 101}]}, "gpus.0.processes[0].sm_util: must be an integer"),
        ({"processes": [{"pid": 1, "fb_used_mib": -1}]}, "gpus.0.processes[0].fb_used_mib: must be a non-negative"),
        ({"processes": [{"pid": 1, "cpu": 3}]}, "gpus.0.processes[0].cpu: unknown key"),
        ({"processes": [{"pid": 1}, {"pid": 1}]}, "gpus.0.processes: pid values must be unique"),
        ({"mig": [{"gpu_instance_id": 1, "processes": [{"pid": 1, "sm_util": 5}]}]},
         "gpus.0.mig[0].processes[0].sm_util: NVML has no per-process utilisation under MIG"),
    ]:
        with pytest.raises(FakeStateError, match=message.replace("[", r"\[").replace("]", r"\]")):
            parse_state({"gpus": {"0": doc}}, "s", 1)


# --------------------------------------------------------------------------- the collector, end to end in process


class Cluster:
    """A fake-backend collector in Kubernetes mode over a fake node and a settable PodResources answer."""

    def __init__(self, tmp_path: Path, gpus: int = 2, host_pid: bool = True) -> None:
        self.node = FakeNode(tmp_path, host_pid_namespace=host_pid)
        self.state_path = tmp_path / "state.json"
        self.state: dict[str, Any] = {"gpus": {}}
        write_state(self.state_path, self.state)
        self.allocations: list[DeviceAllocation] = []
        backend = FakeBackend(gpus, str(self.state_path))
        backend.open()
        attribution = ProcessAttribution(ProcFs(str(self.node.proc)),
                                         KubeletLogDirectory(str(self.node.logs), rescan_after_s=0))
        pods = PodAttribution(lambda: PodResourcesStatus(tuple(self.allocations), True, 1.0),
                              extra_resource_names=frozenset({SHARED}), processes=attribution)
        self.collector = Collector(backend, load_counters(None), CollectorOptions(hostname="node-a", pods=pods))

    def share(self, pod: FakePod, device_id: str, container: str = "main") -> None:
        self.allocations.append(DeviceAllocation(SHARED, device_id, PodRef(pod.name, pod.namespace, container)))

    def gpu(self, index: int, **doc: Any) -> None:
        self.state["gpus"][str(index)] = doc
        write_state(self.state_path, self.state)

    def scrape(self) -> list:
        self.collector.collect_once()
        return parse_metrics(self.collector.snapshot.body.decode())


def two_pods_on_gpu0(tmp_path: Path) -> Cluster:
    cluster = Cluster(tmp_path)
    a = cluster.node.pod("infer-a", "ml", "main")
    b = cluster.node.pod("infer-b", "ml", "main")
    cluster.share(a, f"{UUID0}::0")
    cluster.share(b, f"{UUID0}::1")
    cluster.node.run(4242, a, "main")
    cluster.node.run(4343, b, "main")
    cluster.node.run(4444, a, "main")
    cluster.node.run(77, None)  # a host process, e.g. an MPS server
    cluster.gpu(0, DCGM_FI_DEV_POWER_USAGE=250.0, processes=[
        {"pid": 4242, "sm_util": 35, "fb_used_mib": 2048}, {"pid": 4444, "sm_util": 5, "fb_used_mib": 512},
        {"pid": 4343, "sm_util": 20, "fb_used_mib": 1024}, {"pid": 77, "fb_used_mib": 300}])
    return cluster


def test_two_pods_on_one_gpu_get_their_own_utilisation_and_memory(tmp_path: Path) -> None:
    cluster = two_pods_on_gpu0(tmp_path)
    rows = cluster.scrape()
    assert value(rows, SM, pod="infer-a", namespace="ml", container="main") == 0.40
    assert value(rows, SM, pod="infer-b", namespace="ml", container="main") == 0.20
    assert value(rows, FB, pod="infer-a") == (2048 + 512) * MIB
    assert value(rows, FB, pod="infer-b") == 1024 * MIB
    labels = series(rows, SM, pod="infer-a")[0][1]
    assert (labels["gpu"], labels["UUID"], labels["modelName"], labels["Hostname"]) == (
        "0", UUID0, "NVIDIA H100 80GB HBM3", "node-a")
    # the DCGM families are unchanged: one device-level series, no pod labels, nothing copied per pod
    (util,) = series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert util[2] == 60 and "pod" not in util[1]  # the simulated device sums its processes
    assert [r[2] for r in series(rows, "DCGM_FI_DEV_POWER_USAGE", gpu="0")] == [250.0]
    assert not [r for r in rows if r[0].startswith("DCGM_") and "pod" in r[1]]
    assert not [r for r in rows if r[0] not in (SM, FB) and r[1].get("pod") in ("infer-a", "infer-b")]
    assert value(rows, "gpu_exporter_process_attribution_up") == 1
    assert not series(rows, "gpu_exporter_process_attribution_unavailable")
    assert value(rows, "gpu_exporter_shared_gpu_unresolved_processes", gpu="0") == 0
    # the unshared GPU gets no per-pod series
    assert not series(rows, SM, gpu="1") and not series(rows, FB, gpu="1")


def test_an_idle_holder_reports_zero(tmp_path: Path) -> None:
    cluster = two_pods_on_gpu0(tmp_path)
    cluster.gpu(0, processes=[{"pid": 4343, "sm_util": 20, "fb_used_mib": 1024}])
    rows = cluster.scrape()
    assert value(rows, SM, pod="infer-a") == 0
    assert value(rows, FB, pod="infer-a") == 0
    assert value(rows, SM, pod="infer-b") == 0.2


def test_a_pod_that_stops_drops_out(tmp_path: Path) -> None:
    cluster = two_pods_on_gpu0(tmp_path)
    assert series(cluster.scrape(), SM, pod="infer-a")
    cluster.allocations = [x for x in cluster.allocations if x.pod.name != "infer-a"]
    cluster.gpu(0, processes=[{"pid": 4343, "sm_util": 20, "fb_used_mib": 1024}])
    cluster.node.exit(4242)
    cluster.node.exit(4444)
    rows = cluster.scrape()
    assert not series(rows, SM, pod="infer-a") and not series(rows, FB, pod="infer-a")
    assert value(rows, SM, pod="infer-b") == 0.2  # still a replica holder: still reported


def test_a_listed_process_missing_from_proc_withholds_that_collection(tmp_path: Path) -> None:
    """It may have just exited, or proc may hide it (hidepid): either way nobody's 0 would be certain."""
    cluster = two_pods_on_gpu0(tmp_path)
    cluster.node.exit(4444)
    rows = cluster.scrape()
    assert not series(rows, FB, gpu="0")
    assert value(rows, "gpu_exporter_shared_gpu_unresolved_processes", gpu="0") == 1
    cluster.gpu(0, processes=[{"pid": 4242, "sm_util": 35, "fb_used_mib": 2048}])  # the driver no longer lists it
    rows = cluster.scrape()
    assert value(rows, FB, pod="infer-a") == 2048 * MIB


def test_without_host_pid_visibility_only_device_level_metrics_and_a_self_metric(tmp_path: Path) -> None:
    cluster = two_pods_on_gpu0(tmp_path)
    cluster.node.set_host_pid_namespace(False)
    rows = cluster.scrape()
    assert not series(rows, SM) and not series(rows, FB)
    assert series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert value(rows, "gpu_exporter_process_attribution_up") == 0
    assert value(rows, "gpu_exporter_process_attribution_unavailable", reason="pids_not_visible") == 1
    cluster.node.set_host_pid_namespace(True)
    rows = cluster.scrape()
    assert value(rows, SM, pod="infer-b") == 0.2
    assert value(rows, "gpu_exporter_process_attribution_up") == 1


def test_unreadable_proc_root_says_so(tmp_path: Path) -> None:
    cluster = two_pods_on_gpu0(tmp_path)
    (cluster.node.proc / "self" / "ns" / "pid").unlink()
    rows = cluster.scrape()
    assert not series(rows, SM)
    assert value(rows, "gpu_exporter_process_attribution_unavailable", reason="proc_unreadable") == 1


def test_an_unidentified_pod_withholds_that_gpus_per_pod_values(tmp_path: Path) -> None:
    cluster = two_pods_on_gpu0(tmp_path)
    stranger = cluster.node.pod("unknown", "ml", "main", log_dir=False)  # the kubelet's log dirs lack it
    cluster.node.run(5000, stranger, "main")
    cluster.gpu(0, processes=[{"pid": 4242, "sm_util": 35}, {"pid": 5000, "sm_util": 40}])
    c = cluster.node.pod("infer-c", "ml", "main")
    cluster.share(c, f"{UUID1}::0")
    cluster.node.run(6000, c, "main")
    cluster.gpu(1, processes=[{"pid": 6000, "sm_util": 10, "fb_used_mib": 64}])
    rows = cluster.scrape()
    assert not series(rows, SM, gpu="0") and not series(rows, FB, gpu="0")  # no wrong 0 for infer-a/b
    assert value(rows, "gpu_exporter_shared_gpu_unresolved_processes", gpu="0") == 1
    assert value(rows, SM, gpu="1", pod="infer-c") == 0.1  # the other shared GPU is unaffected
    assert value(rows, "gpu_exporter_shared_gpu_unresolved_processes", gpu="1") == 0


def test_container_from_the_holder_when_only_the_pod_uid_is_known(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    a = cluster.node.pod("infer-a", "ml")  # a pod log directory, but no container symlinks
    cluster.share(a, f"{UUID0}::0", container="server")
    cluster.node.run(4242, a, cgroup_text=f"0::/kubepods/burstable/pod{a.uid}\n")
    cluster.gpu(0, processes=[{"pid": 4242, "sm_util": 15, "fb_used_mib": 10}])
    rows = cluster.scrape()
    assert value(rows, SM, pod="infer-a", container="server") == 0.15


def test_shared_mig_instance_gets_memory_but_no_utilisation(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    a = cluster.node.pod("infer-a", "ml", "main")
    b = cluster.node.pod("infer-b", "ml", "main")
    mig = fake_mig_uuid("", 0, 3, 0)
    cluster.share(a, f"{mig}::0")
    cluster.share(b, f"{mig}::1")
    cluster.node.run(10, a, "main")
    cluster.gpu(0, mig=[{"gpu_instance_id": 3, "profile": "3g.40gb", "processes": [{"pid": 10, "fb_used_mib": 100}]}])
    rows = cluster.scrape()
    assert value(rows, FB, gpu="0", GPU_I_ID="3", pod="infer-a") == 100 * MIB
    assert value(rows, FB, gpu="0", GPU_I_ID="3", pod="infer-b") == 0
    assert not series(rows, SM)  # NVML has no per-process utilisation under MIG: absent, never 0
    assert value(rows, "DCGM_FI_DEV_FB_USED", gpu="0", GPU_I_ID="3") == 100  # derived from the processes


def test_exclusive_gpu_keeps_device_level_pod_labels_and_gets_no_per_pod_family(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    a = cluster.node.pod("trainer", "ml", "main")
    cluster.allocations.append(DeviceAllocation("nvidia.com/gpu", UUID1, PodRef(a.name, a.namespace, "main")))
    cluster.node.run(10, a, "main")
    cluster.gpu(1, processes=[{"pid": 10, "sm_util": 90, "fb_used_mib": 100}])
    rows = cluster.scrape()
    assert series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="1")[0][1]["pod"] == "trainer"
    assert not series(rows, SM) and not series(rows, FB)


def test_lost_gpu_has_no_per_pod_series(tmp_path: Path) -> None:
    cluster = two_pods_on_gpu0(tmp_path)
    cluster.state["gpus"]["0"]["lost"] = True
    write_state(cluster.state_path, cluster.state)
    rows = cluster.scrape()
    assert not series(rows, SM) and not series(rows, FB)
    assert value(rows, "gpu_exporter_gpu_up", gpu="0") == 0


def test_no_process_attribution_configured_means_no_new_families(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_state(path, {"gpus": {"0": {"processes": [{"pid": 1, "sm_util": 50}]}}})
    backend = FakeBackend(1, str(path))
    backend.open()
    allocations = (DeviceAllocation(SHARED, f"{UUID0}::0", A), DeviceAllocation(SHARED, f"{UUID0}::1", B))
    pods = PodAttribution(lambda: PodResourcesStatus(allocations, True, 1.0), extra_resource_names=frozenset({SHARED}))
    collector = Collector(backend, load_counters(None), CollectorOptions(pods=pods))
    collector.collect_once()
    rows = parse_metrics(collector.snapshot.body.decode())
    assert not series(rows, SM) and not series(rows, "gpu_exporter_process_attribution_up")
