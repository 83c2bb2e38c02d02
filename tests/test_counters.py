"""The dcgm-exporter counters CSV (-f): what is accepted and how bad lines are reported."""

from __future__ import annotations

import pytest

from exporter.fields.counters import CountersError, load_counters, parse_counters
from tests.support.reference import every_line_enabled, listed_fields, reference_file

pytestmark = pytest.mark.unit


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


# --- the DCGM field catalogue and how counters-file names resolve ------------------------------------------------

# Facts from DCGM's dcgmlib/dcgm_fields.h (ids, names, deprecated aliases) and dcgmlib/src/dcgm_fields.cpp
# (value type, unit, entity level), at DCGM 72fa3fe (4.6.0), as exporter/fields/dcgm_catalogue.py holds them.
@pytest.mark.parametrize(("name", "fid", "canonical", "ftype", "unit"), [
    ("DCGM_FI_DRIVER_VERSION", 1, "DCGM_FI_SYSTEM_DRIVER_VERSION", "string", ""),
    ("DCGM_FI_DEV_SM_CLOCK", 100, "DCGM_FI_DEV_SM_CLOCK", "int64", ""),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 112, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "int64", ""),
    ("DCGM_FI_DEV_GPU_TEMP", 150, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "int64", "C"),
    ("DCGM_FI_DEV_POWER_USAGE", 155, "DCGM_FI_DEV_BOARD_POWER_WATTS", "double", "W"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "int64", "mJ"),
    ("DCGM_FI_DEV_GPU_UTIL", 203, "DCGM_FI_DEV_GPU_UTIL_RATIO", "int64", ""),
    ("DCGM_FI_DEV_GPU_UTIL_RATIO", 203, "DCGM_FI_DEV_GPU_UTIL_RATIO", "int64", ""),
    ("DCGM_FI_DEV_XID_ERRORS", 230, "DCGM_FI_DEV_XID_ERROR", "int64", ""),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449, "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", "int64", "MB/s"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001, "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "double", ""),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", 1009, "DCGM_FI_PROF_PCIE_TX_BYTES", "int64", ""),
    ("dcgm_gpu_temp", 150, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "int64", "C"),  # go-dcgm's 1.x names
    ("dcgm_fi_prof_pcie_tx_bytes", 1009, "DCGM_FI_PROF_PCIE_TX_BYTES", "int64", ""),
])
def test_catalogue_holds_dcgms_facts(name: str, fid: int, canonical: str, ftype: str, unit: str) -> None:
    from exporter.fields.catalogue import lookup

    found = lookup(name)
    assert found is not None
    assert (found.id, found.name, found.type, found.unit) == (fid, canonical, ftype, unit)


def test_catalogue_covers_dcgm_and_agrees_with_the_field_table() -> None:
    from exporter.fields import dcgm_catalogue
    from exporter.fields.catalogue import lookup
    from exporter.fields.table import FIELDS

    assert len(dcgm_catalogue.FIELDS) > 600 and len(dcgm_catalogue.OTHER_NAMES) > 300  # DCGM 4.6: 646 ids
    for field in FIELDS:  # every row we produce is a DCGM field, text fields are labels, numbers are series
        dcgm = lookup(field.name)
        assert dcgm is not None, field.name
        assert (dcgm.type == "string") == field.is_label, field.name
        assert dcgm.type in ("int64", "double", "string"), field.name


def test_names_resolve_as_dcgm_exporter_resolves_them() -> None:
    text = """DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, DCGM 4.6 name
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, deprecated alias
dcgm_gpu_temp, gauge, 1.x name
DCGM_EXP_XID_ERRORS_COUNT, counter, exporter counter
"""
    counters = parse_counters(text, "names.csv")
    assert [(c.name, c.field.name if c.field else None) for c in counters] == [
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_GPU_UTIL"),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"),
        ("dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP"),  # the series is named as the file writes it
        ("DCGM_EXP_XID_ERRORS_COUNT", None),
    ]
    assert counters[3].windowed and counters[3].unsupported is None


def test_unsupported_dcgm_field_is_warned_once_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    text = """DCGM_FI_DEV_GPU_UTIL, gauge, util
DCGM_FI_DEV_NVSWITCH_TEMPERATURE_LIMIT_SLOWDOWN, gauge, NVSwitch
DCGM_FI_DEV_CPU_UTIL_TOTAL, gauge, Grace
DCGM_EXP_GPU_HEALTH_STATUS, counter, health
DCGM_FI_DEV_GPU_UTIL, gauge, listed again
"""
    with caplog.at_level("WARNING", logger="exporter.counters"):
        counters = parse_counters(text, "mixed.csv")
    assert [(c.name, c.unsupported is not None) for c in counters] == [
        ("DCGM_FI_DEV_GPU_UTIL", False), ("DCGM_FI_DEV_NVSWITCH_TEMPERATURE_LIMIT_SLOWDOWN", True),
        ("DCGM_FI_DEV_CPU_UTIL_TOTAL", True), ("DCGM_EXP_GPU_HEALTH_STATUS", True)]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 4  # three unsupported fields and the repeated line, each once
    assert warnings[0].startswith(
        "mixed.csv:2: DCGM_FI_DEV_NVSWITCH_TEMPERATURE_LIMIT_SLOWDOWN is not produced by this exporter (")
    assert "NVSwitch" in warnings[0] and "Grace CPU" in warnings[1] and "health-watch" in warnings[2]
    assert warnings[3] == "mixed.csv:5: DCGM_FI_DEV_GPU_UTIL is listed again (first on line 1); this line is ignored"


def test_a_file_of_only_unsupported_fields_is_an_error() -> None:
    with pytest.raises(CountersError, match="no metric fields listed that this exporter produces"):
        parse_counters("DCGM_FI_DEV_CPU_UTIL_TOTAL, gauge, Grace\n", "cpu.csv")


# --- dcgm-exporter's own files and the GPU Operator's (../shared/reference, never copied here) ---------------------

@pytest.mark.parametrize("name", ["default-counters.csv", "dcp-metrics-included.csv", "1.x-compatibility-metrics.csv"])
@pytest.mark.parametrize("enable_all", [False, True])
def test_reference_counters_files_load(name: str, enable_all: bool) -> None:
    text = reference_file(name).read_text()
    if enable_all:
        text = every_line_enabled(text)
    counters = parse_counters(text, name)
    assert {c.name for c in counters} == {name for name, _ in listed_fields(text)}
    for counter in counters:  # each is produced, or a windowed exporter counter, or unsupported with a reason
        assert (counter.field is not None) + counter.windowed + bool(counter.unsupported) == 1, counter
