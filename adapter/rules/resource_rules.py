"""``resourceRules``: prometheus-adapter's section for ``metrics.k8s.io`` (cpu and memory of pods and nodes), parsed
strictly and rendered to PromQL (pure).

Each of ``cpu`` and ``memory`` has a ``containerQuery`` (grouped by the pod's labels plus ``containerLabel``), a
``nodeQuery`` (grouped by the node label) and a ``resources`` mapping that names the ``pod``, ``namespace`` and
``node`` labels; ``window`` is what the API reports as the samples' window (prometheus-adapter's
pkg/config ResourceRules; its pkg/resourceprovider builds the queries the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from adapter.rules.errors import QueryError, RulesError
from adapter.rules.mapping import ResourceMapping
from adapter.rules.promql import PromQLError, matcher, one_of
from adapter.rules.queryargs import QUERY_TEMPLATE_FIELDS, QueryArgs, regex_values, render_query
from adapter.rules.resources import GroupResource
from adapter.rules.template import Template
from clikit.durations import DurationError, parse_prometheus_duration

RESOURCE_RULES_KEYS = ("cpu", "memory", "window")
_RULE_KEYS = ("containerQuery", "nodeQuery", "resources", "containerLabel")

POD = GroupResource("", "pods")
NODE = GroupResource("", "nodes")
NAMESPACE = GroupResource("", "namespaces")


@dataclass(frozen=True)
class ResourceQuery:
    """One of ``cpu``/``memory``. ``where`` is e.g. ``resourceRules.cpu`` (for messages)."""

    where: str
    container_query: Template
    node_query: Template
    resources: ResourceMapping
    container_label: str

    def label(self, gr: GroupResource) -> str:
        found = self.resources.label_for_resource(gr)
        if found is None:
            raise QueryError(f"{self.where}.resources names no label for {gr}")
        return found

    def render_pods(self, namespace: str | None, names: Sequence[str] | None) -> str:
        """Pods ``names`` (None: every pod with series) in ``namespace`` (None: all namespaces), by container."""
        pod = self.label(POD)
        matchers, values = [], {}
        try:
            if namespace is not None:
                ns = self.label(NAMESPACE)
                matchers.append(matcher(ns, "=", namespace))
                values[ns] = regex_values([namespace])
            matchers.append(one_of(pod, names) if names is not None else matcher(pod, "!=", ""))
        except PromQLError as exc:
            raise QueryError(str(exc)) from None
        values[pod] = regex_values(names) if names is not None else ".+"
        group_by: tuple[str, ...] = (pod, self.container_label)
        if namespace is None:
            group_by = (self.label(NAMESPACE), *group_by)
        return render_query(self.container_query, QueryArgs("", tuple(matchers), group_by, values))

    def render_nodes(self, names: Sequence[str] | None) -> str:
        node = self.label(NODE)
        try:
            matchers = (one_of(node, names) if names is not None else matcher(node, "!=", ""),)
        except PromQLError as exc:
            raise QueryError(str(exc)) from None
        values = {node: regex_values(names) if names is not None else ".+"}
        return render_query(self.node_query, QueryArgs("", matchers, (node,), values))


@dataclass(frozen=True)
class ResourceRules:
    cpu: ResourceQuery
    memory: ResourceQuery
    window_s: float


def parse_resource_rules(raw: object, parser: _ParserLike) -> ResourceRules | None:
    """The ``resourceRules`` section via the rules-file parser's helpers (its strictness and messages)."""
    if raw is None:
        return None
    data = parser.mapping(raw, "resourceRules", RESOURCE_RULES_KEYS)
    window_text = parser.string(data.get("window"), "resourceRules.window", required=True)
    try:
        window_s = parse_prometheus_duration(window_text)
    except DurationError as exc:
        raise parser.fail("resourceRules.window", str(exc)) from None
    return ResourceRules(_rule(data.get("cpu"), "resourceRules.cpu", parser),
                         _rule(data.get("memory"), "resourceRules.memory", parser), window_s)


def _rule(raw: object, where: str, parser: _ParserLike) -> ResourceQuery:
    if raw is None:
        raise parser.fail(where, "is required")
    data = parser.mapping(raw, where, _RULE_KEYS)
    rule = ResourceQuery(
        where=where,
        container_query=parser.template(data.get("containerQuery"), f"{where}.containerQuery", QUERY_TEMPLATE_FIELDS),
        node_query=parser.template(data.get("nodeQuery"), f"{where}.nodeQuery", QUERY_TEMPLATE_FIELDS),
        resources=parser.resources(data.get("resources"), f"{where}.resources"),
        container_label=parser.label(data.get("containerLabel"), f"{where}.containerLabel"),
    )
    for gr in (POD, NAMESPACE, NODE):
        if rule.resources.label_for_resource(gr) is None:
            raise parser.fail(f"{where}.resources", f"must name a label for {gr.resource} (an override or template)")
    for field, render in (("containerQuery", lambda: rule.render_pods("ns", ["a", "b"])),
                          ("containerQuery", lambda: rule.render_pods(None, None)),
                          ("nodeQuery", lambda: rule.render_nodes(["n1", "n2"]))):
        try:
            render()
        except QueryError as exc:
            raise parser.fail(f"{where}.{field}", f"renders invalid PromQL: {exc}") from None
    return rule


class _ParserLike(Protocol):  # the helpers of adapter.rules.config._Parser this module uses (typing only)
    fail: Callable[[str, str], RulesError]
    mapping: Callable[..., dict]
    string: Callable[..., str]
    template: Callable[..., Template]
    resources: Callable[[object, str], ResourceMapping]
    label: Callable[[object, str], str]
