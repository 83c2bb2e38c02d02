"""Live progress of a run: a rich table redrawn in place on a terminal, plain periodic lines otherwise (CI logs)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

__all__ = ["Progress", "Snapshot"]


@dataclass(frozen=True)
class Snapshot:
    """The state at ``t`` seconds; rates and latencies are those of the last complete second."""

    t: float
    duration: float  # infinite while unknown (a closed loop that ends by iterations)
    phase: str
    target_rps: float | None  # None: no target rate (a closed loop without a throughput cap)
    sent: int
    ok: int
    errors_total: int
    dropped_total: int
    p50_ms: float | None
    p95_ms: float | None
    gpu_util: float | None = None
    hpa_metric: float | None = None
    metric_target: float | None = None
    current: int | None = None
    desired: int | None = None
    last_decision: str = ""
    waiting: float | None = None  # requests queued per ready replica (demo)
    hpa_waiting: float | None = None
    waiting_target: float | None = None
    held: int | None = None  # requests waiting at the gateway (scale-to-zero demo)
    seen: tuple[tuple[str, float | None, float | None], ...] = ()  # (label, value the HPA read, Value target)
    users: int | None = None  # closed loop: virtual users running, and planned
    target_users: int | None = None

    def hpa_sees(self, sep: str = "/") -> str:
        """What the HPA last read against its target(s): the GPU metric, the queue, or both; ``seen`` instead
        when given."""
        if self.seen:
            return ", ".join(f"{label} {_num(value, digits=1)}" + ("" if target is None else f"{sep}{target:g}")
                             for label, value, target in self.seen)
        parts = []
        if self.metric_target is not None or self.waiting_target is None:
            parts.append(_num(self.hpa_metric, digits=1) + ("" if self.metric_target is None
                                                            else f"{sep}{self.metric_target:g}"))
        if self.waiting_target is not None:
            parts.append(f"queue {_num(self.hpa_waiting, digits=1)}{sep}{self.waiting_target:g}")
        return ", ".join(parts)


def _num(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if math.isfinite(value) else "?"


class Progress:
    """Use as a context manager; call :meth:`update` about once a second and :meth:`event` for decisions."""

    def __init__(self, console: Console | None = None, *, title: str = "gpu-loadtest",
                 plain_every_s: float = 5.0) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.title = title
        self.plain_every_s = plain_every_s
        self.interactive = self.console.is_terminal
        self._live: Live | None = None
        self._last_plain: float | None = None
        self._events: list[str] = []

    def __enter__(self) -> Progress:
        if self.interactive:
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def event(self, text: str) -> None:
        self._events = [*self._events[-3:], text]
        if self._live is not None:
            self._live.console.print(text, markup=False, soft_wrap=True)
        else:
            self.console.print(text, markup=False, soft_wrap=True)

    def update(self, s: Snapshot) -> None:
        if self._live is not None:
            self._live.update(self._table(s), refresh=True)
            return
        if self._last_plain is None or s.t - self._last_plain >= self.plain_every_s:
            self._last_plain = s.t
            self.console.print(self.line(s), markup=False, soft_wrap=True)

    @staticmethod
    def line(s: Snapshot) -> str:
        waiting = "" if s.waiting is None else f" waiting {_num(s.waiting, digits=1)}"
        if s.held is not None:
            waiting += f" held at the gateway {s.held}"
        users = "" if s.users is None else f"users {s.users}/{_count(s.target_users)} "
        return (f"[{s.t:5.0f}s/{_seconds(s.duration)}] {s.phase:<9} {users}rate {s.sent}/{_rate(s.target_rps)} rps "
                f"ok {s.ok} p50 {_num(s.p50_ms, 'ms')} p95 {_num(s.p95_ms, 'ms')} | "
                f"GPU {_num(s.gpu_util, '%')}{waiting} HPA sees {s.hpa_sees()} | "
                f"replicas {_count(s.current)} (desired {_count(s.desired)}) | "
                f"errors {s.errors_total} dropped {s.dropped_total}")

    def _table(self, s: Snapshot) -> Group:
        table = Table(title=f"{self.title}  {s.t:.0f}s / {_seconds(s.duration)}  ({s.phase})", title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False)
        columns = ["sent/target", "ok", "p50", "p95", "GPU", "waiting", "HPA sees", "replicas", "errors", "dropped"]
        cells = [f"{s.sent}/{_rate(s.target_rps)}", str(s.ok), _num(s.p50_ms, " ms"), _num(s.p95_ms, " ms"),
                 _num(s.gpu_util, " %"), _num(s.waiting, digits=1), s.hpa_sees(" / "),
                 f"{_count(s.current)} ({_count(s.desired)})", str(s.errors_total), str(s.dropped_total)]
        if s.held is not None:
            columns.insert(6, "held")
            cells.insert(6, str(s.held))
        if s.users is not None:
            columns.insert(0, "users")
            cells.insert(0, f"{s.users}/{_count(s.target_users)}")
        for column in columns:
            table.add_column(column, justify="right", no_wrap=True)
        table.add_row(*cells)
        last = Text(f"replicas: current (desired); last decision: {s.last_decision or '-'}", style="dim")
        return Group(table, last)
