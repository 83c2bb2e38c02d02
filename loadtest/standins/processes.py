"""Every child process a run starts, in one registry, so all of them are stopped however the run ends.

Children start in sessions of their own (a terminal's Ctrl-C reaches only the orchestrator, which then stops
them gracefully), carry an environment marker naming the run, and log to files in the run's directory.
Stopping is the kubelet's way: SIGTERM, then SIGKILL to the whole process group after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = ["MARKER_ENV", "Child", "ChildProcesses"]

MARKER_ENV = "GPU_LOADTEST_RUN"


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        if self.log_path is None:
            return ""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class ChildProcesses:
    def __init__(self, log_dir: Path, run_id: str) -> None:
        self.log_dir = log_dir
        self.run_id = run_id
        self.children: list[Child] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        """The marker every child carries."""
        return {MARKER_ENV: self.run_id}

    @property
    def pids(self) -> list[int]:
        """Every process this registry ever started or adopted."""
        return [c.pid for c in self.children]

    def spawn(self, name: str, argv: Sequence[str], *, stdout_pipe: bool = False,
              env: Mapping[str, str] | None = None) -> Child:
        """Start ``argv``; stderr (and stdout unless ``stdout_pipe``) go to ``<log_dir>/<name>.log``."""
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            stdout: int | IO[bytes] = subprocess.PIPE if stdout_pipe else log
            process = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=log, start_new_session=True,
                env={**os.environ, **(env or {}), **self.env})
        child = Child(name, process, log_path)
        self.children.append(child)
        return child

    def adopt(self, name: str, process: subprocess.Popen[bytes], log_path: Path | None = None) -> Child:
        """Track a process started elsewhere (in a session of its own) so :meth:`stop_all` stops it too."""
        child = Child(name, process, log_path)
        self.children.append(child)
        return child

    def stop(self, child: Child, grace_s: float = 5.0) -> int:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL the process group; return the exit code."""
        return self.stop_many([child], grace_s)[child.pid]

    def stop_many(self, children: Sequence[Child], grace_s: float = 5.0) -> dict[int, int]:
        """Stop several at once (one grace period for all); exit codes by pid."""
        for child in children:
            if child.alive:
                _signal_group(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(max(deadline - time.monotonic(), 0.0))
        for child in children:
            # The group too: a child's own children must not outlive it.
            _signal_group(child.pid, signal.SIGKILL)
            child.process.wait()
            if child.process.stdout is not None:
                child.process.stdout.close()
        return {c.pid: c.process.returncode for c in children}

    def stop_all(self, grace_s: float = 5.0) -> None:
        self.stop_many(self.children, grace_s)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
