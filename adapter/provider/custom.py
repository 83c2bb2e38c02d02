"""custom.metrics.k8s.io over the engine: a metric of one object, or of the objects a label selector selects.

A request names a metric and a resource (``pods``, ``deployments.apps``, ...) in a namespace or at the root; the
rules bound to that pair (the catalogue's lookup) each render one query for the selected objects, and the
engine merges their answers per object. ``metricLabelSelector`` narrows the metric's own series and is echoed in
every item, as the API says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from adapter.api.paths import MetricPath
from adapter.api.serialise import ObjectValue
from adapter.api.status import ApiError, bad_request, metric_not_found
from adapter.prometheus.client import Sample
from adapter.provider.engine import Engine, Explanation, QueryPlan, parse_metric_selector
from adapter.provider.engine import freshness as query_freshness
from adapter.rules import (
    Binding,
    GroupResource,
    MissingValue,
    QueryError,
    ResourceError,
)
from adapter.rules.query import custom_args
from adapter.rules.queryargs import render_query
from adapter.rules.selectors import to_label_selector, to_label_values


@dataclass(frozen=True)
class CustomRequest:
    """A custom-metrics request checked and planned, before anything is asked of Prometheus."""

    path: MetricPath
    group_resource: GroupResource
    metric_label_selector: str
    echo: dict[str, Any] | None  # the metricLabelSelector as a LabelSelector, echoed in each item
    plan: QueryPlan
    kind: str  # describedObject's kind and apiVersion, from the rules' resource table
    api_version: str


class CustomMetrics:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def values(self, path: MetricPath, label_selector: str = "",
                     metric_label_selector: str = "") -> list[ObjectValue]:
        """The items of a ``MetricValueList``; an ``ApiError`` for anything the API refuses."""
        request = await self.plan(path, label_selector, metric_label_selector)
        values, at = self.engine.merge(request.plan, await self.engine.run(request.plan), path.namespace)
        return self._items(request, values, at)

    async def explain(self, path: MetricPath, label_selector: str = "",
                      metric_label_selector: str = "") -> Explanation:
        """What ``values`` does for this request, step by step; planning errors raise as they do there."""
        request = await self.plan(path, label_selector, metric_label_selector)
        answers = await self.engine.run(request.plan)
        chosen, at = self.engine.merge(request.plan, answers, path.namespace)
        try:
            items: Sequence[ObjectValue] = self._items(request, chosen, at)
            error = None
        except ApiError as exc:
            items, error = [], exc
        return Explanation(request.plan, label_selector, tuple(tuple(r) for r in answers.samples), chosen,
                           tuple(items), error)

    async def plan(self, path: MetricPath, label_selector: str = "",
                   metric_label_selector: str = "") -> CustomRequest:
        """Check the request, resolve the selected objects, render the PromQL: everything but the query."""
        catalogue = self.engine.catalogue()
        try:
            gr = catalogue.table.normalise(path.resource)
        except ResourceError:
            raise metric_not_found(path.metric, path.resource) from None
        requirements, matchers = parse_metric_selector(metric_label_selector, "metricLabelSelector")
        bindings = catalogue.lookup(path.metric, gr)
        single = None if path.wildcard else path.name
        # A namespaced metric needs a namespace in the path; a root-scoped one must not have one.
        if not bindings or bindings[0].namespaced != (path.namespace is not None):
            raise metric_not_found(path.metric, str(gr), single, metric_label_selector)
        names: list[str] | None = [path.name]
        if path.wildcard:
            names = await self.engine.select(gr, path.namespace, label_selector)
            if names == []:
                raise metric_not_found(path.metric, str(gr))
        plan = self._render(tuple(bindings), path.namespace, tuple(names) if names is not None else None, matchers,
                            to_label_values(requirements))
        return CustomRequest(path, gr, metric_label_selector, to_label_selector(requirements), plan,
                             catalogue.table.kind(gr), catalogue.table.api_version(gr))

    def _render(self, bindings: tuple[Binding, ...], namespace: str | None, names: tuple[str, ...] | None,
                matchers: tuple[str, ...], values: tuple[tuple[str, str], ...]) -> QueryPlan:
        max_age_s = self.engine.max_sample_age()
        queries, freshness = [], []
        try:
            for b in bindings:
                args = custom_args(b, namespace=namespace, names=names, metric_matchers=matchers,
                                   metric_values=values, with_values="LabelValuesByName" in b.rule.metrics_query.fields)
                queries.append(render_query(b.rule.metrics_query, args))
                label = b.resource_label
                assert label is not None  # a custom metric's binding always names its object's label
                by = (label,) if b.namespace_label is None else (label, b.namespace_label)
                freshness.append(query_freshness(b, args.label_matchers, by, max_age_s))
        except QueryError as exc:
            raise bad_request(str(exc)) from None
        return QueryPlan(bindings, tuple(queries), names, tuple(freshness))

    @staticmethod
    def _items(request: CustomRequest, values: dict[str, Sample], at: float) -> list[ObjectValue]:
        """The merged values, with the first rule's missing-value policy; none at all is a 404."""
        path, gr, plan = request.path, request.group_resource, request.plan
        wanted = plan.names if plan.names is not None else sorted(values)
        if plan.bindings[0].rule.missing_value == MissingValue.ZERO:
            found = [(name, values.get(name) or Sample({}, at, 0.0)) for name in wanted]
        else:  # objects without a value are left out
            found = [(name, values[name]) for name in wanted if name in values]
        if not found:
            single = None if path.wildcard else path.name
            raise metric_not_found(path.metric, str(gr), single, request.metric_label_selector)
        return [ObjectValue(request.kind, request.api_version, path.namespace, name, path.metric, sample.timestamp,
                            sample.value, request.echo) for name, sample in found]
