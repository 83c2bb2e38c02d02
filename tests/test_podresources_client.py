"""PodResources client and watcher against a real gRPC server on a unix socket."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import grpc
import pytest

from exporter.pods.mapping import DeviceAllocation, PodRef
from exporter.pods.podresources.client import (
    PodResourcesError,
    PodResourcesStatus,
    PodResourcesWatcher,
    list_allocations,
)
from exporter.pods.podresources.v1 import api_pb2, api_pb2_grpc
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.podresources_server import FakePodResourcesServer

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]

# Registers the ``podresources_server`` fixture (importing it directly would trip F811 on every use).

GPU_A = "GPU-8f2c0a1e-1111-2222-3333-444455556666"
GPU_B = "GPU-1b3d5f70-aaaa-bbbb-cccc-ddddeeeeffff"
TRAINER = ("trainer-0", "ml", [("main", [("nvidia.com/gpu", [GPU_A]), ("example.com/nic", ["eth1"])])])
INFER = (
    "infer-7f9c",
    "serving",
    [("init", []), ("server", [("nvidia.com/gpu", [f"{GPU_B}::0", f"{GPU_B}::1"])])],
)


@pytest.fixture
def watcher(podresources_server: FakePodResourcesServer) -> Iterator[PodResourcesWatcher]:
    w = PodResourcesWatcher(podresources_server.socket_path, refresh_interval_s=0.1, timeout_s=1.0)
    yield w
    w.stop()


def test_list_round_trip(podresources_server: FakePodResourcesServer) -> None:
    podresources_server.set_pods([TRAINER, INFER])
    assert list_allocations(podresources_server.socket_path) == [
        DeviceAllocation("nvidia.com/gpu", GPU_A, PodRef("trainer-0", "ml", "main")),
        DeviceAllocation("example.com/nic", "eth1", PodRef("trainer-0", "ml", "main")),
        DeviceAllocation("nvidia.com/gpu", f"{GPU_B}::0", PodRef("infer-7f9c", "serving", "server")),
        DeviceAllocation("nvidia.com/gpu", f"{GPU_B}::1", PodRef("infer-7f9c", "serving", "server")),
    ]


def test_list_empty_node(podresources_server: FakePodResourcesServer) -> None:
    assert list_allocations(podresources_server.socket_path) == []


def test_fake_server_serves_get_and_allocatable(podresources_server: FakePodResourcesServer) -> None:
    podresources_server.set_pods([TRAINER])
    with grpc.insecure_channel(f"unix://{podresources_server.socket_path}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        got = stub.Get(api_pb2.GetPodResourcesRequest(pod_name="trainer-0", pod_namespace="ml"), timeout=2)
        allocatable = stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=2)
    assert got.pod_resources.containers[0].devices[0].device_ids == [GPU_A]
    assert {d.resource_name for d in allocatable.devices} == {"nvidia.com/gpu", "example.com/nic"}


def test_missing_socket_names_the_path(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "kubelet.sock")
    with pytest.raises(PodResourcesError, match=re.escape(f"socket {path} not found")):
        list_allocations(path)


def test_path_that_is_not_a_socket(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "kubelet.sock")
    open(path, "w").close()
    with pytest.raises(PodResourcesError, match="not a unix socket"):
        list_allocations(path)


def test_server_error_is_reported(podresources_server: FakePodResourcesServer) -> None:
    podresources_server.fail_with(grpc.StatusCode.UNAVAILABLE, "kubelet is restarting")
    with pytest.raises(PodResourcesError, match=r"List on .* failed: UNAVAILABLE kubelet is restarting"):
        list_allocations(podresources_server.socket_path)


def test_deadline_is_applied(podresources_server: FakePodResourcesServer) -> None:
    podresources_server.delay_list(30.0)  # released when the server stops
    started = time.monotonic()
    with pytest.raises(PodResourcesError, match="DEADLINE_EXCEEDED"):
        list_allocations(podresources_server.socket_path, timeout_s=0.2)
    assert time.monotonic() - started < 10  # the 0.2 s deadline, not the 30 s answer


def test_refresh_once_publishes_a_new_status(
    podresources_server: FakePodResourcesServer, watcher: PodResourcesWatcher
) -> None:
    assert watcher.snapshot() == PodResourcesStatus()
    podresources_server.set_pods([TRAINER])
    status = watcher.refresh_once()
    assert status is watcher.snapshot()
    assert status.up and status.error is None and status.errors_total == 0
    assert status.last_success is not None and abs(status.last_success - time.time()) < 5
    assert [a.device_id for a in status.allocations] == [GPU_A, "eth1"]


def test_watcher_picks_up_changes(
    podresources_server: FakePodResourcesServer, watcher: PodResourcesWatcher
) -> None:
    podresources_server.set_pods([TRAINER])
    watcher.start()
    wait_until(lambda: watcher.snapshot().up)
    podresources_server.set_pods([INFER])
    wait_until(lambda: {a.pod.name for a in watcher.snapshot().allocations} == {"infer-7f9c"})


def test_watcher_goes_down_and_recovers_after_kubelet_restart(
    podresources_server: FakePodResourcesServer, watcher: PodResourcesWatcher
) -> None:
    podresources_server.set_pods([TRAINER])
    watcher.start()
    wait_until(lambda: watcher.snapshot().up)
    first_success = watcher.snapshot().last_success

    podresources_server.stop()  # removes the socket, like a restarting kubelet
    wait_until(lambda: watcher.snapshot().errors_total >= 3)
    down = watcher.snapshot()
    assert not down.up
    assert down.allocations == ()  # no stale pod labels
    assert down.error is not None and "not found" in down.error
    assert down.last_success == first_success

    podresources_server.set_pods([INFER])
    podresources_server.start()  # a new socket inode on the same path
    wait_until(lambda: watcher.snapshot().up)
    recovered = watcher.snapshot()
    assert recovered.error is None and recovered.errors_total >= 3
    assert {a.pod.name for a in recovered.allocations} == {"infer-7f9c"}


def test_repeated_failure_warns_once_without_traceback(
    podresources_server: FakePodResourcesServer,
    watcher: PodResourcesWatcher,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="exporter.podresources")
    podresources_server.stop()
    for _ in range(3):
        watcher.refresh_once()
    podresources_server.start()
    assert watcher.refresh_once().up

    records = [r for r in caplog.records if r.name == "exporter.podresources"]
    assert [(r.levelno, r.exc_info) for r in records] == [
        (logging.WARNING, None),
        (logging.DEBUG, None),
        (logging.DEBUG, None),
        (logging.INFO, None),
    ]
    socket_path = podresources_server.socket_path
    expected = f"pod attribution unavailable: kubelet PodResources socket {socket_path} not found"
    assert records[0].getMessage() == expected


def test_watcher_drops_allocations_on_rpc_error(
    podresources_server: FakePodResourcesServer, watcher: PodResourcesWatcher
) -> None:
    podresources_server.set_pods([TRAINER])
    assert watcher.refresh_once().up
    podresources_server.fail_with(grpc.StatusCode.UNAVAILABLE)
    status = watcher.refresh_once()
    assert (status.up, status.allocations, status.errors_total) == (False, (), 1)
    assert status.error is not None and "UNAVAILABLE" in status.error


def test_unexpected_exception_marks_down_and_keeps_polling(
    podresources_server: FakePodResourcesServer, watcher: PodResourcesWatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(socket_path: str, timeout_s: float) -> list[DeviceAllocation]:
        raise RuntimeError("boom")

    monkeypatch.setattr("exporter.pods.podresources.client.list_allocations", boom)
    watcher.start()
    wait_until(lambda: watcher.snapshot().errors_total >= 2)
    assert watcher.snapshot().error == "RuntimeError: boom"
    monkeypatch.undo()
    wait_until(lambda: watcher.snapshot().up)


def test_stop_returns_quickly(podresources_server: FakePodResourcesServer) -> None:
    w = PodResourcesWatcher(podresources_server.socket_path, refresh_interval_s=30.0)
    w.start()
    wait_until(lambda: w.snapshot().up)
    started = time.monotonic()
    w.stop()
    assert time.monotonic() - started < 10  # not the next 30 s refresh
    w.stop()  # idempotent
