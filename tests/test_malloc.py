"""glibc malloc settings (adapter/malloc.py): big buffers freed after a burst leave the process' RSS.

The burst mimics a relist: buffers of a few hundred KiB (answers being decoded) interleaved with small long-lived
allocations above Python's 512-byte small-object limit (what the answers leave behind). By default glibc raises
its mmap and trim thresholds each time such a buffer is freed (up to 32 and 64 MiB), so later bursts land in the
heap; both runs start from those raised thresholds (independent of what the interpreter's start-up left in the
heap), and only ``trim()`` after the burst tells them apart. Run in fresh interpreters: the settings are per process.
"""

from __future__ import annotations

import platform
import subprocess
import sys

BURST = """
import sys
import ctypes
from adapter import malloc
configured = malloc.configure() if sys.argv[1] == "on" else False
# where glibc's own adjustment takes its thresholds after big buffers come and go
mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc's; none on macOS
if mallopt is not None:
    mallopt(-3, 32 * 1024 * 1024)  # M_MMAP_THRESHOLD
    mallopt(-1, 64 * 1024 * 1024)  # M_TRIM_THRESHOLD

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

start = rss()
kept = []
for burst in range(2):
    buffers = []
    for i in range(200):
        buffers.append(bytearray(300_000))
        kept.append(bytearray(1_000))
    del buffers
    malloc.trim()  # a no-op unless configure() applied
print(configured, round(rss() - start, 1))
"""


def grown_mib(setting: str) -> tuple[bool, float]:
    out = subprocess.run([sys.executable, "-c", BURST, setting], capture_output=True, text=True, check=True)
    configured, grown = out.stdout.split()
    return configured == "True", float(grown)


def test_freed_buffers_leave_rss_with_the_settings_and_stay_without() -> None:
    configured, with_settings = grown_mib("on")
    if platform.libc_ver()[0] != "glibc":  # musl, macOS: nothing is changed, and configure says so
        assert not configured
        return
    _, without = grown_mib("off")
    assert configured
    assert with_settings < 10, with_settings  # two bursts of 60 MB, given back
    assert without > 40, without  # without trim() the bursts stay in the heap: what the settings are for
