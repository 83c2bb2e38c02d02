"""A test's child process: its output read as it comes (so a test can wait for a log line, and a chatty child
never blocks on a full pipe), and stopped the way the kubelet stops a pod: SIGTERM, then SIGKILL for its group."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from tests.support.waiting import wait_until


class Output:
    """Collects a process's combined stdout/stderr on a thread of its own."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._proc = proc
        self._lines: list[str] = []
        self._thread = threading.Thread(target=self._read, name=f"output-{proc.pid}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.append(line)

    @property
    def text(self) -> str:
        """Everything printed so far."""
        return "".join(self._lines)

    def lines_with(self, needle: str) -> list[str]:
        return [line for line in list(self._lines) if needle in line]

    def wait_for(self, needle: str, timeout: float = 20.0, count: int = 1) -> list[str]:
        """Wait until ``count`` lines containing ``needle`` were printed; return those lines."""
        def printed() -> list[str] | None:
            found = self.lines_with(needle)
            return found if len(found) >= count else None

        return wait_until(printed, timeout, f"{count} log line(s) with {needle!r}")

    def finish(self, timeout: float = 10.0) -> str:
        """Everything the process printed, once it has exited and its output is closed."""
        self._thread.join(timeout)
        return self.text


def terminate(proc: subprocess.Popen[str], timeout: float = 10.0, output: Output | None = None) -> str:
    """Stop ``proc`` (started with ``start_new_session=True``) and return everything it printed (read by
    ``output`` when one collects it)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if output is not None:
        return output.finish()
    return proc.stdout.read() if proc.stdout else ""
