"""pyproject's lower bounds are true: what the code calls exists in the installed versions.

CI runs the suite a second time with every direct dependency at its lowest allowed version (`make test-lowest`),
so these checks, like every other test in that run, hold at the floors, not just at the newest releases.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pynvml
import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
# Every NVML symbol the exporter reaches goes through the module object, bound to ``nv`` (the backend's
# DeviceContext.nv and its helpers' parameter): ``nv.nvmlDeviceGetX``, ``nv.NVML_FI_Y``.
_NVML_CALL = re.compile(r"\bnv\.(nvml[A-Z]\w*|NVML_\w+)\b")


def _nvml_names() -> set[str]:
    names: set[str] = set()
    for source in (ROOT / "exporter").rglob("*.py"):
        names |= set(_NVML_CALL.findall(source.read_text()))
    return names


def test_the_exporter_calls_nvml_through_the_names_this_check_reads() -> None:
    names = _nvml_names()
    assert {"nvmlInit", "nvmlDeviceGetFieldValues", "nvmlDeviceGetTemperatureV"} <= names


def test_every_nvml_name_the_exporter_uses_exists_in_the_installed_nvidia_ml_py() -> None:
    missing = sorted(name for name in _nvml_names() if not hasattr(pynvml, name))
    assert not missing, (f"nvidia-ml-py {version('nvidia-ml-py')} lacks {missing}: raise the floor in pyproject.toml")


def _floors() -> dict[str, str]:
    """Each dependency's lower bound as pyproject.toml states it (the file, not an installed copy's metadata)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {}
    for line in [*project["dependencies"], *(d for extra in project["optional-dependencies"].values() for d in extra)]:
        match = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*>=\s*([0-9][^,;\s]*)", line)
        if match:
            floors[match.group(1).lower().replace("_", "-")] = match.group(2)
    return floors


# Measured with uv's lowest-direct resolution: below these the code fails (docs/development.md, "make test-lowest").
FIRST_WORKING = {
    "uvicorn": (0, 47),  # uvicorn.Config(ssl_context_factory=...)
    "nvidia-ml-py": (12, 570),  # nvmlDeviceGetTemperatureV
    "prometheus-client": (0, 23),  # exposition.CONTENT_TYPE_PLAIN_0_0_4 (0.23.0 lacks its packaging dependency)
    "typer": (0, 28),  # typer.TyperException
    "kubernetes": (37, 0),  # older clients hang the first watch-backed selector request
    "promql-parser": (0, 9),  # promql_parser.walk (tests); string escapes decoded in matcher values (0.7)
    "pytest-xdist": (3, 8),  # --no-loadscope-reorder (the Makefile's test lanes keep the longest files first)
}


@pytest.mark.parametrize("package", sorted(FIRST_WORKING))
def test_a_floor_never_drops_below_the_first_version_the_code_works_with(package: str) -> None:
    major, _, rest = _floors()[package].partition(".")
    floor = (int(major), int(rest.split(".")[0] or 0))
    assert floor >= FIRST_WORKING[package]
