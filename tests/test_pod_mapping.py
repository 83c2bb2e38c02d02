"""Device-ID parsing and pod-index building for every device-plugin ID form."""

from __future__ import annotations

import pytest

from exporter.fields.entities import GpuEntity
from exporter.pods.mapping import (
    UNKNOWN_DEVICE_ID,
    DeviceAllocation,
    DeviceIdKind,
    IdType,
    ParsedDeviceId,
    PodRef,
    build_pod_index,
    is_gpu_resource,
    parse_device_id,
    pod_labels_for,
)

pytestmark = pytest.mark.unit

UUID0 = "GPU-8f2c0a1e-1111-2222-3333-444455556666"
UUID1 = "GPU-1b3d5f70-aaaa-bbbb-cccc-ddddeeeeffff"
UUID2 = "GPU-2ce7a541-0000-1111-2222-333344445555"  # MIG-enabled parent
MIG_GI7 = "MIG-7a7a7a7a-0101-0202-0303-040405050606"
MIG_GI7_CI1 = "MIG-7b7b7b7b-0101-0202-0303-040405050606"
MIG_GI8 = "MIG-8a8a8a8a-0101-0202-0303-040405050606"

ENTITIES = (
    GpuEntity(0, UUID0, "00000000:17:00.0", "NVIDIA A100-SXM4-40GB"),
    GpuEntity(1, UUID1, "00000000:31:00.0", "NVIDIA A100-SXM4-40GB"),
    GpuEntity(2, UUID2, "00000000:B1:00.0", "NVIDIA A100-SXM4-40GB", 7, "1g.5gb", (MIG_GI7, MIG_GI7_CI1)),
    GpuEntity(2, UUID2, "00000000:B1:00.0", "NVIDIA A100-SXM4-40GB", 8, "3g.20gb", (MIG_GI8,)),
)
EMPTY_INDEX = {e.key: () for e in ENTITIES}

POD_A = PodRef("trainer-0", "ml", "main")
POD_B = PodRef("infer-7f9c", "serving", "server")
POD_A_SIDECAR = PodRef("trainer-0", "ml", "sidecar")

K = DeviceIdKind


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        (UUID0, ParsedDeviceId(K.GPU_UUID, uuid=UUID0)),
        (f"{UUID0}::3", ParsedDeviceId(K.GPU_UUID, uuid=UUID0, replica=3)),
        (MIG_GI7, ParsedDeviceId(K.MIG_UUID, uuid=MIG_GI7)),
        (f"{MIG_GI7}::0", ParsedDeviceId(K.MIG_UUID, uuid=MIG_GI7, replica=0)),
        (
            f"MIG-{UUID2}/7/0",
            ParsedDeviceId(K.MIG_LEGACY, uuid=UUID2, gpu_instance_id=7, compute_instance_id=0),
        ),
        (
            f"MIG-{UUID2}/8/1::2",
            ParsedDeviceId(K.MIG_LEGACY, uuid=UUID2, gpu_instance_id=8, compute_instance_id=1, replica=2),
        ),
        ("nvidia0", ParsedDeviceId(K.DEVICE_NAME, gpu=0)),
        ("nvidia12", ParsedDeviceId(K.DEVICE_NAME, gpu=12)),
        ("nvidia0/gi7", ParsedDeviceId(K.DEVICE_NAME, gpu=0, gpu_instance_id=7)),
        ("nvidia0/vgpu2", ParsedDeviceId(K.DEVICE_NAME, gpu=0, replica=2)),
        ("nvidia0/gi7/vgpu1", ParsedDeviceId(K.DEVICE_NAME, gpu=0, gpu_instance_id=7, replica=1)),
    ],
)
def test_parse_known_forms(device_id: str, expected: ParsedDeviceId) -> None:
    assert parse_device_id(device_id) == expected


@pytest.mark.parametrize(
    "device_id",
    [
        "",
        "GPU-",
        "MIG-",
        f"{UUID0}::",
        f"{UUID0}::x",
        f"{UUID0}::1::2",
        f"MIG-{UUID2}",
        f"MIG-{UUID2}/7",
        f"MIG-{UUID2}/a/0",
        "nvidia",
        "nvidia0/",
        "nvidia0/gi",
        "nvidia0/vgpu1/gi7",
        "nvidiactl",
        "/dev/nvidia0",
        "gpu0",
        "0",
        "GPU-abc/1",
        "nvidia٣",
    ],
)
def test_parse_unknown_forms_never_raise(device_id: str) -> None:
    assert parse_device_id(device_id) == UNKNOWN_DEVICE_ID


@pytest.mark.parametrize(
    ("resource", "extra", "expected"),
    [
        ("nvidia.com/gpu", frozenset(), True),
        ("nvidia.com/mig-1g.10gb", frozenset(), True),
        ("nvidia.com/mig-3g.20gb", frozenset(), True),
        ("nvidia.com/gpu.shared", frozenset(), False),
        ("nvidia.com/gpu.shared", frozenset({"nvidia.com/gpu.shared"}), True),
        ("nvidia.com/gpus", frozenset(), False),
        ("example.com/foo", frozenset(), False),
        ("cpu", frozenset(), False),
    ],
)
def test_is_gpu_resource(resource: str, extra: frozenset[str], expected: bool) -> None:
    assert is_gpu_resource(resource, extra) is expected


# (id_type, device_id, entity key it must land on, or None for no match)
MATCH_CASES: list[tuple[IdType, str, tuple[int, int | None] | None]] = [
    ("uid", UUID0, (0, None)),
    ("uid", "GPU-" + UUID1[4:].upper(), (1, None)),  # hex case does not matter
    ("uid", f"{UUID0}::0", (0, None)),
    ("uid", f"{UUID1}::5", (1, None)),
    ("uid", MIG_GI7, (2, 7)),
    ("uid", MIG_GI7_CI1, (2, 7)),
    ("uid", f"{MIG_GI8}::1", (2, 8)),
    ("uid", f"MIG-{UUID2}/7/0", (2, 7)),
    ("uid", f"MIG-{UUID2}/8/0::1", (2, 8)),
    ("uid", f"MIG-{UUID2}/9/0", None),  # no such GPU instance
    ("uid", f"MIG-{UUID0}/7/0", None),  # parent is not in MIG mode
    ("uid", UUID2, None),  # whole-GPU ID for a MIG-enabled GPU
    ("uid", "GPU-00000000-dead-beef-0000-000000000000", None),
    ("uid", "MIG-00000000-dead-beef-0000-000000000000", None),
    ("uid", "nvidia0", None),  # device names need id_type="device-name"
    ("uid", "nvidia2/gi7", None),
    ("device-name", "nvidia0", (0, None)),
    ("device-name", "nvidia1/vgpu3", (1, None)),
    ("device-name", "nvidia2/gi7", (2, 7)),
    ("device-name", "nvidia2/gi8/vgpu1", (2, 8)),
    ("device-name", "nvidia2", None),  # whole-GPU ID for a MIG-enabled GPU
    ("device-name", "nvidia0/gi7", None),  # GPU 0 is not in MIG mode
    ("device-name", "nvidia2/gi9", None),
    ("device-name", "nvidia9", None),
    ("device-name", UUID0, None),  # UUIDs need id_type="uid"
    ("device-name", MIG_GI7, (2, 7)),  # MIG IDs match in both modes
    ("device-name", f"{MIG_GI8}::3", (2, 8)),
    ("device-name", f"MIG-{UUID2}/8/0", (2, 8)),
    ("uid", "something-else", None),
    ("device-name", "something-else", None),
]


@pytest.mark.parametrize(("id_type", "device_id", "key"), MATCH_CASES)
def test_build_pod_index_matches(id_type: IdType, device_id: str, key: tuple[int, int | None] | None) -> None:
    resource = "nvidia.com/mig-1g.5gb" if "MIG" in device_id or "/gi" in device_id else "nvidia.com/gpu"
    index = build_pod_index([DeviceAllocation(resource, device_id, POD_A)], ENTITIES, id_type=id_type)
    expected = dict(EMPTY_INDEX)
    if key is not None:
        expected[key] = (POD_A,)
    assert index == expected


@pytest.mark.parametrize(
    ("resource", "extra", "attributed"),
    [
        ("nvidia.com/gpu", frozenset(), True),
        ("nvidia.com/mig-1g.10gb", frozenset(), True),
        ("nvidia.com/gpu.shared", frozenset(), False),
        ("nvidia.com/gpu.shared", frozenset({"nvidia.com/gpu.shared"}), True),
        ("example.com/foo", frozenset(), False),
        ("example.com/foo", frozenset({"nvidia.com/gpu.shared"}), False),
    ],
)
def test_build_pod_index_resource_filter(resource: str, extra: frozenset[str], attributed: bool) -> None:
    allocations = [DeviceAllocation(resource, f"{UUID0}::1", POD_A)]
    index = build_pod_index(allocations, ENTITIES, id_type="uid", extra_resource_names=extra)
    assert index[(0, None)] == ((POD_A,) if attributed else ())


def test_time_sliced_gpu_shared_by_two_pods_gets_no_labels() -> None:
    allocations = [
        DeviceAllocation("nvidia.com/gpu", f"{UUID0}::1", POD_B),
        DeviceAllocation("nvidia.com/gpu", f"{UUID0}::0", POD_A),
        DeviceAllocation("nvidia.com/gpu", UUID1, POD_B),
    ]
    index = build_pod_index(allocations, ENTITIES, id_type="uid")
    assert index[(0, None)] == (POD_A, POD_B)  # sorted by namespace, name, container
    assert pod_labels_for(index[(0, None)]) is None
    assert pod_labels_for(index[(1, None)]) == {
        "pod": "infer-7f9c",
        "namespace": "serving",
        "container": "server",
    }


def test_two_replicas_in_one_container_count_once() -> None:
    allocations = [
        DeviceAllocation("nvidia.com/gpu", f"{UUID0}::0", POD_A),
        DeviceAllocation("nvidia.com/gpu", f"{UUID0}::1", POD_A),
    ]
    index = build_pod_index(allocations, ENTITIES, id_type="uid")
    assert index[(0, None)] == (POD_A,)
    assert pod_labels_for(index[(0, None)]) == {"pod": "trainer-0", "namespace": "ml", "container": "main"}


def test_same_pod_two_containers_is_shared() -> None:
    allocations = [
        DeviceAllocation("nvidia.com/mig-1g.5gb", f"{MIG_GI7}::0", POD_A),
        DeviceAllocation("nvidia.com/mig-1g.5gb", f"{MIG_GI7}::1", POD_A_SIDECAR),
    ]
    index = build_pod_index(allocations, ENTITIES, id_type="uid")
    assert index[(2, 7)] == (POD_A, POD_A_SIDECAR)
    assert pod_labels_for(index[(2, 7)]) is None


def test_id_type_switches_which_form_matches() -> None:
    allocations = [
        DeviceAllocation("nvidia.com/gpu", UUID0, POD_A),
        DeviceAllocation("nvidia.com/gpu", "nvidia1", POD_B),
    ]
    by_uid = build_pod_index(allocations, ENTITIES, id_type="uid")
    by_name = build_pod_index(allocations, ENTITIES, id_type="device-name")
    assert (by_uid[(0, None)], by_uid[(1, None)]) == ((POD_A,), ())
    assert (by_name[(0, None)], by_name[(1, None)]) == ((), (POD_B,))


def test_mig_uuids_without_prefix_on_the_entity_still_match() -> None:
    entity = GpuEntity(
        3, UUID2, "00000000:CA:00.0", "NVIDIA H100", 1, "1g.10gb", (MIG_GI8.removeprefix("MIG-"),)
    )
    index = build_pod_index(
        [DeviceAllocation("nvidia.com/mig-1g.10gb", MIG_GI8, POD_A)], [entity], id_type="uid"
    )
    assert index == {(3, 1): (POD_A,)}


def test_no_entities_or_allocations() -> None:
    assert build_pod_index([], ENTITIES, id_type="uid") == EMPTY_INDEX
    assert build_pod_index([DeviceAllocation("nvidia.com/gpu", UUID0, POD_A)], [], id_type="uid") == {}


def test_pod_labels_for_empty_is_none() -> None:
    assert pod_labels_for(()) is None
