"""The KEDA scaler's port under slow, flooding and oversized clients (issue 47), against a real adapter and a real
Prometheus: each limit refuses what it should while a KEDA-shaped client keeps its answers.

The KEDA-shaped client (``tests/support/hostile.py``, read from kedacore/keda ``pkg/scalers/external_scaler.go``:
one pooled connection, an ``IsActive`` on it every half second here, one ``StreamIsActive`` reopened as
``runStreamIsActive`` does) connects from 127.0.0.2 through a loopback relay, as KEDA's pod has an address of its
own in a cluster; the hostile clients connect from 127.0.0.1. The limits are set small so each is reached with a
few connections: ``--keda-scaler-max-requests-inflight 2``, ``--keda-scaler-max-streams 2``,
``--keda-scaler-max-connections 30``, ``--keda-scaler-handshake-timeout 1s``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import grpc.aio
import psutil
import pytest

from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from tests.support import hostile
from tests.support.adapter_metrics import metric_value
from tests.support.adapter_process import AdapterProcess
from tests.support.keda import KedaClient
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port
from tests.support.service_proxy import ServiceProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

PODS = [f"vllm-{i}" for i in range(3)]
TRIGGER = {"metric": "DCGM_FI_DEV_GPU_UTIL", "resource": "pods", "labelSelector": "app=vllm", "targetValue": "60",
           "activationThreshold": "5"}
TIGHT = ["--keda-scaler-max-requests-inflight", "2", "--keda-scaler-max-streams", "2",
         "--keda-scaler-max-connections", "30", "--keda-scaler-handshake-timeout", "1s"]
FAST = ["--keda-scaler-stream-interval", "200ms", "--prometheus-timeout", "2s"]


class Scaler:
    """Prometheus with the pods' GPU series, the adapter serving the scaler in plain text (every caller reaches the
    calls: what a hostile pod could do where no NetworkPolicy admits KEDA alone), and KEDA's way in."""

    def __init__(self, tmp: Path, args: list[str]) -> None:
        self.endpoint = MetricsEndpoint("".join(
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-{i}",namespace="ml",pod="{pod}"}} {20 + i}\n'
            for i, pod in enumerate(PODS)))
        (tmp / "objects.json").write_text(json.dumps({"pods": [
            {"namespace": "ml", "name": pod, "labels": {"app": "vllm"}} for pod in PODS]}))
        self.prometheus = PrometheusServer([self.endpoint.address], job="dcgm-exporter", honor_labels=True).start()
        self.adapter: AdapterProcess | None = None
        self.proxy: ServiceProxy | None = None
        self.port = free_port()
        try:
            self.prometheus.wait_for(f"count(DCGM_FI_DEV_GPU_UTIL) == {len(PODS)}", timeout=40)
            self.adapter = AdapterProcess(self.prometheus.url, str(tmp / "certs"), [
                "--standalone-objects", str(tmp / "objects.json"), "--metrics-relist-interval", "1s",
                "--keda-scaler-port", str(self.port), "--keda-scaler-insecure", *args])
            self.proxy = ServiceProxy(propagation_s=0.0, source="127.0.0.2")
            self.proxy.set_endpoint("adapter", self.address, ready=True, at_once=True)
            wait_until(lambda: self.answers(self.address), 30, "the trigger's first value")
        except BaseException:
            self.stop()
            raise

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def answers(self, address: str) -> bool:
        client = KedaClient(address, timeout=5)
        try:
            return client.trigger("vllm", "ml", TRIGGER).is_active()
        except grpc.RpcError:
            return False
        finally:
            client.close()

    @contextmanager
    def keda(self, interval_s: float = 0.5) -> Iterator[hostile.KedaShaped]:
        """KEDA's pooled connection, from its own address, polling and streaming until the block ends."""
        assert self.proxy is not None
        client = KedaClient(self.proxy.address)
        shaped = hostile.KedaShaped(client.stub, client.trigger("vllm", "ml", TRIGGER).ref, interval_s=interval_s)
        shaped.start()
        try:
            wait_until(lambda: shaped.figures.stream_messages and shaped.figures.latencies_s, 20,
                       "KEDA's first answers")
            yield shaped
        finally:
            shaped.stop()
            client.close()

    def held(self) -> int:
        """Connections the adapter has open on the scaler's port."""
        assert self.adapter is not None
        return sum(1 for c in psutil.Process(self.adapter.proc.pid).net_connections(kind="tcp")
                   if c.laddr and c.laddr.port == self.port and c.status == psutil.CONN_ESTABLISHED)

    def stop(self) -> str:
        log = self.adapter.stop() if self.adapter is not None else ""
        if self.proxy is not None:  # after the adapter: its links end with the adapter's side of them
            self.proxy.stop()
        self.prometheus.stop()
        self.endpoint.stop()
        return log


@pytest.fixture(scope="module")
def scaler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scaler]:
    running = Scaler(tmp_path_factory.mktemp("keda-limits"), [*TIGHT, *FAST])
    yield running
    log = running.stop()
    assert "Traceback" not in log, log
    # A flood is counted, not logged call by call: at most one line per reason every 10 s.
    assert len([line for line in log.splitlines() if "KEDA scaler refused" in line]) <= 8, log


def no_failures(figures: hostile.KedaFigures) -> None:
    assert not figures.failures, figures.failure_details
    assert not figures.stream_ends, figures.stream_ends  # its stream stayed open throughout
    assert figures.latencies_s


def test_streams_beyond_the_limit_are_refused_while_kedas_stream_stays(scaler: Scaler) -> None:
    """Two stream seats: KEDA holds one; of six streams a flooding client opens over three connections, one is
    seated and the other five are refused once nothing frees within the wait (5 s)."""
    with scaler.keda() as keda:
        channels = [grpc.insecure_channel(scaler.address, options=[hostile.SEPARATE_CONNECTION]) for _ in range(3)]
        ref = pb.ScaledObjectRef(name="flood", namespace="ml", scalerMetadata=TRIGGER)
        streams = [pb_grpc.ExternalScalerStub(channels[i % 3]).StreamIsActive(ref) for i in range(6)]
        codes: list[str] = []
        for stream in streams:
            try:
                next(stream)
                codes.append("seated")
            except grpc.RpcError as exc:
                codes.append(exc.code().name)
                assert "the scaler is busy" in (exc.details() or "")
        for stream in streams:
            stream.cancel()
        for channel in channels:
            channel.close()
        figures = keda.stop()
    assert sorted(codes) == ["RESOURCE_EXHAUSTED"] * 5 + ["seated"]
    no_failures(figures)


async def stalled_calls(address: str, calls: int, connections: int) -> list[str]:
    """``IsActive`` calls whose request message never comes (their headers only), over ``connections``."""
    channels = [grpc.aio.insecure_channel(address, options=[hostile.SEPARATE_CONNECTION])
                for _ in range(connections)]

    async def never() -> AsyncIterator[pb.ScaledObjectRef]:
        await asyncio.sleep(3600)
        yield pb.ScaledObjectRef()

    async def one(i: int) -> str:
        call = channels[i % connections].stream_unary(
            "/externalscaler.ExternalScaler/IsActive", request_serializer=pb.ScaledObjectRef.SerializeToString,
            response_deserializer=pb.IsActiveResponse.FromString)
        try:
            await call(never(), timeout=30)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        return "OK"

    try:
        return list(await asyncio.gather(*(one(i) for i in range(calls))))
    finally:
        await asyncio.gather(*(c.close() for c in channels))


def test_calls_that_never_send_their_request_hold_a_seat_only_until_the_timeout(scaler: Scaler) -> None:
    """Two call seats, a hundred waiting places (50 per seat): of 120 calls without a request message, those seated
    hold their seat until the handshake timeout (then DEADLINE_EXCEEDED), the rest are refused (the queue full, or
    no seat within 5 s); KEDA's polls, from another address, push the flood's newest waiting calls out of the full
    queue and are seated in turn between the flood's, all answered."""
    before = metric_value(scaler.adapter, "gpu_adapter_keda_refused_calls_total",  # type: ignore[arg-type]
                          {"method": "IsActive", "reason": "slow-request"}) or 0
    with scaler.keda(interval_s=0.25) as keda:
        codes = asyncio.run(stalled_calls(scaler.address, calls=120, connections=4))
        figures = keda.stop()
    assert set(codes) == {"DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"}, codes
    no_failures(figures)
    after = metric_value(scaler.adapter, "gpu_adapter_keda_refused_calls_total",  # type: ignore[arg-type]
                         {"method": "IsActive", "reason": "slow-request"})
    assert after == before + codes.count("DEADLINE_EXCEEDED")


def test_connections_beyond_the_limit_are_closed_and_stalled_ones_after_the_handshake_timeout(
        scaler: Scaler) -> None:
    with scaler.keda() as keda:
        stalled = hostile.StalledConnections(scaler.address, 60)
        held = max(scaler.held() for _ in range(5))
        wait_until(lambda: len(stalled.closed_after) == 60, 20, "every stalled connection closed by the adapter")
        figures = keda.stop()
    stalled.close()
    assert held <= 30  # --keda-scaler-max-connections, KEDA's own included
    refused_at_once = [s for s in stalled.closed_after if s < 0.8]  # the others at the 1 s handshake timeout
    assert len(refused_at_once) >= 60 - 30
    no_failures(figures)  # KEDA's connection was open before: it is never the one refused
    assert scaler.answers(scaler.address)  # and a new one is taken again once they are gone


@pytest.mark.parametrize("first_bytes", [b"", hostile.PREFACE[:10], hostile.PREFACE],
                         ids=["nothing", "part-of-the-preface", "preface-without-settings"])
def test_a_connection_that_does_not_finish_its_handshake_is_closed_after_the_timeout(
        scaler: Scaler, first_bytes: bytes) -> None:
    stalled = hostile.StalledConnections(scaler.address, 1, first_bytes)
    try:
        [after] = wait_until(lambda: stalled.closed_after, 15, "the adapter closing the connection")
    finally:
        stalled.close()
    assert after >= 0.5  # closed by the timeout (1s), not refused at once


def test_a_slow_but_complete_handshake_is_kept(scaler: Scaler) -> None:
    """The preface in two parts, 0.4 s apart (inside the 1 s timeout): the connection then answers a PING after the
    timeout has passed."""
    with socket.create_connection(hostile.host_port(scaler.address), timeout=10) as sock:
        sock.sendall(hostile.PREFACE[:12])
        time.sleep(0.4)
        sock.sendall(hostile.PREFACE[12:] + hostile.frame(hostile.SETTINGS))
        time.sleep(1.5)
        sock.sendall(hostile.frame(hostile.PING, payload=struct.pack(">Q", 7)))
        received = b""
        deadline = time.monotonic() + 10
        while hostile.frame(hostile.PING, flags=0x1, payload=struct.pack(">Q", 7)) not in received:
            assert time.monotonic() < deadline, received
            chunk = sock.recv(65536)
            assert chunk, f"closed: {received!r}"
            received += chunk


def test_oversized_metadata_and_messages_are_refused_and_the_connection_kept(scaler: Scaler) -> None:
    client = KedaClient(scaler.address)
    try:
        trigger = client.trigger("vllm", "ml", TRIGGER)
        ok = client.stub.IsActive(trigger.ref, metadata=(("x-trace", "a" * 7000),), timeout=10)
        assert ok.result  # KEDA's few hundred bytes of headers are far under the 8 KiB limit; this is near it
        for size in (9 * 1024, 1024 * 1024):
            with pytest.raises(grpc.RpcError) as refused:
                client.stub.IsActive(trigger.ref, metadata=(("x-trace", "a" * size),), timeout=10)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # A 60 KiB request (a long label selector) is served; 70 KiB is over the 64 KiB limit.
        padding = ",".join(f"pad notin (x{i})" for i in range(3500))
        assert 60_000 < len(padding) < 64 * 1024 - 512
        long = client.trigger("vllm", "ml", {**TRIGGER, "labelSelector": f"app=vllm,{padding}"})
        assert long.is_active()
        longer = client.trigger("vllm", "ml", {**TRIGGER, "labelSelector": f"app=vllm,{padding},{padding[:9000]}"})
        with pytest.raises(grpc.RpcError) as refused:
            longer.is_active()
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in (refused.value.details() or "")
        assert trigger.is_active()  # the same connection goes on serving
    finally:
        client.close()


def test_pings_faster_than_allowed_end_the_connection(scaler: Scaler) -> None:
    """A connection without calls may ping once every two hours (gRPC core's ping_abuse_policy.cc: the TCP
    keepalive rule; with calls in flight, once per --keda-scaler-keepalive-min-time); the third strike, the fourth
    ping here, is a GOAWAY with ENHANCE_YOUR_CALM. KEDA's client sends no keepalive pings at all."""
    goaway = hostile.ping_flood(scaler.address, pings=6)
    assert goaway is not None and goaway.error_code == hostile.ENHANCE_YOUR_CALM
    assert b"too_many_pings" in goaway.debug
    assert hostile.ping_flood(scaler.address, pings=1, timeout_s=2) is None  # one ping is answered and kept


def test_a_stream_survives_the_connections_max_age_through_the_grace(tmp_path: Path) -> None:
    """GOAWAY at 2 s: KEDA's next calls go to a new connection, while its open stream goes on over the old one and
    ends by itself with status OK within the 20 s grace (never cut with UNAVAILABLE); KEDA opens it again 2 s
    later, as runStreamIsActive does after a clean end."""
    scaler = Scaler(tmp_path, [*FAST, "--keda-scaler-max-connection-age", "2s",
                               "--keda-scaler-max-connection-age-grace", "20s"])
    try:
        with scaler.keda() as keda:
            wait_until(lambda: keda.figures.stream_opened >= 2, 40, "KEDA's stream ended cleanly and reopened")
            figures = keda.stop()
        assert scaler.proxy is not None and scaler.proxy.stats.connections["adapter"] >= 2  # reconnected
    finally:
        log = scaler.stop()
    assert figures.stream_ends == {"OK": 1} or set(figures.stream_ends) == {"OK"}, figures.stream_ends
    assert not figures.failures, figures.failure_details
    assert "Traceback" not in log

