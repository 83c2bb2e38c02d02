"""Calls that sample over a window (PCIe throughput, 20 ms each on real GPUs) start together at a collection's start."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pynvml
import pytest

from exporter.backends.nvml import NvmlBackend
from exporter.backends.sampled import SampledCalls
from exporter.fields.counters import parse_counters
from exporter.serving.collector import Collector, CollectorOptions
from tests import fakenvml
from tests.exporter_helpers import parse_metrics, value
from tests.fakenvml import FakeNvml

pytestmark = pytest.mark.unit

fake_nvml = fakenvml.fake_nvml


class Recorder:
    """A call that says which thread made it, and can be held inside until released."""

    def __init__(self, answer: object = 7, *, hold: bool = False) -> None:
        self.answer = answer
        self.threads: list[str] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def __call__(self) -> object:
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        self.release.wait(10)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def calls() -> Iterator[SampledCalls]:
    sampled = SampledCalls()
    yield sampled
    sampled.close()


def test_the_first_collection_calls_in_place_and_the_next_starts_the_call_at_its_beginning(
        calls: SampledCalls) -> None:
    call = Recorder(41)
    calls.begin()
    assert calls.get("tx", call) == 41
    assert call.threads == [threading.current_thread().name]
    calls.begin()
    assert call.entered.wait(5)  # started by begin, before any read asked
    assert len(call.threads) == 2 and call.threads[1].startswith("nvml-sampled")
    assert calls.get("tx", call) == 41
    assert len(call.threads) == 2


def test_a_collection_makes_each_call_once_and_only_what_the_previous_one_read_is_started(
        calls: SampledCalls) -> None:
    tx, rx = Recorder(1), Recorder(2)
    calls.begin()
    assert [calls.get("tx", tx), calls.get("tx", tx)] == [1, 1]  # two MIG instances of one GPU: one call
    assert len(tx.threads) == 1
    calls.begin()
    assert calls.get("rx", rx) == 2  # new this collection: in place
    assert rx.threads == [threading.current_thread().name]
    calls.begin()  # this collection read rx only: tx is not started again
    assert calls.get("rx", rx) == 2
    assert len(tx.threads) == 2 and len(rx.threads) == 2


def test_an_error_from_a_started_call_is_raised_by_the_read(calls: SampledCalls) -> None:
    failing = Recorder(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST))
    calls.begin()
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        calls.get("tx", failing)
    calls.begin()
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        calls.get("tx", failing)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):  # the same answer for the GPU's other instances
        calls.get("tx", failing)
    assert len(failing.threads) == 2


def test_a_call_still_in_the_driver_is_not_started_again(calls: SampledCalls) -> None:
    call = Recorder(5)
    calls.begin()
    calls.get("tx", call)
    call.release.clear()  # from now on the driver holds every call
    calls.begin()
    assert call.entered.wait(5)
    # the worker that reads it waits (the collector's hang watch leaves it behind) ...
    stuck = threading.Thread(target=calls.get, args=("tx", call), daemon=True)
    stuck.start()
    # ... and the next collections do not start another call behind the one that hangs
    for _ in range(3):
        calls.begin()
    assert len(call.threads) == 2
    call.release.set()
    stuck.join(5)
    calls.begin()
    assert calls.get("tx", call) == 5


def test_pcie_throughput_of_every_gpu_is_sampled_at_once_from_the_second_collection(fake_nvml: FakeNvml) -> None:
    """Real GPUs: each read samples 20 ms, so 4 GPUs x TX and RX one after another would wait 160 ms."""
    fake_nvml.gpus[:] = [fakenvml.FakeGpu(index=i) for i in range(4)]
    for gpu in fake_nvml.gpus:
        gpu.pcie_tx_kbps, gpu.pcie_rx_kbps = 1000 + gpu.index, 2000 + gpu.index
    fake_nvml.pcie_sample_s = 0.05
    counters = parse_counters("DCGM_FI_DEV_PCIE_TX_THROUGHPUT, counter, tx\n"
                              "DCGM_FI_DEV_PCIE_RX_THROUGHPUT, counter, rx\n"
                              "DCGM_FI_DEV_GPU_TEMP, gauge, temp\n", "pcie.csv")
    backend = NvmlBackend(pynvml)
    backend.open()
    collector = Collector(backend, counters, CollectorOptions())
    try:
        collector.collect_once()
        assert fake_nvml.pcie_most_in_flight == 1  # the first collection reads them in turn
        fake_nvml.gpus[2].pcie_rx_kbps = 2999
        collector.collect_once()
        rows = parse_metrics(collector.snapshot.body.decode())
    finally:
        backend.close()
    assert fake_nvml.pcie_most_in_flight == 8
    assert [value(rows, "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", gpu=str(i)) for i in range(4)] == [1000, 1001, 1002, 1003]
    assert [value(rows, "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", gpu=str(i)) for i in range(4)] == [2000, 2001, 2999, 2003]
    assert fake_nvml.calls["nvmlDeviceGetPcieThroughput"] == 16  # once per GPU, direction and collection


def test_a_gpu_whose_pcie_throughput_is_not_supported_reports_it_from_the_started_call(fake_nvml: FakeNvml) -> None:
    fake_nvml.fail("nvmlDeviceGetPcieThroughput", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=1)
    counters = parse_counters("DCGM_FI_DEV_PCIE_TX_THROUGHPUT, counter, tx\n", "pcie.csv")
    backend = NvmlBackend(pynvml)
    backend.open()
    collector = Collector(backend, counters, CollectorOptions())
    try:
        collector.collect_once()
        fake_nvml.clear_failures()
        fake_nvml.fail("nvmlDeviceGetPcieThroughput", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=0, times=1)
        collector.collect_once()  # GPU 0's started call answers "lost"
        rows = parse_metrics(collector.snapshot.body.decode())
    finally:
        backend.close()
    assert value(rows, "gpu_exporter_field_supported", gpu="1", field="DCGM_FI_DEV_PCIE_TX_THROUGHPUT") == 0
    assert not [r for r in rows if r[0] == "DCGM_FI_DEV_PCIE_TX_THROUGHPUT" and r[1]["gpu"] == "0"]
    assert value(rows, "gpu_exporter_gpu_up", gpu="0") == 0
