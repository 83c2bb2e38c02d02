"""The scripts that run only where a GPU is lent (scripts/gpu-check.sh, scripts/gpu-pod-check.py): CI has none, so
this checks what it can without one: the shell script parses, and the pod check's imports resolve and it ends with
a FAIL line, not a traceback, when NVML cannot start."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.tools import REPO

pytestmark = pytest.mark.e2e

# NVML made to fail as on a machine without the driver, whatever this machine has; then the script as __main__.
_WITHOUT_NVML = """
import runpy, sys, pynvml
def missing(*args, **kwargs):
    raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
pynvml.nvmlInit = missing
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_gpu_check_script_parses() -> None:
    result = subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu-check.sh")], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr


def test_pod_check_without_nvml_fails_with_one_line_saying_why() -> None:
    result = subprocess.run([sys.executable, "-c", _WITHOUT_NVML, str(REPO / "scripts" / "gpu-pod-check.py")],
                            capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ("FAIL GPU 0 through NVML (this check needs an NVIDIA GPU and its driver): "
                             "NVML Shared Library Not Found\n"), result.stdout
    assert "Traceback" not in result.stderr, result.stderr
