"""``gpu-adapter``: ``serve`` the metrics APIs, ``check`` what the rules yield, ``explain`` one request, and
``check-install`` an installation from inside the cluster (the chart's ``helm test``)."""

from __future__ import annotations

import typer

import clikit
from adapter.auth.stack import AuthSetupError
from adapter.cli import flags
from adapter.cli.check import check
from adapter.cli.explain import PATH, explain
from adapter.cli.flags import UsageError
from adapter.cli.install_check import check_install
from adapter.cli.serve import serve
from adapter.cli.upstream import UpstreamFlagError, translate
from adapter.kube.config import KubeConfigError
from adapter.rules import RulesError
from clikit.flags import command

app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True,
                  help="Kubernetes custom metrics API for GPU workloads, answered from Prometheus.")

command(app, "serve", flags.SERVE)(serve)
command(app, "check", flags.CHECK)(check)
command(app, "explain", flags.EXPLAIN, argument=PATH)(explain)
command(app, "check-install", flags.CHECK_INSTALL)(check_install)  # the chart's `helm test`

EXPECTED = (UsageError, RulesError, KubeConfigError, AuthSetupError, UpstreamFlagError)


def main(argv: list[str] | None = None) -> None:
    """Usage and configuration errors are one line on stderr, never a traceback."""
    clikit.run(app, "gpu-adapter", argv, EXPECTED, prepare=_upstream_spellings)


def _upstream_spellings(args: list[str]) -> list[str]:
    """``serve`` takes prometheus-adapter's command line as written (adapter.cli.upstream)."""
    return ["serve", *translate(args[1:])] if args[:1] == ["serve"] else args
