"""The dcgm-exporter counters CSV (-f): what is accepted and how bad lines are reported."""

from __future__ import annotations

import pytest

from exporter.counters import CountersError, load_counters, parse_counters


def test_built_in_default_set_is_dcgm_exporters_plus_fb_total() -> None:
    names = [c.name for c in load_counters(None)]
    for expected in (
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_DRIVER_VERSION",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ):
        assert expected in names
    kinds = {c.name: c.kind for c in load_counters(None)}
    assert kinds["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert kinds["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "gauge"  # a rate, as dcgm-exporter 4.8.3 declares it
    assert kinds["DCGM_FI_DRIVER_VERSION"] == "label"


def test_dcgm_exporter_csv_syntax() -> None:
    text = """# Format
# DCGM FIELD, Prometheus metric type, help message

DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).
# DCGM_FI_DEV_POWER_VIOLATION, counter, commented out
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, Total, with a comma, in the help
DCGM_FI_DRIVER_VERSION, label, Driver Version
"""
    counters = parse_counters(text, "cm.csv")
    assert [(c.name, c.kind) for c in counters] == [
        ("DCGM_FI_DEV_SM_CLOCK", "gauge"),
        ("DCGM_FI_DEV_DEC_UTIL", "gauge"),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter"),
        ("DCGM_FI_DRIVER_VERSION", "label"),
    ]
    assert counters[2].help == "Total, with a comma, in the help"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("DCGM_FI_DEV_NOT_A_FIELD, gauge, x", "cm.csv:2: unknown field 'DCGM_FI_DEV_NOT_A_FIELD'"),
        ("DCGM_EXP_NOT_A_COUNTER, gauge, x", "cm.csv:2: unknown field 'DCGM_EXP_NOT_A_COUNTER'"),
        ("dcgm_not_a_1x_name, gauge, x", "cm.csv:2: unknown field 'dcgm_not_a_1x_name'"),
        ("DCGM_FI_DEV_GPU_UTIL, histogram, x", "cm.csv:2: field DCGM_FI_DEV_GPU_UTIL: unknown type 'histogram'"),
        ("DCGM_FI_DEV_GPU_UTIL, label, x", "cm.csv:2: field DCGM_FI_DEV_GPU_UTIL: type 'label' not possible"),
        ("DCGM_FI_DRIVER_VERSION, gauge, x", "cm.csv:2: field DCGM_FI_DRIVER_VERSION: type 'gauge' not possible"),
        ("DCGM_EXP_XID_ERRORS_COUNT, label, x", "cm.csv:2: field DCGM_EXP_XID_ERRORS_COUNT: type 'label'"),
        ("just-one-column", "cm.csv:2: expected 'FIELD, type, help'"),
    ],
)
def test_bad_lines_name_file_line_and_field(line: str, message: str) -> None:
    with pytest.raises(CountersError) as err:
        parse_counters(f"DCGM_FI_DEV_SM_CLOCK, gauge, SM clock\n{line}\n", "cm.csv")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_unreadable_file_and_empty_set() -> None:
    with pytest.raises(CountersError, match=r"^/does/not/exist.csv: cannot read counters file"):
        load_counters("/does/not/exist.csv")
    with pytest.raises(CountersError, match="no metric fields"):
        parse_counters("# nothing\nDCGM_FI_DRIVER_VERSION, label, Driver Version\n", "empty.csv")


# Every field the GPU Operator's dcp-metrics-included.csv lists, active or commented out, so that its ConfigMap
# (and the same file with every line enabled) loads unchanged.
GPU_OPERATOR_FIELDS = [
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
    "DCGM_FI_DEV_RELIABILITY_VIOLATION",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
]
GPU_OPERATOR_LABELS = [
    "DCGM_FI_DRIVER_VERSION",
    "DCGM_FI_NVML_VERSION",
    "DCGM_FI_DEV_BRAND",
    "DCGM_FI_DEV_SERIAL",
    "DCGM_FI_DEV_OEM_INFOROM_VER",
    "DCGM_FI_DEV_ECC_INFOROM_VER",
    "DCGM_FI_DEV_POWER_INFOROM_VER",
    "DCGM_FI_DEV_INFOROM_IMAGE_VER",
    "DCGM_FI_DEV_VBIOS_VERSION",
]


def test_gpu_operator_counters_all_enabled_load() -> None:
    text = "\n".join(
        [f"{name}, gauge, help" for name in GPU_OPERATOR_FIELDS]
        + [f"{name}, label, help" for name in GPU_OPERATOR_LABELS]
    )
    counters = parse_counters(text, "dcp-metrics-included.csv")
    assert len(counters) == len(GPU_OPERATOR_FIELDS) + len(GPU_OPERATOR_LABELS)
