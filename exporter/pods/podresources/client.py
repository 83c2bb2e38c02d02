"""Read device allocations from the kubelet PodResources v1 API and keep a fresh copy in the background."""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from exporter.pods.mapping import DeviceAllocation, PodRef
from exporter.pods.podresources.v1 import api_pb2, api_pb2_grpc

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

logger = logging.getLogger("exporter.podresources")


class PodResourcesError(Exception):
    """The kubelet PodResources API could not be read; the message is one line."""


def _check_socket(socket_path: str) -> None:
    try:
        mode = os.stat(socket_path).st_mode
    except FileNotFoundError:
        raise PodResourcesError(f"kubelet PodResources socket {socket_path} not found") from None
    except OSError as exc:
        raise PodResourcesError(f"cannot stat kubelet PodResources socket {socket_path}: {exc}") from None
    if not stat.S_ISSOCK(mode):
        raise PodResourcesError(f"kubelet PodResources path {socket_path} is not a unix socket")


def _flatten(response: api_pb2.ListPodResourcesResponse) -> list[DeviceAllocation]:
    return [
        DeviceAllocation(devices.resource_name, device_id, PodRef(pod.name, pod.namespace, container.name))
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
        for device_id in devices.device_ids
    ]


def list_allocations(socket_path: str, timeout_s: float = 5.0) -> list[DeviceAllocation]:
    """Call ``List`` once and return one row per allocated device ID, of every resource.

    Raises :class:`PodResourcesError` when the socket is missing or the call fails.
    """
    _check_socket(socket_path)
    channel = grpc.insecure_channel(
        f"unix://{os.path.abspath(socket_path)}",
        options=[("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)],
    )
    try:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        response = stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        name = code.name if code is not None else "UNKNOWN"
        one_line = " ".join(str(details or "").split())
        raise PodResourcesError(f"List on {socket_path} failed: {name} {one_line}".rstrip()) from None
    finally:
        channel.close()
    return _flatten(response)


@dataclass(frozen=True)
class PodResourcesStatus:
    """Latest watcher state; replaced as a whole, never mutated."""

    allocations: tuple[DeviceAllocation, ...] = ()
    up: bool = False
    last_success: float | None = None
    error: str | None = None
    errors_total: int = 0


class PodResourcesWatcher:
    """Polls ``List`` on a daemon thread; :meth:`snapshot` returns the latest result without blocking.

    On failure the allocations are dropped (no stale pod labels) and ``up`` turns False.
    """

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        refresh_interval_s: float = 2.0,
        timeout_s: float = 5.0,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.socket_path = socket_path
        self.refresh_interval_s = refresh_interval_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._status = PodResourcesStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self) -> PodResourcesStatus:
        """The latest status (a single reference read; no lock)."""
        return self._status

    def refresh_once(self) -> PodResourcesStatus:
        """Poll once and publish the result. Meant for one caller at a time (the thread, or a test)."""
        previous = self._status
        try:
            allocations = tuple(list_allocations(self.socket_path, self.timeout_s))
        except Exception as exc:
            message = str(exc) if isinstance(exc, PodResourcesError) else f"{type(exc).__name__}: {exc}"
            # Warn when the failure starts or changes; repeats of the same error stay at debug level.
            log = logger.debug if message == previous.error else logger.warning
            log("pod attribution unavailable: %s", message)
            status = PodResourcesStatus(
                up=False,
                last_success=previous.last_success,
                error=message,
                errors_total=previous.errors_total + 1,
            )
        else:
            if previous.error is not None:
                logger.info("kubelet PodResources API reachable again at %s", self.socket_path)
            status = PodResourcesStatus(allocations, True, self._clock(), None, previous.errors_total)
        self._status = status
        return status

    def start(self) -> None:
        """Start polling (first poll immediately); a no-op when already running."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="podresources-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; waits at most for one in-flight ``List`` call."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.timeout_s + 1.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh_once()
            self._stop.wait(self.refresh_interval_s)
