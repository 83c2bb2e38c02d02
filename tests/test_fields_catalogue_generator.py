"""scripts/gen-dcgm-fields.py: how it reads DCGM's header and field table (small excerpts in DCGM's own shapes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_script as load_repo_script

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gen-dcgm-fields.py"

HEADER = """
/**
 * GPU utilization
 */
#define DCGM_FI_DEV_GPU_UTIL_RATIO 203

/**
 * First field id of ConnectX
 */
#define DCGM_FI_DEV_FIRST_CONNECTX_FIELD_ID 1300
#define DCGM_FI_DEV_CONNECTX_HEALTH 1300
#define DCGM_FI_DEV_CONNECTX_DEVICE_TEMPERATURE 1310

/**
 * Deprecated: Use DCGM_FI_DEV_CONNECTX_DEVICE_TEMPERATURE instead.
 */
#define DCGM_FI_DEV_CONNECTX_TEMP DCGM_FI_DEV_CONNECTX_DEVICE_TEMPERATURE

#define DCGM_FI_PROF_NVDEC_UTIL_0_RATIO 1040
#define DCGM_FI_PROF_NVDEC_UTIL_1_RATIO 1041
#define DCGM_FI_PROF_NVLINK_THROUGHPUT_FIRST DCGM_FI_PROF_NVDEC_UTIL_0_RATIO
#define DCGM_FI_MAX_FIELDS (DCGM_FI_PROF_NVDEC_UTIL_1_RATIO + 1)

#if DCGM_DEPRECATED
#define DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_GPU_UTIL_RATIO // 203
#define DCGM_FI_DEV_GPU_UTIL_OLDEST DCGM_FI_DEV_GPU_UTIL
#endif
"""

TABLE = """
    DcgmFieldsPopulateOneFieldWithFormatting(DCGM_FI_DEV_GPU_UTIL_RATIO,
                                             DCGM_FT_INT64,
                                             8,
                                             "gpu_utilization",
                                             DCGM_FS_DEVICE,
                                             0,
                                             "GPUTL",
                                             "",
                                             DCGM_FE_GPU,
                                             getWidthForEnum(DCGM_FIELD_WIDTH_10));
    DcgmFieldsPopulateOneFieldWithFormatting(DCGM_FI_DEV_CONNECTX_DEVICE_TEMPERATURE,
                                             DCGM_FT_INT64,
                                             8,
                                             "connectx_temp",
                                             DCGM_FS_DEVICE,
                                             0,
                                             "CXTEMP",
                                             (char *)getTextForEnum(DCGM_FIELD_UNIT_TEMP_C),
                                             DCGM_FE_CONNECTX,
                                             getWidthForEnum(DCGM_FIELD_WIDTH_5));
    for (unsigned int fieldId = DCGM_FI_PROF_NVDEC_UTIL_0_RATIO; fieldId <= DCGM_FI_PROF_NVDEC_UTIL_1_RATIO; fieldId++)
    {
        DcgmFieldsPopulateOneFieldWithFormatting(fieldId,
                                                 DCGM_FT_DOUBLE,
                                                 0,
                                                 tag.c_str(),
                                                 DCGM_FS_DEVICE,
                                                 0,
                                                 shortTag.c_str(),
                                                 "",
                                                 DCGM_FE_GPU,
                                                 getWidthForEnum(DCGM_FIELD_WIDTH_5));
    }
"""


def load_script() -> ModuleType:
    return load_repo_script("scripts/gen-dcgm-fields.py", "gen_dcgm_fields")


def test_header_names_ids_and_deprecated_aliases() -> None:
    gen = load_script()
    ids, aliases = gen.parse_header(HEADER)
    assert ids["DCGM_FI_DEV_GPU_UTIL_RATIO"] == 203
    assert ids["DCGM_FI_DEV_FIRST_CONNECTX_FIELD_ID"] == 1300 and "DCGM_FI_MAX_FIELDS" not in ids
    # old names: inside the DCGM_DEPRECATED block (also an alias of an alias) or after a "Deprecated:" comment;
    # a range sentinel outside both is not a field name
    assert aliases == {"DCGM_FI_DEV_GPU_UTIL": 203, "DCGM_FI_DEV_GPU_UTIL_OLDEST": 203,
                       "DCGM_FI_DEV_CONNECTX_TEMP": 1310}


def test_table_types_units_entities_and_loops() -> None:
    gen = load_script()
    ids, _ = gen.parse_header(HEADER)
    meta = gen.parse_table(TABLE, ids)
    assert meta[203] == ("int64", "", "gpu")
    assert meta[1310] == ("int64", "C", "connectx")
    assert meta[1040] == meta[1041] == ("double", "", "gpu")


@pytest.mark.e2e
def test_generated_module_is_importable_python(tmp_path: Path) -> None:
    header, table, legacy = tmp_path / "h", tmp_path / "cpp", tmp_path / "legacy.csv"
    header.write_text(HEADER)
    table.write_text(TABLE)
    legacy.write_text("name,id\ndcgm_gpu_utilization,203\n")
    out = subprocess.run([sys.executable, str(SCRIPT), str(header), str(table), "--legacy", str(legacy),
                          "--source", "test excerpts"], capture_output=True, text=True, check=True).stdout
    namespace: dict[str, object] = {}
    exec(compile(out, "generated", "exec"), namespace)
    assert namespace["FIELDS"] == {  # one canonical name per id: the sentinel sharing 1300 becomes another name
        203: ("DCGM_FI_DEV_GPU_UTIL_RATIO", "int64", "", "gpu"),
        1040: ("DCGM_FI_PROF_NVDEC_UTIL_0_RATIO", "double", "", "gpu"),
        1041: ("DCGM_FI_PROF_NVDEC_UTIL_1_RATIO", "double", "", "gpu"),
        1300: ("DCGM_FI_DEV_CONNECTX_HEALTH", "unknown", "", ""),
        1310: ("DCGM_FI_DEV_CONNECTX_DEVICE_TEMPERATURE", "int64", "C", "connectx"),
    }
    assert namespace["OTHER_NAMES"]["DCGM_FI_DEV_FIRST_CONNECTX_FIELD_ID"] == 1300  # type: ignore[index]
    assert namespace["LEGACY_NAMES"] == {"dcgm_gpu_utilization": 203}
    assert "Generated by scripts/gen-dcgm-fields.py from test excerpts" in out
