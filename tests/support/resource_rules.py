"""A ``resourceRules`` section for tests and benchmarks: gauges per container and per node, summed by the group."""

from __future__ import annotations


def resource_rules_yaml(*, window: str, cpu: tuple[str, str], memory: tuple[str, str], node_label: str = "node",
                        container_filter: bool = True) -> str:
    """``cpu``/``memory`` are (container series, node series); the container label is ``container``."""
    extra = ',container!=""' if container_filter else ""

    def rule(container_series: str, node_series: str) -> str:
        return (
            "    containerLabel: container\n"
            f"    containerQuery: 'sum by (<<.GroupBy>>) ({container_series}{{<<.LabelMatchers>>{extra}}})'\n"
            f"    nodeQuery: 'sum by (<<.GroupBy>>) ({node_series}{{<<.LabelMatchers>>}})'\n"
            "    resources:\n      overrides:\n"
            "        namespace: {resource: namespace}\n        pod: {resource: pod}\n"
            f"        {node_label}: {{resource: node}}\n")

    return f"resourceRules:\n  window: {window}\n  cpu:\n{rule(*cpu)}  memory:\n{rule(*memory)}"
