"""The one engine under the custom, external and resource metrics: ask Prometheus, then apply the value policy.

Policy, the same for every API served over it: nothing here invents a value. An object gets no value when it
has no sample, when its sample is NaN or Inf, when several series of one rule disagree about it, or when its
samples are older than ``--max-sample-age`` (unless its rule opts into ``missingValue: zero``). Prometheus being
unreachable is a 503 (the HPA keeps its scale), a query Prometheus refuses a 500; neither becomes a value.

The API-specific parts (which rules, which objects, which PromQL, which JSON) live beside it in ``custom``,
``external`` and ``resource``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from collections.abc import Callable, Container, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from adapter.api.status import ApiError, bad_request, internal, unavailable
from adapter.prometheus.client import PrometheusClient, PrometheusUnavailable, QueryFailed, Sample
from adapter.prometheus.querycache import QueryCache
from adapter.provider.resolvers import ObjectResolver, StandaloneResolver
from adapter.rules import Binding, Catalogue, GroupResource
from adapter.rules.freshness import freshness_query
from adapter.rules.selectors import Requirement, SelectorError, parse_selector, to_promql_matchers
from adapter.rulesfile.loader import rule_label

log = logging.getLogger("adapter.provider")
promql_log = logging.getLogger("adapter.promql")  # every rendered query, at --v 6


@dataclass(frozen=True)
class QueryPlan:
    """What a request turned into; the explain view and the logs show it."""

    bindings: tuple[Binding, ...]
    queries: tuple[str, ...]
    names: tuple[str, ...] | None  # None: every object with series
    # Per binding, the query saying which objects' samples are recent enough (None: the rule's query cannot
    # answer from samples older than the limit; see adapter.rules.freshness).
    freshness: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class Answers:
    """Prometheus' answers to a plan: per binding, the samples and (where asked) the freshness samples."""

    samples: list[list[Sample]]
    fresh: list[list[Sample] | None]


@dataclass(frozen=True)
class Explanation:
    """A request traced end to end: the plan, what Prometheus answered per rule, and the outcome.

    ``chosen`` maps each object (custom) to the sample that gave its value; ``error`` is the Status the API
    answers after querying (e.g. 404 when no object has a usable value), ``None`` when it answers items.
    """

    plan: QueryPlan
    label_selector: str
    results: tuple[tuple[Sample, ...], ...]
    chosen: dict[str, Sample]
    items: tuple[Any, ...]
    error: ApiError | None


def parse_request_selector(text: str, what: str) -> tuple[Requirement, ...]:
    """A ``labelSelector`` or ``metricLabelSelector`` from a request; a 400 naming the parameter when invalid."""
    try:
        return parse_selector(text)
    except SelectorError as exc:
        raise bad_request(f"invalid {what}: {exc}") from None


def parse_metric_selector(text: str, what: str) -> tuple[tuple[Requirement, ...], tuple[str, ...]]:
    """A selector on the metric's own series: its requirements and the PromQL matchers they become."""
    requirements = parse_request_selector(text, what)
    try:
        return requirements, tuple(to_promql_matchers(requirements))
    except SelectorError as exc:
        raise bad_request(f"invalid {what}: {exc}") from None


def freshness(binding: Binding, label_matchers: Sequence[str], by: tuple[str, ...],
              max_age_s: float | None) -> str | None:
    """The freshness query for a rule whose query can answer from samples older than the limit, else None."""
    if max_age_s is None or binding.rule.lookback_s <= max_age_s:
        return None
    return freshness_query(binding.series, label_matchers, by, max_age_s)


class SeveralSeries:
    """Objects for which one rule's query returned several series: counted per rule, logged once per object.

    ``totals`` maps (rule label, outcome) to a count, outcome ``agreed`` (the series had one value, served) or
    ``conflict`` (they differed: the object got no value from that rule). The ``gpu_adapter_several_series_total``
    self-metric reads it.
    """

    _LOGGED_MAX = 10_000  # objects remembered as logged; then the memory starts over (and may log again)

    def __init__(self) -> None:
        self.totals: collections.Counter[tuple[str, str]] = collections.Counter()
        self._logged: set[Hashable] = set()

    def record(self, binding: Binding, namespace: str | None, name: str, count: int, agreed: bool) -> None:
        rule = binding.rule
        self.note(rule_label(rule), rule.describe, "metricsQuery", (id(rule), namespace, name),
                  f"{binding.group_resource} {namespace + '/' if namespace else ''}{name} (metric {binding.metric})",
                  count, agreed)

    def note(self, rule: str, describe: str, field: str, key: Hashable, where: str, count: int, agreed: bool) -> None:
        """One object's several series from ``rule`` (named ``describe`` in the log; its query is ``field``)."""
        self.totals[rule, "agreed" if agreed else "conflict"] += 1
        if key in self._logged:
            return
        if len(self._logged) >= self._LOGGED_MAX:
            self._logged.clear()
        self._logged.add(key)
        if agreed:
            log.warning("%s: its query returned %d series with one value for %s; served that value. "
                        "Aggregate by <<.GroupBy>> in %s to return one series per object.",
                        describe, count, where, field)
        else:
            log.warning("%s: its query returned %d series with different values for %s; the object "
                        "gets no value from this rule. Aggregate by <<.GroupBy>> in %s (e.g. "
                        "avg by (<<.GroupBy>>) (...)) to return one series per object.", describe, count, where, field)


K = TypeVar("K", bound=Hashable)


def pick_values(groups: Mapping[K, list[Sample]], recent: Container[K] | None,
                several: Callable[[K, int, bool], None]) -> dict[K, Sample]:
    """The value policy, for every API: per object (``groups``: its samples from one rule's query), the value when
    it has exactly one, or several that agree (``several`` is told either way); none when they differ, when it is
    NaN or Inf, or when the object is not ``recent`` (its series have no sample within the sample-age limit; None:
    not checked)."""
    usable: dict[K, Sample] = {}
    for key, group in groups.items():
        first = group[0]
        if len(group) > 1:
            agreed = math.isfinite(first.value) and all(s.value == first.value for s in group)
            several(key, len(group), agreed)
            if not agreed:
                continue
        if math.isfinite(first.value) and (recent is None or key in recent):
            usable[key] = first
    return usable


class Engine:
    """``queries``: a ``QueryCache`` (coalescing, short reuse), or a bare client (each query sent as asked).

    ``catalogue`` gives the metrics discovery found (None until the first relist: every request is then a 503);
    ``resolver`` turns a ``labelSelector`` into object names (standalone: a selector is a 400);
    ``max_sample_age`` gives the sample-age limit in seconds (None: no limit); ``waiting`` why there is no
    catalogue yet.
    """

    def __init__(self, queries: QueryCache | PrometheusClient, catalogue: Callable[[], Catalogue | None],
                 resolver: ObjectResolver | None = None, max_sample_age: Callable[[], float | None] = lambda: None,
                 waiting: Callable[[], str] = lambda: "metrics discovery has not completed yet") -> None:
        self.queries = queries if isinstance(queries, QueryCache) else QueryCache(queries, ttl_s=0)
        self._catalogue = catalogue
        self._waiting = waiting
        self.resolver: ObjectResolver = resolver or StandaloneResolver()
        self.max_sample_age = max_sample_age
        self.series_conflicts = SeveralSeries()

    def catalogue(self) -> Catalogue:
        catalogue = self._catalogue()
        if catalogue is None:
            raise unavailable(self._waiting())
        return catalogue

    async def select(self, group_resource: GroupResource, namespace: str | None, label_selector: str,
                     ) -> list[str] | None:
        """The names of the objects ``label_selector`` selects (None: every object with series)."""
        selector = parse_request_selector(label_selector, "labelSelector")
        return await self.resolver.names(group_resource, namespace, selector)

    async def query(self, queries: Sequence[str], labels: Sequence[str]) -> list[list[Sample]]:
        """Each query's samples, asked together; ``labels`` name the rule behind each (self-metrics)."""
        if promql_log.isEnabledFor(logging.DEBUG):
            for promql in queries:
                promql_log.debug("PromQL: %s", promql)
        try:
            return list(await asyncio.gather(*(self.queries.query(q, label)
                                               for q, label in zip(queries, labels, strict=True))))
        except PrometheusUnavailable as exc:
            raise unavailable(f"unable to fetch metrics: {exc}") from None
        except QueryFailed as exc:
            log.error("query failed: %s (queries: %s)", exc, list(queries))
            raise internal(f"unable to fetch metrics: {exc}") from None

    async def run(self, plan: QueryPlan) -> Answers:
        """The plan's queries and freshness queries, asked together."""
        fresh_at = [i for i, q in enumerate(plan.freshness) if q is not None]
        queries = [*plan.queries, *(q for q in plan.freshness if q is not None)]
        labels = [rule_label(b.rule) for b in plan.bindings] + [rule_label(plan.bindings[i].rule) for i in fresh_at]
        found = await self.query(queries, labels)
        fresh: list[list[Sample] | None] = [None] * len(plan.queries)
        for i, samples in zip(fresh_at, found[len(plan.queries):], strict=True):
            fresh[i] = samples
        return Answers(found[:len(plan.queries)], fresh)

    def merge(self, plan: QueryPlan, answers: Answers, namespace: str | None) -> tuple[dict[str, Sample], float]:
        """Per object, the first rule with a usable value wins; also the newest sample's time (now if none).

        A sample whose namespace label names another namespace is another object's (a query that does not use
        ``.LabelMatchers`` returns every namespace's). Several samples for one object under one rule (a query
        that does not aggregate by ``.GroupBy``) give it that value when they all agree, and no value from this
        rule when they differ: which one is right is not ours to guess. NaN and Inf count as no value, and so does
        a value whose object's series have no sample within the sample-age limit (where the plan asked).
        """
        values: dict[str, Sample] = {}
        latest = 0.0
        for binding, samples, fresh in zip(plan.bindings, answers.samples, answers.fresh, strict=True):
            if samples:
                latest = max(latest, max(s.timestamp for s in samples))
            if binding.resource_label is not None:
                values.update(self._rule_values(binding, samples, fresh, namespace, taken=values))
        return values, latest or time.time()

    def _rule_values(self, binding: Binding, samples: list[Sample], fresh: list[Sample] | None,
                     namespace: str | None, taken: Mapping[str, Sample]) -> dict[str, Sample]:
        """One rule's usable sample per object, for objects no earlier rule gave a value."""
        label = binding.resource_label
        assert label is not None
        # A query whose template uses .LabelMatchers already asked for the namespace: no check per sample.
        ns_label = binding.namespace_label if namespace is not None and not binding.filters_namespace else None
        by_object: dict[str, list[Sample]] = {}
        for sample in samples:
            name = sample.labels.get(label)
            if not name or name in taken:
                continue
            if ns_label is not None and sample.labels.get(ns_label, namespace) != namespace:
                continue
            by_object.setdefault(name, []).append(sample)
        recent = None if fresh is None else {s.labels.get(label, "") for s in fresh}  # "" names no object
        return pick_values(by_object, recent,
                           lambda name, count, agreed: self.series_conflicts.record(binding, namespace, name, count,
                                                                                    agreed))

