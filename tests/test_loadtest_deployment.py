"""The local Deployment stand-in: replica processes published as pods through the real PodResources gRPC socket
(as the exporter reads it) and the adapter's standalone objects file (as the adapter reads it), their busy time
written into a fake GPU state the exporter accepts, and scale-down stopping the highest-numbered replica."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from adapter.kube.standalone import StandaloneObjects
from adapter.rules import normalise_resource
from adapter.rules.selectors import parse_selector
from clikit.fake_gpus import fake_gpu_uuid
from exporter.backends.fake import parse_state
from exporter.pods.mapping import DeviceAllocation, PodRef
from exporter.pods.podresources.client import list_allocations
from loadtest.hpa import PodPhase
from loadtest.standins.deployment import DeploymentConfig, LocalDeployment
from loadtest.standins.kubelet import PodResourcesServer
from loadtest.standins.processes import ChildProcesses
from loadtest.standins.statefiles import fake_gpu_state, standalone_pods

pytestmark = pytest.mark.e2e

PODS = normalise_resource("pods")


@dataclass(frozen=True)
class Parts:
    workdir: Path
    processes: ChildProcesses
    kubelet: PodResourcesServer


@pytest.fixture
def parts() -> Iterator[Parts]:
    """A work directory (under /tmp: unix socket paths must stay short), the process registry and a running kubelet
    PodResources server; everything stopped and removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="deploy-", dir="/tmp"))
    processes = ChildProcesses(workdir / "logs", "test-run")
    kubelet = PodResourcesServer(str(workdir / "kubelet.sock"))
    kubelet.start()
    try:
        yield Parts(workdir, processes, kubelet)
    finally:
        processes.stop_all()
        kubelet.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def selected(objects: Path) -> list[str] | None:
    return asyncio.run(StandaloneObjects(str(objects)).names(PODS, "demo", parse_selector("app=infer")))


def test_documents_are_what_the_exporter_and_adapter_accept(tmp_path: Path) -> None:
    state = parse_state(fake_gpu_state({0: 57.4, 2: 140.0}, 4), "state.json", 4)
    assert {i: g.values["DCGM_FI_DEV_GPU_UTIL"] for i, g in state.gpus.items()} == {0: 57, 1: 0, 2: 100, 3: 0}
    objects = tmp_path / "objects.json"
    objects.write_text(json.dumps(standalone_pods(["infer-0", "infer-1"], "demo", {"app": "infer"})))
    assert selected(objects) == ["infer-0", "infer-1"]


def test_replicas_are_published_measured_and_stopped(parts: Parts) -> None:
    workdir, processes, kubelet = parts.workdir, parts.processes, parts.kubelet
    objects, gpu_state = workdir / "objects.json", workdir / "gpu.json"

    async def scenario() -> None:
        deployment = LocalDeployment(DeploymentConfig(max_replicas=3, service_s=0.05), processes, kubelet,
                                     gpu_state, objects)
        try:
            await deployment.scale(2)
            # Published as soon as they start, before they are ready (like a scheduled pod)
            assert {p.name for p in deployment.pods()} == {"infer-0", "infer-1"}
            assert sorted(list_allocations(kubelet.socket_path), key=lambda a: a.pod.name) == [
                DeviceAllocation("nvidia.com/gpu", fake_gpu_uuid("", i), PodRef(f"infer-{i}", "demo", "main"))
                for i in (0, 1)]
            assert await asyncio.to_thread(selected, objects) == ["infer-0", "infer-1"]

            await deployment.wait_ready(30)
            assert [p.phase for p in deployment.pods()] == [PodPhase.RUNNING, PodPhase.RUNNING]
            urls = [deployment.next_url() for _ in range(4)]
            assert urls[0] == urls[2] and urls[1] == urls[3] and urls[0] != urls[1]

            first = deployment.replicas[0]
            async with httpx.AsyncClient() as client:
                for _ in range(5):
                    assert (await client.get(f"{first.url}/infer")).status_code == 200
            await deployment.refresh()
            util = parse_state(json.loads(gpu_state.read_text()), "gpu.json", 3).gpus
            assert util[0].values["DCGM_FI_DEV_GPU_UTIL"] > 0
            assert util[1].values["DCGM_FI_DEV_GPU_UTIL"] == 0
            assert deployment.mean_utilisation() == pytest.approx(50 * (first.busy + deployment.replicas[1].busy))

            leaving = deployment.replicas[1].child
            await deployment.scale(1)
            assert [a.pod.name for a in list_allocations(kubelet.socket_path)] == ["infer-0"]
            assert await asyncio.to_thread(selected, objects) == ["infer-0"]
            assert deployment.spec_replicas == 1
            await asyncio.to_thread(leaving.process.wait, 30)
            assert leaving.process.returncode == 0  # SIGTERM, drained, exited
        finally:
            await deployment.close()

    asyncio.run(scenario())
    assert processes.children and not [c for c in processes.children if c.alive]


def test_a_replica_scaled_away_before_it_listens_is_stopped_and_fails_nothing(parts: Parts) -> None:
    """The HPA may take back a replica whose process has not yet said where it listens (a busy machine); its
    stop closes its output, which is the scale-down working, not a replica that failed to start."""
    workdir, processes, kubelet = parts.workdir, parts.processes, parts.kubelet

    async def scenario() -> None:
        deployment = LocalDeployment(DeploymentConfig(max_replicas=2), processes, kubelet,
                                     workdir / "gpu.json", workdir / "objects.json")
        try:
            await deployment.scale(2)
            leaving = deployment.replicas[1]
            await deployment.scale(1)  # at once: its process is still importing, nothing printed yet
            assert leaving.child is not None and leaving.url is None
            await asyncio.to_thread(leaving.child.process.wait, 30)
            await deployment.wait_ready(30)
            for _ in range(5):
                await deployment.refresh()
                await asyncio.sleep(0.05)
            assert deployment.failure is None
            assert [p.name for p in deployment.pods()] == ["infer-0"]
        finally:
            await deployment.close()

    asyncio.run(scenario())


class RecordingGate:
    """A node layer that lets a pod's process start only once the test allows it; records what it was told."""

    def __init__(self) -> None:
        self.allowed: set[str] = set()
        self.asked: set[str] = set()
        self.events: list[tuple[str, str]] = []
        self.evicted: list[str] = []

    def pod_created(self, name: str) -> None:
        self.events.append(("pod_created", name))

    def pod_deleted(self, name: str) -> None:
        self.events.append(("pod_deleted", name))

    def may_start(self, name: str) -> bool:
        self.asked.add(name)
        return name in self.allowed

    def mark_ready(self, name: str) -> None:
        self.events.append(("mark_ready", name))

    def take_evicted(self) -> list[str]:
        names, self.evicted = self.evicted, []
        return names


async def until_ready(deployment: LocalDeployment) -> None:
    """Refresh until replica 0 answers ``/healthz`` (30 s at most)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not deployment.replicas[0].ready:
        assert loop.time() < deadline, "infer-0 not ready after 30s"
        await deployment.refresh()
        await asyncio.sleep(0.1)


def test_with_a_gate_a_pod_waits_for_its_node_before_its_process_starts(parts: Parts) -> None:
    """A replica's pod exists (Pending, selected by the adapter) from the scale-up, but its process starts, holds
    its GPU and is published to the kubelet only once the gate says its pod may start; a pod scaled away while it
    still waits is deleted from the gate, with nothing to stop."""
    workdir, processes, kubelet = parts.workdir, parts.processes, parts.kubelet
    objects = workdir / "objects.json"
    gate = RecordingGate()

    async def scenario() -> None:
        deployment = LocalDeployment(DeploymentConfig(max_replicas=2), processes, kubelet, workdir / "gpu.json",
                                     objects, gate=gate)
        try:
            await deployment.scale(2)
            await deployment.refresh()
            assert [(p.name, p.phase) for p in deployment.pods()] == [
                ("infer-0", PodPhase.PENDING), ("infer-1", PodPhase.PENDING)]
            assert await asyncio.to_thread(selected, objects) == ["infer-0", "infer-1"]
            assert processes.children == []
            assert deployment.gpu_seconds() == 0
            assert list_allocations(kubelet.socket_path) == []
            assert gate.events == [("pod_created", "infer-0"), ("pod_created", "infer-1")]
            assert gate.asked == {"infer-0", "infer-1"}

            # infer-0's node is up: its process starts (scale-down takes the highest index, so infer-1 is the one
            # left waiting, to be scaled away below)
            gate.allowed.add("infer-0")
            await deployment.refresh()
            first = deployment.replicas[0].child
            assert first is not None and deployment.replicas[0].url is None  # started, still importing
            assert [c.name for c in processes.children] == ["infer-0"]
            # its GPU is the pod's from its start, before it listens
            assert list_allocations(kubelet.socket_path) == [
                DeviceAllocation("nvidia.com/gpu", fake_gpu_uuid("", 0), PodRef("infer-0", "demo", "main"))]
            await until_ready(deployment)
            assert first.alive and [c.name for c in processes.children] == ["infer-0"]
            assert deployment.replicas[1].child is None
            assert [(p.name, p.phase) for p in deployment.pods()] == [
                ("infer-0", PodPhase.RUNNING), ("infer-1", PodPhase.PENDING)]
            assert list_allocations(kubelet.socket_path) == [
                DeviceAllocation("nvidia.com/gpu", fake_gpu_uuid("", 0), PodRef("infer-0", "demo", "main"))]
            assert gate.events == [("pod_created", "infer-0"), ("pod_created", "infer-1"), ("mark_ready", "infer-0")]
            assert deployment.gpu_seconds() > 0

            await deployment.scale(1)  # infer-1 still waits for its node
            assert gate.events[3:] == [("pod_deleted", "infer-1")]
            assert [(p.name, p.phase) for p in deployment.pods()] == [("infer-0", PodPhase.RUNNING)]
            assert await asyncio.to_thread(selected, objects) == ["infer-0"]
            await deployment.wait_ready(30)
            for _ in range(3):
                await deployment.refresh()
                await asyncio.sleep(0.05)
            assert deployment.failure is None
            assert processes.children == [first] and first.alive
            assert [a.pod.name for a in list_allocations(kubelet.socket_path)] == ["infer-0"]
            assert len(gate.events) == 4
        finally:
            await deployment.close()

    asyncio.run(scenario())


def test_a_replica_whose_pod_was_evicted_stops_and_waits_for_its_new_pod(parts: Parts) -> None:
    """A node removed under a running replica (consolidation, scale-down) evicts its pod: the ReplicaSet makes a new
    one, which waits for a GPU; the replica's process stops at once, its GPU leaves the kubelet's answer, the HPA
    sees the pod Pending, and a new process starts (and loads its model again) once the new pod may start."""
    workdir, processes, kubelet = parts.workdir, parts.processes, parts.kubelet
    gate = RecordingGate()
    gate.allowed.add("infer-0")

    async def scenario() -> None:
        deployment = LocalDeployment(DeploymentConfig(max_replicas=1), processes, kubelet, workdir / "gpu.json",
                                     workdir / "objects.json", gate=gate)
        try:
            await deployment.scale(1)
            await deployment.refresh()
            await until_ready(deployment)
            first = deployment.replicas[0].child
            assert first is not None
            gate.allowed.discard("infer-0")
            gate.evicted.append("infer-0")
            await deployment.refresh()
            assert deployment.replicas[0].child is None and not deployment.replicas[0].ready
            assert [(p.name, p.phase) for p in deployment.pods()] == [("infer-0", PodPhase.PENDING)]
            assert list_allocations(kubelet.socket_path) == []
            held = deployment.gpu_seconds()
            await asyncio.sleep(0.2)
            assert deployment.gpu_seconds() == held > 0  # the stopped process holds no GPU
            await deployment.refresh()
            assert processes.children == [first]  # no new process while the new pod waits
            gate.allowed.add("infer-0")
            await until_ready(deployment)
            second = deployment.replicas[0].child
            assert second is not None and second is not first
            assert [e for e in gate.events if e[0] == "mark_ready"] == [("mark_ready", "infer-0")] * 2
            deadline = asyncio.get_running_loop().time() + 10
            while first.alive:
                assert asyncio.get_running_loop().time() < deadline, "the evicted replica's process still runs"
                await asyncio.sleep(0.1)
            assert deployment.failure is None
        finally:
            await deployment.close()

    asyncio.run(scenario())
