"""``gpu-loadtest``: ``demo`` (the closed scaling loop on this machine), ``run`` (load against any endpoint, watching
a cluster), ``capacity`` (a live cluster's scale-ups, from its records), ``replica`` (one inference stand-in). Each
command's options are a table (:mod:`clikit.flags`)."""

from __future__ import annotations

import asyncio

import typer

import clikit
from clikit.extras import MissingExtra
from clikit.flags import Flag, Options, command
from loadtest.cli.capacity import CAPACITY, capacity
from loadtest.cli.common import DemoFailed, UsageError, parse_headers
from loadtest.cli.demo import DEMO, demo
from loadtest.cli.run import RUN, run
from loadtest.hpa.watch import KubeError
from loadtest.loadgen.profile import ProfileError, parse_duration
from loadtest.loadgen.taurus.plan import TaurusFileError
from loadtest.measure.cluster.journal import JournalError
from loadtest.measure.range_data import PromRangeError
from loadtest.scenarios.capacity_options import CapacityOptionError

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True,
                  help="Load generation and the closed-loop GPU autoscaling demo.")

REPLICA = (
    Flag("--name", str, "infer-0"),
    Flag("--gpu", int, 0, range=(0, None)),
    Flag("--port", int, 0, "0: any free port (printed).", range=(0, 65535)),
    Flag("--host", str, "127.0.0.1"),
    Flag("--service-ms", float, 40.0, "GPU time per request.", range=(0.0, None)),
    Flag("--busy-window", float, 2.0, "Seconds the busy share covers.", range=(0.1, None)),
    Flag("--grace", float, 10.0, "Seconds to finish requests after SIGTERM.", range=(0.0, None)),
    Flag("--model", str, "demo-model", "The model /v1/completions serves."),
    Flag("--require-header", list[str] | None, None,
         "'Name: value' every /v1/completions request must carry (repeatable)."),
    Flag("--cold-start", str, "0s",
         "Model load time: /healthz and inference answer 503 for this long after start-up."),
)
"""``gpu-loadtest replica``'s options."""


def replica(o: Options) -> None:
    """One inference stand-in: /infer and /v1/completions hold the simulated GPU for --service-ms; /metrics (vLLM
    names), /stats, /healthz."""
    from loadtest.standins.replica import ReplicaConfig, serve

    required = tuple((name.lower(), value) for name, value in parse_headers(o.require_header or [],
                                                                             "--require-header"))
    asyncio.run(serve(ReplicaConfig(name=o.name, gpu=o.gpu, service_s=o.service_ms / 1000.0,
                                    busy_window_s=o.busy_window, host=o.host, port=o.port, grace_s=o.grace,
                                    model=o.model, required_headers=required,
                                    cold_start_s=parse_duration(o.cold_start))))


command(app, "demo", DEMO)(demo)
command(app, "run", RUN)(run)
command(app, "capacity", CAPACITY)(capacity)
command(app, "replica", REPLICA)(replica)


def main(argv: list[str] | None = None) -> None:
    """Usage and configuration errors are one line on stderr, never a traceback."""
    clikit.run(app, "gpu-loadtest", argv, (UsageError, ProfileError, KubeError, PromRangeError, DemoFailed,
                                              MissingExtra, CapacityOptionError, TaurusFileError, JournalError))
