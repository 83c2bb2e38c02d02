"""Stopping a test's child process the way the kubelet does: SIGTERM, then SIGKILL for its whole group."""

from __future__ import annotations

import os
import signal
import subprocess


def terminate(proc: subprocess.Popen[str], timeout: float = 10.0) -> str:
    """Stop ``proc`` (started with ``start_new_session=True``) and return everything it printed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.stdout.read() if proc.stdout else ""
