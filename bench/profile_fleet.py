"""Where the adapter's CPU goes under an HPA fleet: py-spy on the adapter of ``bench/fleet.py``, folded into layers.

The fleet is bench/fleet.py's (N HPAs with a Pods and an Object metric, delegated auth, the controller's pace);
during its measured rounds py-spy samples the adapter's stacks, native frames included, and bench/pyspy.py folds
each sample into one layer by module path: TLS, HTTP parsing, auth and reviews, routing, engine, PromQL client,
JSON encoding, the event loop and the rest. With ``--before DIR`` the adapter of another checkout runs the same
fleet first, so the two columns come from one run on one machine.

Sampling stops the adapter briefly at each sample (native stacks need it): the fleet's own figures printed here
run a little slower than without the profiler; take the goals from bench/fleet.py.

Usage: ``python bench/profile_fleet.py [--workloads 1000] [--rounds 3] [--before DIR] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import print_layers, report, run_fleet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=1000, help="HPAs in the fleet (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="measured sync rounds, profiled (default 3)")
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="profile the adapter of this checkout first (e.g. a worktree of the previous commit)")
    parser.add_argument("--out", type=Path, default=Path("profile-fleet"), metavar="DIR",
                        help="where py-spy's collapsed stacks go (default ./profile-fleet)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    runs = {"before": args.before, "after": None} if args.before else {"adapter": None}
    results = {}
    for name, adapter_from in runs.items():
        print(f"... {name}: adapter from {adapter_from or Path.cwd()}", flush=True)
        with tempfile.TemporaryDirectory(prefix="fleet-profile-") as tmp:
            results[name] = asyncio.run(run_fleet(args.workloads, args.rounds, Path(tmp), adapter_from,
                                                  profile=args.out / f"{name}-{args.workloads}.txt"))
        report(results[name], layers=False)
    if any(r["layers"] is None for r in results.values()):
        print("no profile (py-spy missing or failed): see the notes above", file=sys.stderr)
        return 1
    print()
    print_layers(results)
    print(f"collapsed stacks in {args.out}/ (py-spy's raw format: flamegraph.pl or speedscope read them)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
