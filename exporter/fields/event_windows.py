"""dcgm-exporter's windowed counts: ``DCGM_EXP_XID_ERRORS_COUNT`` and ``DCGM_EXP_CLOCK_EVENTS_COUNT``.

What dcgm-exporter does (``internal/pkg/collector/expcollector.go``, ``xid_collector.go``,
``clock_events_collector.go``): it asks DCGM for every value of a field recorded within the last window
(``-x``/``--xid-count-window-size``, ``--clock-events-count-window-size``, milliseconds, default 5 minutes) and
counts them per GPU: XIDs (``DCGM_FI_DEV_XID_ERRORS``, one value per XID event) per code, clock-event reasons
(``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``, one bitmask per sample, sampled every collect interval) once per reason
bit set. Each (GPU, value) becomes one series with ``window_size_in_ms`` and ``xid`` or ``clock_event``; a GPU
with nothing in the window gets one series of 0 with only ``window_size_in_ms``. Every entity of a GPU (each MIG
instance too) carries its GPU's counts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

CLOCK_EVENT_NAMES: dict[int, str] = {
    0x001: "gpu_idle", 0x002: "clocks_setting", 0x004: "power_cap", 0x008: "hw_slowdown", 0x010: "sync_boost",
    0x020: "sw_thermal", 0x040: "hw_thermal", 0x080: "hw_power_brake", 0x100: "display_clocks",
}
"""DCGM_CLOCKS_EVENT_REASON_* bits and the ``clock_event`` label value dcgm-exporter gives each."""


def clock_event_bits(bitmask: int) -> list[int]:
    """The known reason bits set in a clock-event bitmask (unknown bits are not counted, as in dcgm-exporter)."""
    return [bit for bit in CLOCK_EVENT_NAMES if bitmask & bit]


class EventWindow:
    """Timestamped values per GPU, counted over the last ``window_s`` seconds."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self._window_s = window_ms / 1000.0
        self._events: dict[int, deque[tuple[float, int]]] = {}

    def record(self, gpu: int, at: float, values: Iterable[int]) -> None:
        events = self._events.setdefault(gpu, deque())
        events.extend((at, value) for value in values)

    def counts(self, gpu: int, now: float) -> dict[int, int]:
        """value -> how many times it was recorded for ``gpu`` in (now - window, now]; older entries are dropped."""
        events = self._events.get(gpu)
        if not events:
            return {}
        horizon = now - self._window_s
        while events and events[0][0] <= horizon:
            events.popleft()
        counted: dict[int, int] = {}
        for _, value in events:
            counted[value] = counted.get(value, 0) + 1
        return counted
