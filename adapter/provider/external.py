"""external.metrics.k8s.io over the engine: a metric that belongs to no Kubernetes object (a queue, a gateway).

Every series the first matching rule returns is an item, with its labels; ``labelSelector`` narrows the metric's
series. The value policy is the engine's: NaN, Inf and samples older than the age limit are no value, and no
value at all is a 404 unless the rule says ``missingValue: zero``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from adapter.api.serialise import ExternalValue
from adapter.api.status import ApiError, bad_request
from adapter.prometheus.client import Sample
from adapter.provider.engine import Answers, Engine, Explanation, QueryPlan, parse_metric_selector
from adapter.provider.engine import freshness as query_freshness
from adapter.rules import MissingValue, QueryError
from adapter.rules.query import external_args
from adapter.rules.queryargs import render_query
from adapter.rules.selectors import to_label_values


class ExternalMetrics:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def values(self, namespace: str, metric: str, label_selector: str = "") -> list[ExternalValue]:
        """The items of an ``ExternalMetricValueList``; an ``ApiError`` for anything the API refuses."""
        plan = self.plan(namespace, metric, label_selector)
        return self._items(plan, metric, await self.engine.run(plan))

    async def explain(self, namespace: str, metric: str, label_selector: str = "") -> Explanation:
        plan = self.plan(namespace, metric, label_selector)
        answers = await self.engine.run(plan)
        try:
            items: list[ExternalValue] = self._items(plan, metric, answers)
            error = None
        except ApiError as exc:
            items, error = [], exc
        return Explanation(plan, label_selector, tuple(tuple(r) for r in answers.samples), {}, tuple(items), error)

    def plan(self, namespace: str, metric: str, label_selector: str = "") -> QueryPlan:
        requirements, matchers = parse_metric_selector(label_selector, "labelSelector")
        bindings = self.engine.catalogue().external_lookup(metric)
        if not bindings:
            raise ApiError(404, f"the server could not find the external metric {metric}")
        values, max_age_s = to_label_values(requirements), self.engine.max_sample_age()
        queries, freshness = [], []
        try:
            for i, b in enumerate(bindings):
                args = external_args(b, namespace=namespace if b.namespaced else None, metric_matchers=matchers,
                                     metric_values=values)
                queries.append(render_query(b.rule.metrics_query, args))
                # Only the first rule's answer is served (``_items``), so only its freshness is asked.
                freshness.append(query_freshness(b, args.label_matchers, (), max_age_s) if i == 0 else None)
        except QueryError as exc:
            raise bad_request(str(exc)) from None
        return QueryPlan(tuple(bindings), tuple(queries), None, tuple(freshness))

    @staticmethod
    def _items(plan: QueryPlan, metric: str, answers: Answers) -> list[ExternalValue]:
        """The first rule's finite, recent samples (or a 0 under ``missingValue: zero``); none at all is a 404.

        Where the plan asked for freshness, an item is recent when one of the rule's series that agrees with it on
        the labels they share has a sample within the limit."""
        fresh = answers.fresh[0]
        items = [ExternalValue(metric, dict(s.labels), s.timestamp, s.value) for s in answers.samples[0]
                 if math.isfinite(s.value) and (fresh is None or _agrees_with_any(s.labels, fresh))]
        if not items and plan.bindings[0].rule.missing_value == MissingValue.ZERO:
            items = [ExternalValue(metric, {}, time.time(), 0.0)]
        if not items:
            raise ApiError(404, f"the server could not find the external metric {metric} (no finite samples)")
        return items


def _agrees_with_any(labels: Mapping[str, str], series: list[Sample]) -> bool:
    return any(all(f.labels.get(k, v) == v for k, v in labels.items()) for f in series)
