"""``resourceRules``: prometheus-adapter's section for ``metrics.k8s.io`` (cpu and memory of pods and nodes), parsed
strictly and rendered to PromQL (pure).

Each of ``cpu`` and ``memory`` has a ``containerQuery`` (grouped by the pod's labels plus ``containerLabel``), a
``nodeQuery`` (grouped by the node label) and a ``resources`` mapping that names the ``pod``, ``namespace`` and
``node`` labels; ``window`` is what the API reports as the samples' window (prometheus-adapter's
pkg/config ResourceRules; its pkg/resourceprovider builds the queries the same way).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from adapter.rules import schema
from adapter.rules.errors import QueryError, RulesError
from adapter.rules.freshness import all_fresh_query, lookback_s, range_series
from adapter.rules.mapping import ResourceMapping
from adapter.rules.promql import PromQLError, matcher, one_of
from adapter.rules.queryargs import QUERY_TEMPLATE_FIELDS, QueryArgs, regex_values, render_query
from adapter.rules.resources import GroupResource
from adapter.rules.shape import check_query
from adapter.rules.template import Template
from clikit.durations import DurationError, parse_prometheus_duration

RESOURCE_RULES_KEYS = schema.RESOURCE_RULES
_RULE_KEYS = schema.RESOURCE_RULE

POD = GroupResource("", "pods")
NODE = GroupResource("", "nodes")
NAMESPACE = GroupResource("", "namespaces")


@dataclass(frozen=True)
class Reach:
    """How far back a rendered query's samples may lie, and the series that do (``adapter.rules.freshness``)."""

    lookback_s: float = 0.0
    series: tuple[str, ...] = ()

    @classmethod
    def of(cls, promql: str) -> Reach:
        return cls(lookback_s(promql), range_series(promql))

    def freshness(self, matchers: Sequence[str], by: Sequence[str], max_age_s: float | None) -> str | None:
        """The query for the objects whose series all have a sample within the age limit, when this query can answer
        from older ones (the engine's policy for every API); None when it cannot, or when nothing is named to ask."""
        if max_age_s is None or self.lookback_s <= max_age_s or not self.series:
            return None
        return all_fresh_query(self.series, matchers, by, max_age_s)


@dataclass(frozen=True)
class ResourceQuery:
    """One of ``cpu``/``memory``. ``where`` is e.g. ``resourceRules.cpu`` (for messages)."""

    where: str
    container_query: Template
    node_query: Template
    resources: ResourceMapping
    container_label: str
    container_reach: Reach = Reach()
    node_reach: Reach = Reach()

    def label(self, gr: GroupResource) -> str:
        found = self.resources.label_for_resource(gr)
        if found is None:
            raise QueryError(f"{self.where}.resources names no label for {gr}")
        return found

    def render_pods(self, namespace: str | None, names: Sequence[str] | None) -> str:
        """Pods ``names`` (None: every pod with series) in ``namespace`` (None: all namespaces), by container."""
        return render_query(self.container_query, self._pod_args(namespace, names))

    def fresh_pods(self, namespace: str | None, names: Sequence[str] | None, max_age_s: float | None) -> str | None:
        """Which of those containers have recent samples, when ``containerQuery`` can answer from older ones."""
        args = self._pod_args(namespace, names)
        return self.container_reach.freshness(args.label_matchers, args.group_by, max_age_s)

    def _pod_args(self, namespace: str | None, names: Sequence[str] | None) -> QueryArgs:
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
        return QueryArgs("", tuple(matchers), group_by, values)

    def render_nodes(self, names: Sequence[str] | None) -> str:
        return render_query(self.node_query, self._node_args(names))

    def fresh_nodes(self, names: Sequence[str] | None, max_age_s: float | None) -> str | None:
        args = self._node_args(names)
        return self.node_reach.freshness(args.label_matchers, args.group_by, max_age_s)

    def _node_args(self, names: Sequence[str] | None) -> QueryArgs:
        node = self.label(NODE)
        try:
            matchers = (one_of(node, names) if names is not None else matcher(node, "!=", ""),)
        except PromQLError as exc:
            raise QueryError(str(exc)) from None
        values = {node: regex_values(names) if names is not None else ".+"}
        return QueryArgs("", matchers, (node,), values)


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
    rendered: dict[str, str] = {}
    # Every shape a request renders, parsed once here (requests render without parsing again: render_query).
    for field, render in (("containerQuery", lambda: rule.render_pods("ns", ["a", "b"])),
                          ("containerQuery", lambda: rule.render_pods("ns", ["a"])),
                          ("containerQuery", lambda: rule.render_pods(None, None)),
                          ("nodeQuery", lambda: rule.render_nodes(["n1"])),
                          ("nodeQuery", lambda: rule.render_nodes(["n1", "n2"])),
                          ("nodeQuery", lambda: rule.render_nodes(None))):
        try:
            query = render()
            check_query(query)
            rendered.setdefault(field, query)
        except QueryError as exc:
            raise parser.fail(f"{where}.{field}", f"renders invalid PromQL: {exc}") from None
    return replace(rule, container_reach=Reach.of(rendered["containerQuery"]),
                   node_reach=Reach.of(rendered["nodeQuery"]))


class _ParserLike(Protocol):  # the helpers of adapter.rules.config._Parser this module uses (typing only)
    def fail(self, path: str, reason: str) -> RulesError: ...
    def mapping(self, raw: object, path: str, keys: tuple[str, ...] | None, what: str = "") -> dict[Any, Any]: ...
    def string(self, raw: object, path: str, *, required: bool = False) -> str: ...
    def template(self, raw: object, path: str, fields: Mapping[str, Any]) -> Template: ...
    def resources(self, raw: object, path: str) -> ResourceMapping: ...
    def label(self, raw: object, path: str) -> str: ...
