"""The collector with the fake backend: names, labels, omission rules, failure isolation, self-metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clikit.fake_gpus import fake_gpu_uuid, fake_mig_uuid
from exporter.backends.base import FieldNotSupported
from exporter.backends.fake import FakeBackend
from exporter.fields.counters import load_counters, parse_counters
from exporter.fields.entities import GpuEntity
from exporter.fields.table import Field, Value
from exporter.pods.mapping import DeviceAllocation, PodRef
from exporter.pods.podresources.client import PodResourcesStatus
from exporter.serving.collector import Collector, CollectorOptions, PodAttribution
from tests.exporter_helpers import parse_metrics, series, value, write_state

pytestmark = pytest.mark.unit


def make(tmp_path: Path, state: dict[str, Any] | None = None, gpus: int = 2, **opts: Any) -> tuple[Collector, Path]:
    path = tmp_path / "state.json"
    write_state(path, state or {})
    backend = FakeBackend(gpus, str(path))
    backend.open()
    return Collector(backend, load_counters(None), CollectorOptions(hostname="node-a", **opts)), path


def scrape(collector: Collector) -> tuple[str, list]:
    collector.collect_once()
    text = collector.snapshot.body.decode()
    return text, parse_metrics(text)


def test_dcgm_names_types_and_labels(tmp_path: Path) -> None:
    collector, _ = make(tmp_path, {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 85, "DCGM_FI_DEV_FB_USED": 30000}}})
    text, rows = scrape(collector)
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    assert "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %)." in text
    # counters keep their DCGM names: no _total, no _created
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text and "_created" not in text
    util = series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0]
    assert util[2] == 85
    assert util[1] == {
        "gpu": "0", "UUID": fake_gpu_uuid("", 0), "pci_bus_id": "00000000:10:00.0", "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-a", "DCGM_FI_DRIVER_VERSION": "550.54.15"}
    assert value(rows, "DCGM_FI_DEV_FB_USED", gpu="0") == 30000
    # FB_FREE derives from total - used - reserved; FB_TOTAL is exposed too
    assert value(rows, "DCGM_FI_DEV_FB_FREE", gpu="0") == 81559 - 30000 - 591
    assert value(rows, "DCGM_FI_DEV_FB_TOTAL", gpu="0") == 81559
    assert value(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="1") == 0  # idle default
    # label order on the wire follows dcgm-exporter's renderer
    line = next(raw for raw in text.splitlines() if raw.startswith("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""))
    assert [kv.split("=")[0] for kv in line[line.index("{") + 1:line.index("}")].split('",')] == [
        "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]


def test_hostname_label_name_and_no_hostname(tmp_path: Path) -> None:
    collector, _ = make(tmp_path, hostname_label="hostname")
    _, rows = scrape(collector)
    labels = series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0][1]
    assert labels["hostname"] == "node-a" and "Hostname" not in labels
    collector, _ = make(tmp_path, hostname_label=None)
    _, rows = scrape(collector)
    labels = series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0][1]
    assert "hostname" not in labels and "Hostname" not in labels


def test_unsupported_field_is_omitted_not_zero(tmp_path: Path) -> None:
    collector, _ = make(tmp_path, {"gpus": {"1": {"unsupported": ["DCGM_FI_DEV_MEMORY_TEMP"]}}})
    _, rows = scrape(collector)
    assert series(rows, "DCGM_FI_DEV_MEMORY_TEMP", gpu="0")
    assert not series(rows, "DCGM_FI_DEV_MEMORY_TEMP", gpu="1")
    assert value(rows, "gpu_exporter_field_supported", gpu="1", field="DCGM_FI_DEV_MEMORY_TEMP") == 0
    assert value(rows, "gpu_exporter_field_supported", gpu="0", field="DCGM_FI_DEV_MEMORY_TEMP") == 1


class CountingBackend(FakeBackend):
    """Counts reads per field and refuses one field, to prove an unsupported field is probed only once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: dict[str, int] = {}

    def read(self, entity: GpuEntity, field: Field) -> Value:
        self.reads[field.name] = self.reads.get(field.name, 0) + 1
        if field.name == "DCGM_FI_DEV_MEMORY_TEMP":
            raise FieldNotSupported("not on this board")
        return super().read(entity, field)


def test_unsupported_field_is_probed_once(tmp_path: Path) -> None:
    backend = CountingBackend(1)
    collector = Collector(backend, load_counters(None), CollectorOptions())
    for _ in range(5):
        collector.collect_once()
    assert backend.reads["DCGM_FI_DEV_MEMORY_TEMP"] == 1
    assert backend.reads["DCGM_FI_DEV_GPU_TEMP"] == 5


def test_lost_gpu_drops_only_its_series_and_comes_back(tmp_path: Path) -> None:
    collector, path = make(tmp_path, {"gpus": {"1": {"lost": True}}})
    _, rows = scrape(collector)
    assert series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
    assert not [r for r in rows if r[0].startswith("DCGM_") and r[1].get("gpu") == "1"]
    assert value(rows, "gpu_exporter_gpu_up", gpu="1") == 0
    assert value(rows, "gpu_exporter_gpu_up", gpu="0") == 1
    assert collector.health() == (True, "OK")  # one lost GPU is not the exporter being down
    write_state(path, {"gpus": {}})
    _, rows = scrape(collector)
    assert series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="1")
    assert value(rows, "gpu_exporter_gpu_up", gpu="1") == 1


def test_backend_down_serves_no_gpu_values_and_health_says_why(tmp_path: Path) -> None:
    collector, path = make(tmp_path)
    _, rows = scrape(collector)
    assert series(rows, "DCGM_FI_DEV_GPU_TEMP")
    write_state(path, {"nvml_error": "Driver Not Loaded"})
    _, rows = scrape(collector)
    assert not [r for r in rows if r[0].startswith("DCGM_")]
    assert value(rows, "gpu_exporter_backend_up", backend="fake") == 0
    assert collector.health() == (False, "Driver Not Loaded")
    write_state(path, {})
    _, rows = scrape(collector)
    assert series(rows, "DCGM_FI_DEV_GPU_TEMP")
    assert collector.health() == (True, "OK")


def test_xid_series_appears_with_code_and_message(tmp_path: Path) -> None:
    collector, path = make(tmp_path)
    _, rows = scrape(collector)
    assert not series(rows, "DCGM_FI_DEV_XID_ERRORS")  # nothing until the first XID
    write_state(path, {"gpus": {"0": {"xid": 79}}})
    _, rows = scrape(collector)
    (row,) = series(rows, "DCGM_FI_DEV_XID_ERRORS")
    assert row[2] == 79 and row[1]["gpu"] == "0"
    assert row[1]["err_code"] == "79" and row[1]["err_msg"] == "GPU has fallen off the bus"


def test_mig_flex_mode(tmp_path: Path) -> None:
    state = {"gpus": {"1": {"DCGM_FI_DEV_POWER_USAGE": 300.5, "mig": [
        {"gpu_instance_id": 1, "profile": "3g.40gb", "DCGM_FI_DEV_FB_USED": 1200, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5},
        {"gpu_instance_id": 2, "profile": "1g.10gb", "compute_instances": 2}]}}}
    collector, _ = make(tmp_path, state)
    _, rows = scrape(collector)
    power = series(rows, "DCGM_FI_DEV_POWER_USAGE", gpu="1")
    # the MIG-enabled parent is not reported itself; GPU-level values are copied onto every instance
    assert sorted(r[1]["GPU_I_ID"] for r in power) == ["1", "2"]
    assert {r[2] for r in power} == {300.5}
    assert {r[1]["GPU_I_PROFILE"] for r in power} == {"3g.40gb", "1g.10gb"}
    assert {r[1]["UUID"] for r in power} == {fake_gpu_uuid("", 1)}  # parent UUID, as dcgm-exporter labels it
    assert value(rows, "DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID="1") == 1200
    assert value(rows, "DCGM_FI_DEV_FB_TOTAL", gpu="1", GPU_I_ID="1") == 40 * 1024
    assert value(rows, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="1", GPU_I_ID="1") == 0.5
    # utilisation is NOT_SUPPORTED under MIG: absent, never 0
    assert not series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="1")
    assert series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert "GPU_I_ID" not in series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0][1]


def test_device_modes_g_and_i(tmp_path: Path) -> None:
    state = {"gpus": {"1": {"mig": [{"gpu_instance_id": 3, "profile": "7g.80gb"}]}}}
    collector, _ = make(tmp_path, state, device_mode="g")
    _, rows = scrape(collector)
    assert sorted(r[1]["gpu"] for r in series(rows, "DCGM_FI_DEV_GPU_TEMP")) == ["0", "1"]
    assert not [r for r in rows if "GPU_I_ID" in r[1] and r[0].startswith("DCGM_")]
    collector, _ = make(tmp_path, state, device_mode="i")
    _, rows = scrape(collector)
    assert [(r[1]["gpu"], r[1]["GPU_I_ID"]) for r in series(rows, "DCGM_FI_DEV_GPU_TEMP")] == [("1", "3")]


def _pods(allocations: list[DeviceAllocation], up: bool = True) -> PodAttribution:
    status = PodResourcesStatus(allocations=tuple(allocations), up=up, last_success=1.0 if up else None,
                                error=None if up else "socket missing", errors_total=0 if up else 3)
    return PodAttribution(lambda: status)


def test_pod_labels_in_kubernetes_mode(tmp_path: Path) -> None:
    alloc = [DeviceAllocation("nvidia.com/gpu", fake_gpu_uuid("", 0), PodRef("infer-0", "ml", "server"))]
    collector, _ = make(tmp_path, pods=_pods(alloc))
    _, rows = scrape(collector)
    labels = series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]
    assert (labels["pod"], labels["namespace"], labels["container"]) == ("infer-0", "ml", "server")
    # an unallocated GPU carries no pod labels at all (not empty strings)
    assert "pod" not in series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="1")[0][1]
    assert value(rows, "gpu_exporter_pod_resources_up") == 1


def test_pod_labels_on_mig_instances(tmp_path: Path) -> None:
    state = {"gpus": {"0": {"mig": [{"gpu_instance_id": 5, "profile": "1g.10gb"}]}}}
    alloc = [DeviceAllocation("nvidia.com/mig-1g.10gb", fake_mig_uuid("", 0, 5, 0), PodRef("p", "ns", "c"))]
    collector, _ = make(tmp_path, state, pods=_pods(alloc))
    _, rows = scrape(collector)
    assert series(rows, "DCGM_FI_DEV_FB_USED", gpu="0", GPU_I_ID="5")[0][1]["pod"] == "p"


def test_pod_source_down_serves_metrics_without_pod_labels(tmp_path: Path) -> None:
    collector, _ = make(tmp_path, pods=_pods([], up=False))
    _, rows = scrape(collector)
    assert series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert not [r for r in rows if "pod" in r[1]]
    assert value(rows, "gpu_exporter_pod_resources_up") == 0
    assert value(rows, "gpu_exporter_pod_resources_errors_total") == 3


def test_shared_gpu_does_not_copy_one_pods_labels(tmp_path: Path) -> None:
    uuid0 = fake_gpu_uuid("", 0)
    alloc = [DeviceAllocation("nvidia.com/gpu", f"{uuid0}::0", PodRef("a", "ns", "c")),
             DeviceAllocation("nvidia.com/gpu", f"{uuid0}::1", PodRef("b", "ns", "c"))]
    collector, _ = make(tmp_path, pods=_pods(alloc))
    _, rows = scrape(collector)
    assert "pod" not in series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]


def test_custom_counters_file_limits_output(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_state(path, {})
    backend = FakeBackend(1, str(path))
    backend.open()
    counters = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n", "c.csv")
    collector = Collector(backend, counters, CollectorOptions())
    _, rows = scrape(collector)
    assert {r[0] for r in rows if r[0].startswith("DCGM_")} == {"DCGM_FI_DEV_GPU_UTIL"}
    assert "DCGM_FI_DRIVER_VERSION" not in series(rows, "DCGM_FI_DEV_GPU_UTIL")[0][1]


def test_bad_state_rewrite_keeps_last_good_state(tmp_path: Path) -> None:
    collector, path = make(tmp_path, {"gpus": {"0": {"DCGM_FI_DEV_GPU_UTIL": 40}}})
    _, rows = scrape(collector)
    path.write_text("{not json")
    _, rows = scrape(collector)
    assert value(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 40
    assert value(rows, "gpu_exporter_fake_state_errors_total") == 1


def test_label_values_are_escaped(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_state(path, {})
    backend = FakeBackend(1, str(path), model='Odd "GPU"\\ with\nnewline')
    backend.open()
    collector = Collector(backend, load_counters(None), CollectorOptions())
    _, rows = scrape(collector)
    assert series(rows, "DCGM_FI_DEV_GPU_TEMP")[0][1]["modelName"] == 'Odd "GPU"\\ with\nnewline'


@pytest.mark.parametrize("replace", [False, True])
def test_replace_blanks_in_model_name(tmp_path: Path, replace: bool) -> None:
    collector, _ = make(tmp_path, replace_blanks_in_model_name=replace)
    _, rows = scrape(collector)
    model = series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0][1]["modelName"]
    assert model == ("NVIDIA-H100-80GB-HBM3" if replace else "NVIDIA H100 80GB HBM3")


def test_self_metrics(tmp_path: Path) -> None:
    collector, _ = make(tmp_path)
    _, rows = scrape(collector)
    _, rows = scrape(collector)
    assert value(rows, "gpu_exporter_collections_total") == 2
    assert value(rows, "gpu_exporter_backend_up", backend="fake") == 1
    assert value(rows, "gpu_exporter_last_collection_success_timestamp_seconds") > 1.7e9
    assert 0 < value(rows, "gpu_exporter_collection_duration_seconds") < 5
    assert value(rows, "process_resident_memory_bytes") > 0


def test_health_turns_503_when_collections_stop_arriving(tmp_path: Path) -> None:
    import time

    collector, _ = make(tmp_path)
    collector.collect_once()
    assert collector.health() == (True, "OK")
    # a sampling thread stuck in a driver call: the last success ages past max(3 intervals, 10 s)
    collector.last_success = time.time() - 11
    assert collector.health() == (False, "no successful collection in the last 10s")


def test_fake_derives_mig_mode_gpu_count_and_identity_labels(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_state(path, {"gpus": {"1": {"mig": [{"gpu_instance_id": 1, "profile": "7g.80gb"}]}}})
    backend = FakeBackend(3, str(path))
    backend.open()
    csv = "DCGM_FI_DEV_MIG_MODE, gauge, MIG\nDCGM_FI_DEV_COUNT, gauge, GPUs\nDCGM_FI_DEV_UUID, label, UUID\n"
    collector = Collector(backend, parse_counters(csv, "c.csv"), CollectorOptions())
    _, rows = scrape(collector)
    assert [value(rows, "DCGM_FI_DEV_MIG_MODE", gpu=g) for g in ("0", "1", "2")] == [0, 1, 0]
    assert value(rows, "DCGM_FI_DEV_COUNT", gpu="2") == 3
    assert series(rows, "DCGM_FI_DEV_COUNT", gpu="2")[0][1]["DCGM_FI_DEV_UUID"] == fake_gpu_uuid("", 2)


def test_fake_framebuffer_used_ratio_follows_used(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_state(path, {"gpus": {"0": {"DCGM_FI_DEV_FB_USED": 40484}}})
    backend = FakeBackend(1, str(path))
    backend.open()
    collector = Collector(backend, parse_counters("DCGM_FI_DEV_FB_USED_PERCENT, gauge, x\n", "c.csv"),
                          CollectorOptions())
    _, rows = scrape(collector)
    assert value(rows, "DCGM_FI_DEV_FB_USED_PERCENT", gpu="0") == pytest.approx(40484 / (81559 - 591))



def test_fake_produces_every_field_of_the_table(tmp_path: Path) -> None:
    """The demo and the tests can exercise every field the NVML backend reads: the fake has a value for each."""
    from exporter.fields.table import FIELDS

    path = tmp_path / "state.json"
    write_state(path, {"gpus": {"0": {"xid_events": [13]}}})
    backend = FakeBackend(1, str(path))
    backend.open()
    csv = "\n".join(f"{f.name}, {f.kind}, x" for f in FIELDS)
    collector = Collector(backend, parse_counters(csv, "all.csv"), CollectorOptions())
    _, rows = scrape(collector)
    labels = series(rows, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0][1]
    missing = [f.name for f in FIELDS if not (labels.get(f.name) if f.is_label else series(rows, f.name, gpu="0"))]
    assert missing == []
    assert not [r for r in rows if r[0] == "gpu_exporter_field_supported" and r[2] == 0]
