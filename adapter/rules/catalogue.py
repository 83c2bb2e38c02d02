"""Discovery: which API metrics the rules yield for the series Prometheus has (pure; the caller fetches).

Series are first reduced to distinct (metric name, label-name set) shapes, so the catalogue grows with
those, not with the number of series. Unlike prometheus-adapter, where a later rule silently overwrites an
earlier one that yields the same metric, every rule yielding a metric is kept as a candidate, in rule order:
the query layer asks them in turn and the earlier rule wins per object.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

from adapter.rules.config import DiscoveryRule, RulesConfig
from adapter.rules.resources import BUILTIN, NAMESPACES, GroupResource, ResourceError, ResourceTable

SeriesShape = tuple[str, frozenset[str]]
"""A series reduced to its metric name and the names of its other labels."""


@dataclass(frozen=True, order=True)
class MetricInfo:
    name: str
    group_resource: GroupResource
    namespaced: bool


@dataclass(frozen=True)
class Binding:
    """How one rule serves one API metric from one Prometheus series name.

    ``resource_label`` holds the object's name (``None`` for external metrics); ``namespace_label`` holds its
    namespace, ``None`` when the object is root-scoped or the rule maps no label to namespaces (then objects
    are matched by name alone). ``namespaced``: for custom metrics, whether the resource is namespaced; for
    external metrics, the rule's ``resources.namespaced``.
    """

    rule: DiscoveryRule
    metric: str
    series: str
    group_resource: GroupResource | None
    resource_label: str | None
    namespace_label: str | None
    namespaced: bool

    @cached_property
    def filters_namespace(self) -> bool:
        """Whether the rule's query filters on the namespace itself (its template reads ``.LabelMatchers``)."""
        return "LabelMatchers" in self.rule.metrics_query.fields


class Catalogue:
    """Custom metrics keyed by (group-resource, name); external metrics keyed by name."""

    def __init__(
        self,
        series_shapes: Mapping[str, frozenset[SeriesShape]],
        custom: Mapping[tuple[GroupResource, str], tuple[Binding, ...]],
        external: Mapping[str, tuple[Binding, ...]],
        table: ResourceTable = BUILTIN,
    ) -> None:
        self.table = table  # the rules' resource table: a request's resource names resolve with it
        self.series_shapes = series_shapes
        self._custom = custom
        self._external = external

    def custom_metrics(self) -> list[MetricInfo]:
        return sorted(MetricInfo(name, gr, found[0].namespaced) for (gr, name), found in self._custom.items())

    def lookup(self, metric: str, group_resource: GroupResource | str) -> tuple[Binding, ...]:
        """The candidates for a metric on a resource (given in any spelling); empty if there are none."""
        try:
            if isinstance(group_resource, GroupResource):
                gr = self.table.normalise(group_resource.resource, group_resource.group)
            else:
                gr = self.table.normalise(group_resource)
        except ResourceError:
            return ()
        return self._custom.get((gr, metric), ())

    def external_metrics(self) -> list[str]:
        return sorted(self._external)

    def external_lookup(self, metric: str) -> tuple[Binding, ...]:
        return self._external.get(metric, ())

    def rule_metrics(self, rule: DiscoveryRule) -> list[str]:
        """What one rule yields, as ``resource/metric`` (custom) or ``metric`` (external) strings."""
        found = {
            f"{b.group_resource}/{b.metric}" if b.group_resource else b.metric
            for bindings in (*self._custom.values(), *self._external.values())
            for b in bindings
            if b.rule is rule
        }
        return sorted(found)


def build_catalogue(config: RulesConfig, series_by_query: Mapping[str, Iterable[Mapping[str, str]]]) -> Catalogue:
    """``series_by_query`` maps each of ``config.series_queries()`` to the label sets ``/api/v1/series``
    returned for it; a query missing from it yields nothing."""
    return build_catalogue_from_shapes(
        config, {query: distinct_shapes(series_by_query.get(query, ())) for query in config.series_queries()})


def build_catalogue_from_shapes(config: RulesConfig, shapes_by_query: Mapping[str, frozenset[SeriesShape]],
                                ) -> Catalogue:
    """``build_catalogue`` from series already reduced to shapes (``distinct_shapes``, or the Prometheus client's
    ``series_shapes``); a query missing from it yields nothing."""
    shapes = {query: shapes_by_query.get(query, frozenset()) for query in config.series_queries()}
    custom: dict[tuple[GroupResource, str], dict[Binding, None]] = {}
    for rule in config.rules:
        for name, labels in _ordered(shapes[rule.series_query]):
            for gr, binding in _custom_bindings(rule, name, labels, config.table):
                custom.setdefault((gr, binding.metric), {})[binding] = None
    external: dict[str, dict[Binding, None]] = {}
    for rule in config.external_rules:
        for name, labels in _ordered(shapes[rule.series_query]):
            ext_binding = _external_binding(rule, name, labels)
            if ext_binding is not None:
                external.setdefault(ext_binding.metric, {})[ext_binding] = None
    return Catalogue(
        shapes,
        {key: tuple(found) for key, found in custom.items()},
        {key: tuple(found) for key, found in external.items()},
        config.table,
    )


def distinct_shapes(series: Iterable[Mapping[str, str]]) -> frozenset[SeriesShape]:
    """Reduce label sets to distinct shapes as they stream in; values are dropped at once."""
    seen: set[tuple[str, frozenset[str]]] = set()
    for labels in series:
        name = labels.get("__name__")
        if name:
            seen.add((name, frozenset(labels)))
    return frozenset((name, names - {"__name__"}) for name, names in seen)


def _ordered(shapes: frozenset[SeriesShape]) -> list[SeriesShape]:
    return sorted(shapes, key=lambda shape: (shape[0], sorted(shape[1])))


def _custom_bindings(
    rule: DiscoveryRule, series: str, labels: frozenset[str], table: ResourceTable
) -> Iterator[tuple[GroupResource, Binding]]:
    metric = rule.metric_name(series)
    if metric is None:
        return
    chosen = rule.resources.resources_for_labels(labels)
    ns_label = chosen.get(NAMESPACES)
    rule_maps_namespaces = rule.resources.label_for_resource(NAMESPACES) is not None
    for gr, label in chosen.items():
        if not table.is_namespaced(gr):
            yield gr, Binding(rule, metric, series, gr, label, None, namespaced=False)
        elif ns_label is not None or not rule_maps_namespaces:
            yield gr, Binding(rule, metric, series, gr, label, ns_label, namespaced=True)
        # else: the series lacks the namespace label its rule maps, so no namespaced object can be matched.


def _external_binding(rule: DiscoveryRule, series: str, labels: frozenset[str]) -> Binding | None:
    metric = rule.metric_name(series)
    if metric is None:
        return None
    ns_label = None
    if rule.resources.namespaced:
        mapped = rule.resources.resources_for_labels(labels).get(NAMESPACES)
        ns_label = mapped or rule.resources.label_for_resource(NAMESPACES)
    return Binding(rule, metric, series, None, None, ns_label, namespaced=rule.resources.namespaced)
