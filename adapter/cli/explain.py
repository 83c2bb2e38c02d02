"""``gpu-adapter explain``: how one metric request is answered, step by step, against a live Prometheus."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import sys
from typing import Annotated

import typer

from adapter.api.status import ApiError
from adapter.cli import values
from adapter.cli.flags import UsageError
from adapter.cli.serve import object_resolver
from adapter.kube.config import load_api_client
from adapter.provider.explain import explain_live, query_selectors, render_text
from clikit.flags import Options

PATH = inspect.Parameter("path", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[str, typer.Argument(
    help="API path, e.g. /apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL or "
         "/apis/metrics.k8s.io/v1beta1/nodes (a ?labelSelector=... query works too).")])
"""The command's one argument."""


def explain(options: Options) -> None:
    """Show how a metric request is answered: rule, rendered PromQL, Prometheus' raw samples, objects, items."""
    from rich.console import Console

    if options.output not in ("text", "json"):
        raise UsageError(f"--output {options.output!r}: expected text or json")
    logging.getLogger("adapter").setLevel(logging.CRITICAL)  # a failure is reported once, as the error line
    prom = values.prometheus_config(options)
    in_path = query_selectors(options.path)
    selectors = (options.label_selector if options.label_selector is not None else in_path[0],
                 options.metric_label_selector if options.metric_label_selector is not None else in_path[1])
    max_age_s = values.duration(options.metrics_max_age, "--metrics-max-age")
    resolver = object_resolver(load_api_client(options.kubeconfig), options.standalone_objects)
    try:
        report = asyncio.run(explain_live(prom, values.rules(options.config), options.path, *selectors,
                                          max_age_s=max_age_s, resolver=resolver))
    except ApiError as exc:
        print(f"gpu-adapter: error: {exc.code} {exc.body()['reason']}: {exc.message}", file=sys.stderr)
        raise typer.Exit(1) from None
    finally:
        close = getattr(resolver, "close", None)
        if close is not None:
            close()
    if options.output == "json":
        print(json.dumps(report, indent=2))
    else:
        render_text(Console(highlight=False, soft_wrap=True), report)
