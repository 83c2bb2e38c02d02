"""End-to-end reaction benchmark: seconds from the load step to the HPA's scale-up decision in the closed-loop demo.

Runs ``gpu-loadtest demo --quick`` (``python -m loadtest demo``: inference replicas -> simulated GPUs -> exporter ->
Prometheus -> adapter -> HPA loop) ``--runs`` times and reads each run's ``--summary`` JSON: ``scale_up_seconds``
(load step to the first scale-up decision), ``collect_interval_ms``, ``scrape_interval_seconds`` and
``sync_period_seconds``. The floor, from the same run's own settings, is collection interval + scrape interval +
HPA sync period: the worst case of the three waits a new value goes through (sampled by the exporter, scraped by
Prometheus, read at the next HPA sync). Printed: reaction, floor and their ratio (goal: reaction <= 1.2 x floor);
timings are never asserted.

By default the load is a step (no ramp) so "the load step" is one instant, coming a fraction of the sync period later
in each run so that the runs sample the step's phase against the HPA's fixed sync schedule; ``--profile`` sets one
profile for every run, ``--demo-profile`` keeps the demo's own (its ramp then counts in the reaction). The demo's
replicas report GPU utilisation as their busy share of the last ``busy_window_seconds`` (2 s), so a step shows in
the metric over that window too: listed, but not part of the floor. ``--summary FILE`` (repeatable) reads existing
summaries instead of running.

Usage: ``python bench/e2e_reaction.py [--quick] [--runs 3] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from exporter_scrape import exit_on_sigterm, finish, machine_line  # noqa: E402

from loadtest.loadgen.profile import parse_duration  # noqa: E402

GOALS = "goal: load step -> scale-up decision within 1.2x (collection interval + scrape interval + HPA sync period)"
# 8 requests/s for LEAD seconds, then 55 at once for 25 s (one replica is overloaded), then 8 again.
STEP_PROFILE = "{lead}s:8,25s:55,15s:8"
REQUIRED = ("scale_up_seconds", "sync_period_seconds", "collect_interval_ms", "scrape_interval_seconds")


def floor_of(summary: dict[str, Any]) -> dict[str, float]:
    """The floor and its parts, in seconds, from a summary's own settings."""
    missing = [k for k in REQUIRED[1:] if summary.get(k) is None]
    if missing:
        raise ValueError(f"summary lacks {', '.join(missing)}")
    parts = {"collect_s": float(summary["collect_interval_ms"]) / 1000.0,
             "scrape_s": float(summary["scrape_interval_seconds"]),
             "sync_s": float(summary["sync_period_seconds"])}
    return parts | {"floor_s": sum(parts.values())}


def evaluate(summary: dict[str, Any], source: str) -> dict[str, Any]:
    row: dict[str, Any] = {"source": source, **floor_of(summary)}
    up = summary.get("scale_up_seconds")
    row |= {"scale_up_s": up, "ratio": None if up is None else float(up) / row["floor_s"],
            "busy_window_s": summary.get("busy_window_seconds"), "profile": summary.get("profile"),
            "relist_s": summary.get("relist_interval_seconds"), "peak_replicas": summary.get("peak_replicas"),
            "initial_replicas": summary.get("initial_replicas"),
            "first_scale_up": next(iter(summary.get("scale_events") or []), None)}
    return row


def step_profile(args: argparse.Namespace, i: int) -> str:
    """Run ``i``'s profile: the step comes a further sync period / runs later each run, so the runs together sample
    where in the HPA's sync period the step falls (one run alone measures one such phase, every time the same)."""
    if args.profile:
        return str(args.profile)
    sync_s = parse_duration(args.sync_period) if args.sync_period else (3.0 if args.quick_demo else 15.0)
    return STEP_PROFILE.format(lead=f"{5.0 + (i - 1) * sync_s / max(args.runs, 1):.4g}")


def run_demo(args: argparse.Namespace, workdir: Path, i: int) -> dict[str, Any]:
    summary = workdir / f"summary-{i}.json"
    cmd = [sys.executable, "-m", "loadtest", "demo", "--summary", str(summary), "--plot", str(workdir / f"{i}.png")]
    if args.quick_demo:
        cmd.append("--quick")
    if not args.demo_profile:
        cmd += ["--profile", step_profile(args, i)]
    if args.sync_period:
        cmd += ["--sync-period", args.sync_period]
    log = workdir / f"demo-{i}.log"
    t0 = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            code = -1
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            raise
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    if not summary.exists():
        raise RuntimeError(f"demo run {i} wrote no summary (exit {code}):\n{tail}")
    doc = json.loads(summary.read_text())
    if code != 0:
        print(f"note: demo run {i} exited {code}; its summary is used as written:\n{tail}", file=sys.stderr)
    return doc | {"_wall_s": time.monotonic() - t0}


def fmt(x: float | None, spec: str = "{:.2f}") -> str:
    return "-" if x is None else spec.format(x)


def report(rows: list[dict[str, Any]]) -> None:
    head = ["run", "scale-up s", "collect s", "scrape s", "sync s", "floor s", "ratio", "busy window s", "replicas",
            "first decision"]
    table = []
    for r in rows:
        ev = r["first_scale_up"]
        table.append([r["source"], fmt(r["scale_up_s"]), fmt(r["collect_s"]), fmt(r["scrape_s"]), fmt(r["sync_s"]),
                      fmt(r["floor_s"]), fmt(r["ratio"], "{:.2f}x"), fmt(r["busy_window_s"], "{:g}"),
                      f"{r['initial_replicas']} -> {r['peak_replicas']}",
                      f"{ev['from']} -> {ev['to']} at metric {ev['metric']}" if ev else "-"])
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(head)]
    print("\n" + "  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for t in table:
        print("  ".join(c.rjust(w) for c, w in zip(t, widths, strict=True)))
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    if ratios:
        ups = sorted(r["scale_up_s"] for r in rows if r["scale_up_s"] is not None)
        print(f"\nscale-up: min {ups[0]:.2f}s, median {ups[len(ups) // 2]:.2f}s, max {ups[-1]:.2f}s over "
              f"{len(ups)} run(s); ratio to the floor: max {max(ratios):.2f}x")
    missing = [r["source"] for r in rows if r["ratio"] is None]
    if missing:
        print(f"note: no scale-up decision after the load step in {', '.join(missing)}")
    print("profiles: " + ", ".join(sorted({str(r["profile"]) for r in rows})))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--runs", type=int, default=3, help="demo runs (default 3; each about a minute with --quick)")
    p.add_argument("--quick", action="store_true", help="one run")
    p.add_argument("--full-demo", dest="quick_demo", action="store_false",
                   help="the demo's default settings (15 s HPA sync, about 3 minutes) instead of --quick's (3 s)")
    p.add_argument("--profile", default=None, help="load profile passed to every run (default a step, "
                                                   f"{STEP_PROFILE.format(lead='LEAD')}, LEAD from 5 s on, a "
                                                   "sync period / runs later each run)")
    p.add_argument("--demo-profile", action="store_true", help="keep the demo's own profile (with its ramp)")
    p.add_argument("--sync-period", default=None, help="HPA sync period passed to the demo (e.g. 15s)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per demo run")
    p.add_argument("--summary", type=Path, action="append", default=[], metavar="FILE",
                   help="evaluate this existing demo summary instead of running the demo (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep the demo's summaries, plots and logs (path printed)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.runs = 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    exit_on_sigterm()
    header = [machine_line(), GOALS]
    if args.summary:
        header.append(f"summaries: {', '.join(map(str, args.summary))}")
    else:
        profile = "(the demo's own)" if args.demo_profile else (args.profile or STEP_PROFILE.format(lead="LEAD") +
                                                                               " (LEAD varies per run)")
        header.append(f"demo: gpu-loadtest demo{' --quick' if args.quick_demo else ''} x{args.runs}, profile "
                      f"{profile}"
                      f"{', sync period ' + args.sync_period if args.sync_period else ''}")
    print("\n".join(header), flush=True)
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    try:
        for path in args.summary:
            rows.append(evaluate(json.loads(path.read_text()), path.name))
        for i in range(0 if args.summary else args.runs):
            print(f"... demo run {i + 1}/{args.runs}", flush=True)
            doc = run_demo(args, workdir, i + 1)
            rows.append(evaluate(doc, f"run {i + 1}"))
            print(f"... run {i + 1}: scale-up {fmt(rows[-1]['scale_up_s'])}s (demo {doc['_wall_s']:.0f}s)", flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if args.keep:
            print(f"demo outputs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if rows:
        report(rows)
    finish(args, header[0], GOALS, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
