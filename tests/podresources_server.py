"""The kubelet PodResources server (``loadtest.standins.kubelet``) with test controls, plus its pytest fixture.

Pods are given as plain tuples: ``(pod_name, namespace, [(container_name, [(resource_name, [ids])])])``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from loadtest.standins.kubelet import ContainerSpec, DeviceSpec, PodResourcesServer, PodSpec

__all__ = ["ContainerSpec", "DeviceSpec", "FakePodResourcesServer", "PodSpec", "podresources_server"]


@dataclass(frozen=True)
class _Failure:
    code: grpc.StatusCode
    details: str


class FakePodResourcesServer(PodResourcesServer):
    """Serves at ``<directory>/kubelet.sock``; ``List`` can be made to fail or stall, and its calls are counted."""

    def __init__(self, directory: str) -> None:
        super().__init__(os.path.join(directory, "kubelet.sock"))
        self.list_calls = 0
        self._failure: _Failure | None = None
        self._delay_s = 0.0
        self._released = threading.Event()

    def fail_with(self, code: grpc.StatusCode | None, details: str = "injected failure") -> None:
        """Make ``List`` fail with ``code`` (None: answer normally again)."""
        self._failure = None if code is None else _Failure(code, details)

    def delay_list(self, seconds: float) -> None:
        """Make ``List`` wait this long before answering (interrupted by :meth:`stop`)."""
        self._delay_s = seconds

    def before_list(self, context: grpc.ServicerContext) -> None:
        self.list_calls += 1
        if self._delay_s:
            self._released.wait(self._delay_s)
        failure = self._failure
        if failure is not None:
            context.abort(failure.code, failure.details)

    def start(self) -> None:
        self._released.clear()
        super().start()

    def stop(self) -> None:
        self._released.set()
        super().stop()


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
