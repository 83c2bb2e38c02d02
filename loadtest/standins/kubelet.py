"""The kubelet's PodResources v1 gRPC API on a unix socket, serving pods the caller sets.

The demo runs it so the exporter (``-k``) attributes each simulated GPU to the replica pod holding it, through the
same socket and protocol a real kubelet offers. Pods are plain tuples:
``(pod_name, namespace, [(container_name, [(resource_name, [device_ids])])])``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent import futures

import grpc

from exporter.pods.podresources.v1 import api_pb2, api_pb2_grpc

__all__ = ["GPU_RESOURCE", "ContainerSpec", "DeviceSpec", "PodResourcesServer", "PodSpec", "gpu_pod"]

GPU_RESOURCE = "nvidia.com/gpu"

DeviceSpec = tuple[str, Sequence[str]]
ContainerSpec = tuple[str, Sequence[DeviceSpec]]
PodSpec = tuple[str, str, Sequence[ContainerSpec]]


def gpu_pod(name: str, namespace: str, gpu_uuids: Sequence[str], container: str = "main") -> PodSpec:
    """A pod whose one container holds ``gpu_uuids`` as ``nvidia.com/gpu`` devices."""
    return (name, namespace, [(container, [(GPU_RESOURCE, list(gpu_uuids))])])


def _devices(resource_name: str, device_ids: Sequence[str]) -> api_pb2.ContainerDevices:
    return api_pb2.ContainerDevices(resource_name=resource_name, device_ids=list(device_ids))


def _pod_message(name: str, namespace: str, containers: Sequence[ContainerSpec]) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            api_pb2.ContainerResources(name=container, devices=[_devices(res, ids) for res, ids in devices])
            for container, devices in containers
        ],
    )


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, owner: PodResourcesServer) -> None:
        self._owner = owner

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        self._owner.before_list(context)
        return api_pb2.ListPodResourcesResponse(pod_resources=self._owner.pods)

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        by_resource: dict[str, list[str]] = {}
        for resource, ids in self._owner.allocatable:
            by_resource.setdefault(resource, []).extend(ids)
        for pod in self._owner.pods:
            for container in pod.containers:
                for devices in container.devices:
                    known = by_resource.setdefault(devices.resource_name, [])
                    known.extend(i for i in devices.device_ids if i not in known)
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


class PodResourcesServer:
    """Serves ``PodResourcesLister`` at ``socket_path``; restartable on the same path.

    ``allocatable`` lists devices the node has besides those held by pods (``GetAllocatableResources``).
    """

    def __init__(self, socket_path: str, allocatable: Sequence[DeviceSpec] = ()) -> None:
        self.socket_path = socket_path
        self.allocatable: list[DeviceSpec] = list(allocatable)
        self._pods: list[api_pb2.PodResources] = []
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None

    @property
    def pods(self) -> list[api_pb2.PodResources]:
        with self._lock:
            return list(self._pods)

    @pods.setter
    def pods(self, messages: list[api_pb2.PodResources]) -> None:
        with self._lock:
            self._pods = list(messages)

    def set_pods(self, pods: Sequence[PodSpec]) -> None:
        """Replace what ``List`` returns (takes effect on the next call)."""
        self.pods = [_pod_message(name, namespace, containers) for name, namespace, containers in pods]

    def before_list(self, context: grpc.ServicerContext) -> None:
        """Called before each ``List`` answer; a subclass may delay or abort it."""

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        if self._server is not None:
            return
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server

    def stop(self) -> None:
        """Stop serving and remove the socket file, as a restarting kubelet does."""
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=None).wait(timeout=5)
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
