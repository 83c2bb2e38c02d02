"""The child-process registry: children carry the run's marker and log to files; stopping escalates to SIGKILL
for the whole process group."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import psutil
import pytest

from loadtest.standins.processes import MARKER_ENV, ChildProcesses
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("marker", os.environ["GPU_LOADTEST_RUN"], "grandchild", grandchild.pid, flush=True)
time.sleep(600)
"""


def wait_for_line(path: Path, prefix: str) -> str:
    return wait_until(lambda: next((ln for ln in path.read_text().splitlines() if ln.startswith(prefix)), None),
                      20, f"a line starting {prefix!r} in {path.name}")


def test_stop_kills_a_child_that_ignores_sigterm_and_its_group(tmp_path: Path) -> None:
    processes = ChildProcesses(tmp_path / "logs", "run-42")
    child = processes.spawn("stubborn", [sys.executable, "-c", STUBBORN])
    polite = processes.spawn("polite", [sys.executable, "-c", "import time; time.sleep(600)"])
    line = wait_for_line(tmp_path / "logs" / "stubborn.log", "marker")
    _, run_id, _, grandchild = line.split()
    assert run_id == "run-42"
    assert psutil.Process(child.pid).environ()[MARKER_ENV] == "run-42"

    codes = processes.stop_many([child, polite], grace_s=0.5)
    assert codes == {child.pid: -signal.SIGKILL, polite.pid: -signal.SIGTERM}
    assert processes.pids == [child.pid, polite.pid]
    assert not child.alive and not polite.alive

    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(lambda: gone(int(grandchild)), 10, "the grandchild gone with its group")
    processes.stop_all()  # stopping again is harmless
