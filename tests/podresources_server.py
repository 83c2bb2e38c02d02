"""A fake kubelet PodResources v1 server on a unix socket, for tests (plus its pytest fixture).

Pods are given as plain tuples: ``(pod_name, namespace, [(container_name, [(resource_name, [ids])])])``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass

import grpc
import pytest

from exporter.podresources.v1 import api_pb2, api_pb2_grpc

DeviceSpec = tuple[str, Sequence[str]]
ContainerSpec = tuple[str, Sequence[DeviceSpec]]
PodSpec = tuple[str, str, Sequence[ContainerSpec]]


@dataclass(frozen=True)
class _Failure:
    code: grpc.StatusCode
    details: str


def _devices(resource_name: str, device_ids: Sequence[str]) -> api_pb2.ContainerDevices:
    return api_pb2.ContainerDevices(resource_name=resource_name, device_ids=list(device_ids))


def _pod_message(name: str, namespace: str, containers: Sequence[ContainerSpec]) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            api_pb2.ContainerResources(
                name=container,
                devices=[_devices(resource, ids) for resource, ids in devices],
            )
            for container, devices in containers
        ],
    )


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, owner: FakePodResourcesServer) -> None:
        self._owner = owner

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        self._owner.list_calls += 1
        self._owner.before_reply(context)
        return api_pb2.ListPodResourcesResponse(pod_resources=self._owner.pods)

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        by_resource: dict[str, list[str]] = {}
        for pod in self._owner.pods:
            for container in pod.containers:
                for devices in container.devices:
                    by_resource.setdefault(devices.resource_name, []).extend(devices.device_ids)
        return api_pb2.AllocatableResourcesResponse(
            devices=[_devices(resource, ids) for resource, ids in by_resource.items()]
        )

    def Get(
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.GetPodResourcesResponse:
        for pod in self._owner.pods:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return api_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name} not found")
        raise AssertionError("unreachable: abort raises")


class FakePodResourcesServer:
    """Serves ``PodResourcesLister`` at ``<directory>/kubelet.sock``; restartable on the same path."""

    def __init__(self, directory: str) -> None:
        self.socket_path = os.path.join(directory, "kubelet.sock")
        self.pods: list[api_pb2.PodResources] = []
        self.list_calls = 0
        self._failure: _Failure | None = None
        self._delay_s = 0.0
        self._released = threading.Event()
        self._server: grpc.Server | None = None

    def set_pods(self, pods: Sequence[PodSpec]) -> None:
        """Replace what ``List`` returns (takes effect on the next call)."""
        self.pods = [_pod_message(name, namespace, containers) for name, namespace, containers in pods]

    def fail_with(self, code: grpc.StatusCode | None, details: str = "injected failure") -> None:
        """Make ``List`` fail with ``code`` (None: answer normally again)."""
        self._failure = None if code is None else _Failure(code, details)

    def delay_list(self, seconds: float) -> None:
        """Make ``List`` wait this long before answering (interrupted by :meth:`stop`)."""
        self._delay_s = seconds

    def before_reply(self, context: grpc.ServicerContext) -> None:
        if self._delay_s:
            self._released.wait(self._delay_s)
        failure = self._failure
        if failure is not None:
            context.abort(failure.code, failure.details)

    def start(self) -> None:
        if self._server is not None:
            return
        self._released.clear()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server

    def stop(self) -> None:
        """Stop serving and remove the socket file, as a restarting kubelet does."""
        self._released.set()
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=None).wait(timeout=5)
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)


@pytest.fixture
def podresources_server() -> Iterator[FakePodResourcesServer]:
    """A started fake server in a short /tmp directory (unix socket paths must stay under 108 bytes)."""
    directory = tempfile.mkdtemp(prefix="podres-", dir="/tmp")
    server = FakePodResourcesServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
