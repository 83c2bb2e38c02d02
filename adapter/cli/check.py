"""``gpu-adapter check``: for each rule, the metrics and resources it yields from a live Prometheus."""

from __future__ import annotations

import asyncio

import typer

from adapter.cli import values
from adapter.prometheus.client import PrometheusClient
from adapter.prometheus.discovery import Discovery
from adapter.provider.resource import check_resource_rules
from clikit.flags import Options


def check(options: Options) -> None:
    """For each rule, print the metrics and resources it yields from live Prometheus; flag rules matching nothing."""
    from rich.console import Console

    prom = values.prometheus_config(options)
    rules = values.rules(options.config)
    max_age_s = values.duration(options.metrics_max_age, "--metrics-max-age")
    console = Console(highlight=False)

    async def run() -> int:
        client = PrometheusClient(prom)
        discovery = Discovery(client, lambda: rules, max_age_s=max_age_s)
        try:
            if not await discovery.relist():
                console.print(f"[red]cannot list series from {options.prometheus_url}: {discovery.last_error}[/red]")
                return 1
            resource = await check_resource_rules(client, rules.resource_rules) if rules.resource_rules else []
        finally:
            await client.aclose()
        catalogue = discovery.catalogue
        assert catalogue is not None
        empty = 0
        for section, rule_list in (("rules", rules.rules), ("externalRules", rules.external_rules)):
            for i, rule in enumerate(rule_list):
                yielded = catalogue.rule_metrics(rule)
                console.print(f"[bold]{section}[{i}][/bold] {rule.series_query}")
                if not yielded:
                    empty += 1
                    console.print("  [yellow]matches no series: this rule yields nothing[/yellow]")
                for line in yielded:
                    console.print(f"  {line}")
        for where, query, count in resource:  # resourceRules: pods (by container) and nodes with usable samples
            console.print(f"[bold]{where}[/bold] {query.strip()}")
            console.print(f"  {count} {'pods' if 'container' in where else 'nodes'} with samples" if count else
                          "  [yellow]matches no series: this query yields nothing[/yellow]")
            empty += not count
        console.print(f"{empty} rule(s) matched nothing" if empty else "every rule yields metrics")
        return 0

    code = asyncio.run(run())
    if code:
        raise typer.Exit(code)
