"""What an HPA fleet sees while the adapter is upgraded, loses a replica, or a node's exporter restarts.

Two adapter replicas behind a Service stand-in (round-robin over ready endpoints, endpoint changes applied after a
propagation delay, established connections kept, as kube-proxy does), an HPA fleet asking them at the controller's
pace, Prometheus scraping a real exporter on one node and the other nodes' series: tests/support/lifecycle_scenarios.py
says exactly how. The settings are the chart's (shutdown delay 15 s, drain timeout 10 s, the exporter's 10 s
ServiceMonitor interval) and the controller's (15 s sync period, 5 workers); the propagation delay is 2 s. Beside
the HPAs, other clients ask discovery twenty times a second, each on a new connection.

Printed (never asserted), per case: requests and failed requests (the HPAs', the other clients'), and
  (a) a rolling update of both replicas (maxSurge 1, maxUnavailable 0), and the same with the adapter stopping as it
      did before (--shutdown-delay-duration=0s: the listener closes at SIGTERM), measured in the same run;
  (b) SIGKILL of one replica mid-round: what it had in flight, what the Service still sent it, whether every HPA's
      next sync succeeded;
  (c) the node's exporter restarted in place: how long its pods' series were missing, and the latest an HPA saw a
      missing pod after the exporter was back (goal: at most one scrape interval);
and the exporter's start time (to its first scrape with its pods' series), over several starts: what the
DaemonSet's probes are set from.

Usage: ``python bench/lifecycle.py [--workloads 200] [--cases a,b,c] [--no-baseline] [--exporter-starts 10]
[--quick] [--json FILE]`` (about 6 minutes; ``--quick``: the tests' compressed settings, about 1.5 minutes).
Everything shares this machine's cores with Prometheus and the clients: the counts are what to read, the times
are this machine's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter_scrape import machine_line  # noqa: E402  (bench/exporter_scrape.py)

from tests.support.lifecycle_scenarios import (  # noqa: E402
    Report,
    Settings,
    cluster,
    kill_one,
    restart_exporter,
    rolling_update,
)

CASES = {"a": rolling_update, "b": kill_one, "c": restart_exporter}


def row(report: Report) -> dict:
    return {"case": report.case, "requests": len(report.asked), "failed": len(report.failed),
            "other clients' requests": len(report.others), "other clients' failed": len(report.others_failed),
            "next sync after each failure succeeded": report.next_sync_after_each_failure_succeeded(),
            **report.notes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=200, help="HPAs (one workload of 4 pods each)")
    parser.add_argument("--cases", default="a,b,c", help="which of a, b, c to run")
    parser.add_argument("--no-baseline", action="store_true", help="skip (a) with the adapter's old stop")
    parser.add_argument("--exporter-starts", type=int, default=10, help="exporter starts to time")
    parser.add_argument("--quick", action="store_true",
                        help="the tests' compressed pace: 4 s syncs, 1 s propagation, 3 s delay, 2 s scrapes")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    settings = Settings(workloads=args.workloads)
    if args.quick:
        settings = replace(settings, sync_period_s=4, propagation_s=1, shutdown_delay_s=3, drain_timeout_s=5,
                           scrape_interval_s=2)
    print(machine_line())
    print(f"settings: {settings}")
    rows = []
    started = time.monotonic()
    with cluster(settings) as running:
        for case in args.cases.split(","):
            report = CASES[case.strip()](running)
            rows.append(row(report))
            print(report.summary(), flush=True)
        starts = list(running.exporter_start_s)
        for _ in range(args.exporter_starts):
            running.exporter.stop()
            starts.append(running.exporter.start())
    if "a" in args.cases and not args.no_baseline:
        before = replace(settings, shutdown_delay_s=0)
        with cluster(before) as running:
            report = rolling_update(running)
            report.case += ", adapter stopping as before (--shutdown-delay-duration=0s)"
            rows.append(row(report))
            print(report.summary(), flush=True)
    print(f"exporter start to its first scrape with its pods' series, {len(starts)} starts (8 GPUs, fake backend, "
          f"pods from a kubelet PodResources server): median {statistics.median(starts):.2f} s, "
          f"max {max(starts):.2f} s")
    print(f"(whole run {time.monotonic() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"settings": str(settings), "rows": rows, "exporter_start_s": starts},
                                        indent=2))


if __name__ == "__main__":
    main()
