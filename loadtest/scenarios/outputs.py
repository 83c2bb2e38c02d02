"""What a scenario writes and returns, the same for the demo, ``gpu-loadtest run`` and each run of a comparison: the
files asked for (the plot, the summary JSON, the per-second CSV) and the result (summary, timeline, HPA syncs, and how
the run ended)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loadtest.hpa.record import SyncRecord
from loadtest.measure.summary import Summary
from loadtest.measure.timeline import TimelineRow, write_csv
from loadtest.standins.statefiles import atomic_write_json

__all__ = ["Outputs", "RunResult", "cancelled", "write_outputs"]


@dataclass(frozen=True)
class Outputs:
    """Where to write the run's PNG, its summary and its timeline (``None``: not asked for)."""

    plot: Path | None = None
    summary: Path | None = None
    csv: Path | None = None

    def named(self, rows: Sequence[TimelineRow]) -> dict[str, str | None]:
        """The summary's ``plot`` and ``csv``: the files written, which needs a timeline."""
        return {"plot": str(self.plot) if self.plot is not None and rows else None,
                "csv": str(self.csv) if self.csv is not None and rows else None}


@dataclass
class RunResult:
    """``interrupted``: Ctrl-C or SIGTERM ended it early; ``error``: a part failed (``log_tails``: the end of the
    failing processes' logs); ``warnings``: what the run noticed on the way (a watched cluster's errors)."""

    summary: Summary
    rows: list[TimelineRow]
    syncs: list[SyncRecord]
    interrupted: bool = False
    error: str | None = None
    log_tails: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def write_outputs(outputs: Outputs, summary: Summary, rows: Sequence[TimelineRow],
                  draw: Callable[[Path], None]) -> None:
    """The CSV and the plot (``draw(path)``) when there is a timeline, then the summary JSON."""
    if outputs.csv is not None and rows:
        write_csv(rows, outputs.csv)
    if outputs.plot is not None and rows:
        draw(outputs.plot)
    if outputs.summary is not None:
        atomic_write_json(outputs.summary, summary.to_json())


async def cancelled(run: Awaitable[None]) -> bool:
    """Await ``run``; whether a cancellation (Ctrl-C, SIGTERM) ended it early. The cancellation is taken back, so the
    caller goes on to clean up and report what the run has (an interrupted run's partial summary)."""
    try:
        await run
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True
    return False
