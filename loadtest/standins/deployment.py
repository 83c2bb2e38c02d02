"""A local stand-in for a Kubernetes Deployment of inference pods: each replica a process owning one simulated GPU.

Replica ``n`` is pod ``<name>-n`` holding fake GPU ``n``. A started replica is published at once, as a scheduled
pod is: in the kubelet's PodResources answer (so the exporter labels GPU ``n`` with the pod) and in the adapter's
standalone objects file (so the HPA's label selector matches it); once its address is known, in Prometheus'
file-based target list with its ``namespace``/``pod`` labels (as a PodMonitor would add them), so its own
``/metrics`` is scraped. It joins the Service's endpoints once ``/healthz`` answers. Scale-down removes the
highest-numbered replicas from all of these and from the endpoints, then stops them gracefully. A refresh loop
reads every ready replica's busy fraction (and queue) and writes it into the exporter's fake GPU state, and hands
the ready replicas to ``on_endpoints`` (the demo's gateway) after each refresh and each scale. A replica with a cold
start (``cold_start_s``) holds its GPU from its start, and is ready only once its model is loaded.
``gpu_seconds()`` adds up the time each replica held its GPU.

With a node layer (``gate``, :class:`loadtest.nodes.layer.NodeLayer`), a new replica is first a pod that waits: it
is created there, and its process starts only once the gate says its pod is bound to a node and has its image; a
replica that answers ``/healthz`` is reported ready to it, and a removed one deleted from it. A replica whose pod
the gate evicted (its node was removed: consolidation, scale-down) stops, and waits as a new replica does for the
pod that replaced it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from clikit.fake_gpus import fake_gpu_uuid
from loadtest.standins.kubelet import PodResourcesServer, gpu_pod
from loadtest.standins.processes import Child, ChildProcesses
from loadtest.standins.replica import READY_PREFIX
from loadtest.standins.statefiles import atomic_write_json, fake_gpu_state, standalone_pods

__all__ = ["PENDING", "RUNNING", "DeploymentConfig", "DeploymentError", "LocalDeployment", "PodGate", "PodState",
           "Replica"]


RUNNING, PENDING = "Running", "Pending"
"""The pod phases a stand-in reports, as the Kubernetes API writes them."""


@dataclass(frozen=True)
class PodState:
    """A pod of a scaled workload as its HPA counts it: its name and its phase (``Running`` once it serves, else
    ``Pending``)."""

    name: str
    phase: str


class PodGate(Protocol):
    """Where a replica's pod waits for a node before its process may start."""

    def pod_created(self, name: str) -> None: ...

    def pod_deleted(self, name: str) -> None: ...

    def may_start(self, name: str) -> bool: ...

    def mark_ready(self, name: str) -> None: ...

    def take_evicted(self) -> list[str]: ...


class DeploymentError(RuntimeError):
    """One-line reason; ``log_tail`` holds the end of the failing replica's log."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


@dataclass(frozen=True)
class DeploymentConfig:
    max_replicas: int
    name: str = "infer"
    namespace: str = "demo"
    labels: Mapping[str, str] = field(default_factory=lambda: {"app": "infer"})
    service_s: float = 0.04
    busy_window_s: float = 2.0
    gpu_seed: str = ""
    start_timeout_s: float = 20.0
    grace_s: float = 5.0
    cold_start_s: float = 0.0

    @property
    def selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.labels.items())


@dataclass
class Replica:
    index: int
    name: str
    gpu_uuid: str
    child: Child | None  # None: its pod waits for a node (with a gate)
    url: str | None = None
    ready: bool = False
    busy: float = 0.0
    waiting: int = 0
    started_at: float = 0.0  # time.monotonic() at its start: it holds its GPU from then on


class LocalDeployment:
    """Implements :class:`loadtest.hpa.loop.Workload`."""

    def __init__(self, config: DeploymentConfig, processes: ChildProcesses, kubelet: PodResourcesServer,
                 gpu_state_path: Path, objects_path: Path, targets_path: Path | None = None, *,
                 on_endpoints: Callable[[Sequence[Replica]], None] | None = None, gate: PodGate | None = None,
                 ) -> None:
        self.config = config
        self.gate = gate
        self.processes = processes
        self.kubelet = kubelet
        self.gpu_state_path = gpu_state_path
        self.objects_path = objects_path
        self.targets_path = targets_path
        self.replicas: dict[int, Replica] = {}
        self.on_endpoints = on_endpoints
        self._spec = 0
        self._gpu_seconds_done = 0.0  # of replicas stopped already
        self._turn = itertools.count()
        self._starting: set[asyncio.Task[None]] = set()
        self._stopping: set[asyncio.Task[None]] = set()
        self.failure: BaseException | None = None
        self._client = httpx.AsyncClient(timeout=2.0, trust_env=False)
        self.write_gpu_state()
        self.publish()

    # -- Workload -------------------------------------------------------------------------------------------------
    @property
    def spec_replicas(self) -> int:
        return self._spec

    def pods(self) -> tuple[PodState, ...]:
        return tuple(PodState(r.name, RUNNING if r.ready else PENDING)
                     for _, r in sorted(self.replicas.items()))

    async def scale(self, replicas: int) -> None:
        if not 0 <= replicas <= self.config.max_replicas:
            raise DeploymentError(f"cannot run {replicas} replicas: there are {self.config.max_replicas} GPUs")
        self._spec = replicas
        for index in range(replicas):
            if index not in self.replicas:
                self._start(index)
        leaving = [self.replicas.pop(i) for i in sorted(self.replicas) if i >= replicas]
        now = time.monotonic()
        self._gpu_seconds_done += sum(now - r.started_at for r in leaving if r.child is not None)
        if self.gate is not None:
            for replica in leaving:
                self.gate.pod_deleted(replica.name)
        self.publish()
        self._hand_endpoints()
        started = [r for r in leaving if r.child is not None]
        if started:
            self._background(self._stopping, self._stop(started))

    # -- state ----------------------------------------------------------------------------------------------------
    @property
    def ready_count(self) -> int:
        return sum(1 for r in self.replicas.values() if r.ready)

    def mean_utilisation(self) -> float | None:
        """Average GPU utilisation (percent) over the ready replicas."""
        ready = [r.busy for r in self.replicas.values() if r.ready]
        return 100.0 * sum(ready) / len(ready) if ready else None

    def mean_waiting(self) -> float | None:
        """Average number of requests queued for the GPU over the ready replicas."""
        ready = [r.waiting for r in self.replicas.values() if r.ready]
        return sum(ready) / len(ready) if ready else None

    def gpu_seconds(self) -> float:
        """Seconds of GPU held by every replica so far (started and not yet told to stop; cold starts included)."""
        now = time.monotonic()
        return self._gpu_seconds_done + sum(now - r.started_at for r in self.replicas.values() if r.child is not None)

    def ready_replicas(self) -> list[Replica]:
        return [r for _, r in sorted(self.replicas.items()) if r.ready and r.url]

    def _hand_endpoints(self) -> None:
        if self.on_endpoints is not None:
            self.on_endpoints(self.ready_replicas())

    def next_url(self) -> str | None:
        """Round-robin over ready replicas, as a Service spreads connections over ready endpoints."""
        ready = self.ready_replicas()
        if not ready:
            return None
        return f"{ready[next(self._turn) % len(ready)].url}/infer"

    def publish(self) -> None:
        names = [r.name for _, r in sorted(self.replicas.items())]
        self.kubelet.set_pods([gpu_pod(r.name, self.config.namespace, [r.gpu_uuid])
                               for _, r in sorted(self.replicas.items()) if r.child is not None])
        atomic_write_json(self.objects_path, standalone_pods(names, self.config.namespace, self.config.labels))
        if self.targets_path is not None:
            atomic_write_json(self.targets_path, [
                {"targets": [r.url.removeprefix("http://")], "labels": {"namespace": self.config.namespace,
                                                                        "pod": r.name}}
                for _, r in sorted(self.replicas.items()) if r.url])

    def write_gpu_state(self) -> None:
        util = {r.index: 100.0 * r.busy for r in self.replicas.values() if r.ready}
        atomic_write_json(self.gpu_state_path, fake_gpu_state(util, self.config.max_replicas))

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def _start(self, index: int) -> None:
        """A new replica: its process now, or (with a gate) its pod, whose process starts once the gate allows."""
        name = f"{self.config.name}-{index}"
        replica = Replica(index, name, fake_gpu_uuid(self.config.gpu_seed, index), None)
        self.replicas[index] = replica
        if self.gate is None:
            self._launch(replica)
        else:
            self.gate.pod_created(name)

    def _launch(self, replica: Replica) -> None:
        cfg, name, index = self.config, replica.name, replica.index
        replica.child = self.processes.spawn(name, [
            sys.executable, "-m", "loadtest", "replica", "--name", name, "--gpu", str(index),
            "--service-ms", f"{cfg.service_s * 1000:g}", "--busy-window", f"{cfg.busy_window_s:g}",
            "--grace", f"{cfg.grace_s:g}", "--cold-start", f"{cfg.cold_start_s:g}"], stdout_pipe=True)
        replica.started_at = time.monotonic()
        if self.gate is not None:
            self.publish()  # its GPU is now the pod's (PodResources)
        self._background(self._starting, self._learn_address(replica))

    async def _learn_address(self, replica: Replica) -> None:
        assert replica.child is not None
        stdout = replica.child.process.stdout
        assert stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), self.config.start_timeout_s)
        except (TimeoutError, ValueError):  # ValueError: its pipe closed by a stop that came first
            line = b""
        text = line.decode(errors="replace").strip()
        wanted = self.replicas.get(replica.index) is replica
        if not text.startswith(READY_PREFIX):
            if not wanted:  # scaled away and stopped before it said where it listens: nothing failed
                return
            raise DeploymentError(f"replica {replica.name} did not start", replica.child.log_tail())
        replica.url = f"http://{text.removeprefix(READY_PREFIX)}"
        if wanted:  # scrape it
            self.publish()

    def _evicted(self, names: list[str]) -> None:
        """The replicas whose pods were evicted stop; each becomes a replica that waits for its new pod."""
        leaving = [r for r in self.replicas.values() if r.name in names and r.child is not None]
        if not leaving:
            return
        now = time.monotonic()
        for replica in leaving:
            self._gpu_seconds_done += now - replica.started_at
            self.replicas[replica.index] = Replica(replica.index, replica.name, replica.gpu_uuid, None)
        self.publish()
        self._hand_endpoints()
        self._background(self._stopping, self._stop(leaving))

    async def _stop(self, leaving: list[Replica]) -> None:
        children = [r.child for r in leaving if r.child is not None]
        await asyncio.to_thread(self.processes.stop_many, children, self.config.grace_s + 1.0)

    def _background(self, tasks: set[asyncio.Task[None]], coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        tasks.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            tasks.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                self.failure = finished.exception()

        task.add_done_callback(done)

    async def refresh(self) -> None:
        """Readiness of new replicas, busy fractions of ready ones; then the fake GPU state."""
        if self.failure is not None:
            raise self.failure
        if self.gate is not None:
            self._evicted(self.gate.take_evicted())
        await asyncio.gather(*(self._refresh_one(r) for r in list(self.replicas.values())))
        self.write_gpu_state()
        self._hand_endpoints()

    async def _refresh_one(self, replica: Replica) -> None:
        if replica.child is None:
            if self.gate is not None and self.gate.may_start(replica.name):
                self._launch(replica)
            return
        if replica.url is None:
            return
        if not replica.child.alive:
            raise DeploymentError(f"replica {replica.name} exited with code {replica.child.process.returncode}",
                                  replica.child.log_tail())
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            if not replica.ready:
                replica.ready = (await self._client.get(f"{replica.url}/healthz")).status_code == 200
                if replica.ready and self.gate is not None:
                    self.gate.mark_ready(replica.name)
            if replica.ready:
                stats = (await self._client.get(f"{replica.url}/stats")).json()
                replica.busy, replica.waiting = float(stats["busy"]), int(stats["waiting"])

    async def run_refresh(self, interval_s: float) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(interval_s)

    async def wait_ready(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.ready_count < self._spec:
            if loop.time() > deadline:
                raise DeploymentError(f"{self._spec - self.ready_count} replica(s) not ready after {timeout_s:.0f}s")
            await self.refresh()
            await asyncio.sleep(0.1)

    async def close(self) -> None:
        """Stop every replica (the process registry's own cleanup is the backstop)."""
        leaving = list(self.replicas.values())
        self.replicas.clear()
        for task in self._starting:
            task.cancel()
        children = [r.child for r in leaving if r.child is not None]
        if children:
            await asyncio.to_thread(self.processes.stop_many, children, self.config.grace_s)
        pending = self._starting | self._stopping
        if pending:
            await asyncio.wait(pending)
        await self._client.aclose()
