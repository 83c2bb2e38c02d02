"""From a parsed request to values: find the rules, render PromQL, query Prometheus, apply the value policy.

The custom and external APIs share this one engine. Nothing here invents a value: an object without a sample,
with a NaN/Inf sample, with several series that disagree, or whose samples are older than ``--max-sample-age``
gets no value (unless its rule opts into ``missingValue: zero``).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, NamedTuple, Protocol

from adapter.api.paths import MetricPath
from adapter.api.resource_metrics import NodeUsage, PodUsage, Usage
from adapter.api.serialise import ExternalValue, ObjectValue, ObjectValues
from adapter.memo import remember_short
from adapter.prometheus import PrometheusClient, PrometheusUnavailable, QueryFailed, Sample
from adapter.querycache import QueryCache
from adapter.rules import (
    Binding,
    Catalogue,
    GroupResource,
    MissingValue,
    QueryError,
    ResourceError,
    api_version,
    kind,
    normalise_resource,
)
from adapter.rules.freshness import freshness_query
from adapter.rules.query import custom_args, external_args
from adapter.rules.queryargs import QueryArgs, render_query
from adapter.rules.resource_rules import NAMESPACE, NODE, POD, ResourceQuery, ResourceRules
from adapter.selectors import (
    Requirement,
    SelectorError,
    parse_selector,
    to_label_selector,
    to_label_values,
    to_promql_matchers,
)
from adapter.selfmetrics import rule_label
from adapter.status import ApiError, bad_request, internal, metric_not_found, not_found, unavailable

log = logging.getLogger("adapter.provider")
_timestamp = operator.itemgetter(1)  # Sample.timestamp, without the property call
_labels = operator.itemgetter(0)
_value = operator.itemgetter(2)
promql_log = logging.getLogger("adapter.promql")  # every rendered query, at --v 6


class ObjectResolver(Protocol):
    """Turns a wildcard request's label selector into object names (the Kubernetes API's job).

    None means "every object that has series" (only when nothing better is known: no API and no selector).
    """

    async def names(self, group_resource: GroupResource, namespace: str | None,
                    selector: tuple[Requirement, ...]) -> list[str] | None: ...


class StandaloneResolver:
    """No Kubernetes API: a wildcard request without a selector means every object that has series."""

    async def names(self, group_resource: GroupResource, namespace: str | None,
                    selector: tuple[Requirement, ...]) -> list[str] | None:
        if not selector:
            return None
        raise bad_request("labelSelector needs the Kubernetes API to find the selected objects, and the adapter "
                          "runs without one (pass --kubeconfig, run in a pod, or list objects with "
                          "--standalone-objects)")


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
class CustomRequest:
    """A custom-metrics request checked and planned, before anything is asked of Prometheus."""

    path: MetricPath
    group_resource: GroupResource
    metric_label_selector: str
    echo: dict | None  # the metricLabelSelector as a LabelSelector, echoed in each item
    plan: QueryPlan


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
    items: tuple[ObjectValue, ...] | tuple[ExternalValue, ...]
    error: ApiError | None


# HPAs repeat the same requests every sync period; a 1,500-pod selector's query takes ~0.25 ms to render and
# ~15 us to look up. Bounded: an entry holds the names (shared strings) and the query text, ~30 KB at 1,500 pods.
@lru_cache(maxsize=256)
def _render_custom_all(bindings: tuple[Binding, ...], namespace: str | None, names: tuple[str, ...] | None,
                       matchers: tuple[str, ...], values: tuple[tuple[str, str], ...], max_age_s: float | None,
                       ) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    queries, freshness = [], []
    for b in bindings:
        args = custom_args(b, namespace=namespace, names=names, metric_matchers=matchers, metric_values=values,
                           with_values="LabelValuesByName" in b.rule.metrics_query.fields)
        queries.append(render_query(b.rule.metrics_query, args))
        by = (b.resource_label,) if b.namespace_label is None else (b.resource_label, b.namespace_label)
        freshness.append(_freshness(b, args, by, max_age_s))
    return tuple(queries), tuple(freshness)


def _freshness(binding: Binding, args: QueryArgs, by: tuple[str, ...], max_age_s: float | None) -> str | None:
    """The freshness query for a rule whose query can answer from samples older than the limit, else None."""
    if max_age_s is None or binding.rule.lookback_s <= max_age_s:
        return None
    return freshness_query(binding.series, args.label_matchers, by, max_age_s)


def _agrees_with_any(labels: dict[str, str], series: list[Sample]) -> bool:
    return any(all(f.labels.get(k, v) == v for k, v in labels.items()) for f in series)


# HPAs repeat their selectors every sync: each text is parsed and translated once (a refused one every time).
@remember_short()
def _selector(text: str, what: str) -> tuple[Requirement, ...]:
    try:
        return parse_selector(text)
    except SelectorError as exc:
        raise bad_request(f"invalid {what}: {exc}") from None


class MetricSelector(NamedTuple):
    """A selector on the metric's own labels, as each part of the request needs it."""

    matchers: tuple[str, ...]  # PromQL label matchers (.LabelMatchers)
    values: tuple[tuple[str, str], ...]  # .LabelValuesByName
    echo: dict[str, Any] | None  # the LabelSelector echoed in each item (shared: never changed)


@remember_short()
def _metric_selector(text: str, what: str) -> MetricSelector:
    requirements = _selector(text, what)
    try:
        matchers = tuple(to_promql_matchers(requirements))
    except SelectorError as exc:
        raise bad_request(f"invalid {what}: {exc}") from None
    return MetricSelector(matchers, to_label_values(requirements), to_label_selector(requirements))


class SeveralSeries:
    """Objects for which one rule's query returned several series: counted per rule, logged once per object.

    ``totals`` maps (rule label, outcome) to a count, outcome ``agreed`` (the series had one value, served) or
    ``conflict`` (they differed: the object got no value from that rule). The ``gpu_adapter_several_series_total``
    self-metric reads it.
    """

    _LOGGED_MAX = 10_000  # objects remembered as logged; then the memory starts over (and may log again)

    def __init__(self) -> None:
        self.totals: collections.Counter[tuple[str, str]] = collections.Counter()
        self._logged: set[tuple[int, str | None, str]] = set()

    def record(self, binding: Binding, namespace: str | None, name: str, count: int, agreed: bool) -> None:
        rule = binding.rule
        self.totals[rule_label(rule), "agreed" if agreed else "conflict"] += 1
        key = (id(rule), namespace, name)
        if key in self._logged:
            return
        if len(self._logged) >= self._LOGGED_MAX:
            self._logged.clear()
        self._logged.add(key)
        where = f"{binding.group_resource} {namespace + '/' if namespace else ''}{name}"
        if agreed:
            log.warning("%s: its query returned %d series with one value for %s (metric %s); served that value. "
                        "Aggregate by <<.GroupBy>> in metricsQuery to return one series per object.",
                        rule.describe, count, where, binding.metric)
        else:
            log.warning("%s: its query returned %d series with different values for %s (metric %s); the object "
                        "gets no value from this rule. Aggregate by <<.GroupBy>> in metricsQuery (e.g. "
                        "avg by (<<.GroupBy>>) (...)) to return one series per object.",
                        rule.describe, count, where, binding.metric)


class Provider:
    """``queries``: a ``QueryCache`` (coalescing, short reuse), or a bare client (each query sent as asked).

    ``resolver`` turns a ``labelSelector`` into object names; without one (standalone) such requests get a 400.
    """

    def __init__(self, queries: QueryCache | PrometheusClient, catalogue: Callable[[], Catalogue | None],
                 resolver: ObjectResolver | None = None, max_sample_age: Callable[[], float | None] = lambda: None,
                 ) -> None:
        self._queries = queries if isinstance(queries, QueryCache) else QueryCache(queries, ttl_s=0)
        self._catalogue = catalogue
        self._resolver = resolver or StandaloneResolver()
        self.series_conflicts = SeveralSeries()
        self._max_sample_age = max_sample_age  # seconds; None: no limit

    def _current(self) -> Catalogue:
        catalogue = self._catalogue()
        if catalogue is None:
            raise unavailable("metrics discovery has not completed yet")
        return catalogue

    # -- custom.metrics.k8s.io -------------------------------------------------------------------------
    async def custom(self, path: MetricPath, label_selector: str = "",
                     metric_label_selector: str = "") -> ObjectValues:
        request = await self.plan_custom(path, label_selector, metric_label_selector)
        values, at = self._merge(request.plan, await self._run(request.plan), path.namespace)
        return self._custom_items(request, values, at)

    async def explain_custom(self, path: MetricPath, label_selector: str = "",
                             metric_label_selector: str = "") -> Explanation:
        """What ``custom`` does for this request, step by step; planning errors raise as they do there."""
        request = await self.plan_custom(path, label_selector, metric_label_selector)
        answers = await self._run(request.plan)
        chosen, at = self._merge(request.plan, answers, request.path.namespace)
        try:
            items: Sequence[ObjectValue] = self._custom_items(request, chosen, at)
            error = None
        except ApiError as exc:
            items, error = [], exc
        return Explanation(request.plan, label_selector, tuple(tuple(r) for r in answers.samples), chosen,
                           tuple(items), error)

    async def plan_custom(self, path: MetricPath, label_selector: str = "",
                          metric_label_selector: str = "") -> CustomRequest:
        """Check the request, resolve the selected objects, render the PromQL: everything but the query."""
        try:
            gr = normalise_resource(path.resource)
        except ResourceError:
            raise metric_not_found(path.metric, path.resource) from None
        metric = _metric_selector(metric_label_selector, "metricLabelSelector")
        bindings = self._current().lookup(path.metric, gr)
        single = None if path.wildcard else path.name
        if not bindings or not self._scope_matches(bindings[0], path):
            raise metric_not_found(path.metric, str(gr), single, metric_label_selector)
        names: list[str] | None = [path.name]
        if path.wildcard:
            object_reqs = _selector(label_selector, "labelSelector")
            names = await self._resolver.names(gr, path.namespace, object_reqs)
            if names == []:
                raise metric_not_found(path.metric, str(gr))
        plan = self._plan_custom(bindings, path.namespace, names, metric.matchers, metric.values)
        return CustomRequest(path, gr, metric_label_selector, metric.echo, plan)

    def _custom_items(self, request: CustomRequest, values: dict[str, Sample], at: float) -> ObjectValues:
        """The merged values (``_merge``), with the first rule's missing-value policy; none at all is a 404."""
        path, gr, plan = request.path, request.group_resource, request.plan
        wanted = plan.names if plan.names is not None else sorted(values)
        # Runs once per object (1,500 for a 1,500-pod selector): columns, not a tuple per item.
        if plan.bindings[0].rule.missing_value == MissingValue.ZERO:
            names, samples = list(wanted), list(map(values.get, wanted, itertools.repeat(Sample({}, at, 0.0))))
        else:
            names, samples = list(wanted), list(map(values.get, wanted))
            if None in samples:  # objects without a value are left out
                names = list(filter(values.__contains__, wanted))
                samples = list(map(values.__getitem__, names))
        if not names:
            single = None if path.wildcard else path.name
            raise metric_not_found(path.metric, str(gr), single, request.metric_label_selector)
        return ObjectValues(kind(gr), api_version(gr), path.namespace, path.metric, request.echo, names, samples)

    @staticmethod
    def _scope_matches(binding: Binding, path: MetricPath) -> bool:
        """A namespaced metric needs a namespace in the path; a root-scoped one must not have one."""
        return binding.namespaced == (path.namespace is not None)

    def _plan_custom(self, bindings: Sequence[Binding], namespace: str | None, names: list[str] | None,
                     matchers: tuple[str, ...], values: tuple[tuple[str, str], ...]) -> QueryPlan:
        object_names = tuple(names) if names is not None else None
        try:
            queries, freshness = _render_custom_all(tuple(bindings), namespace, object_names, matchers, values,
                                                    self._max_sample_age())
        except QueryError as exc:
            raise bad_request(str(exc)) from None
        return QueryPlan(tuple(bindings), queries, object_names, freshness)

    async def _run(self, plan: QueryPlan) -> Answers:
        extra = [(b, q) for b, q in zip(plan.bindings, plan.freshness, strict=False) if q is not None]
        if promql_log.isEnabledFor(logging.DEBUG):
            for query in (*plan.queries, *(q for _, q in extra)):
                promql_log.debug("PromQL: %s", query)
        try:
            if len(plan.queries) == 1 and not extra:  # the usual case: no task (a cache hit then never yields)
                return Answers([await self._queries.query(plan.queries[0], rule_label(plan.bindings[0].rule))], [None])
            found = list(await asyncio.gather(*(self._queries.query(q, rule_label(b.rule)) for b, q in
                                                (*zip(plan.bindings, plan.queries, strict=True), *extra))))
        except PrometheusUnavailable as exc:
            raise unavailable(f"unable to fetch metrics: {exc}") from None
        except QueryFailed as exc:
            log.error("query failed: %s (queries: %s)", exc, plan.queries)
            raise internal(f"unable to fetch metrics: {exc}") from None
        fresh_found = iter(found[len(plan.queries):])
        fresh = [next(fresh_found) if i < len(plan.freshness) and plan.freshness[i] is not None else None
                 for i in range(len(plan.queries))]
        return Answers(found[:len(plan.queries)], fresh)

    def _merge(self, plan: QueryPlan, answers: Answers, namespace: str | None) -> tuple[dict[str, Sample], float]:
        """Per object, the first rule with a usable value wins: exactly one finite sample for the object.

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
                latest = max(latest, max(map(_timestamp, samples)))
            if binding.resource_label is None:
                continue
            recent = None if fresh is None else {s.labels.get(binding.resource_label) for s in fresh}
            # This runs once per sample (1,500 for a 1,500-pod selector): plain dict operations, no helper calls.
            mine, usable = self._objects(binding, samples, values, namespace)
            if usable and recent is None:
                values.update(mine)  # the usual case: one finite sample per object
                continue
            isfinite = math.isfinite
            for name, sample in mine.items():
                if isfinite(sample.value) and (recent is None or name in recent):
                    values[name] = sample
        return values, latest or time.time()

    def _objects(self, binding: Binding, samples: list[Sample], taken: dict[str, Sample], namespace: str | None,
                 ) -> tuple[dict[str, Sample], bool]:
        """One rule's sample per object (objects in ``taken`` excluded), and whether every one is finite.

        Runs once per sample (1,500 for a 1,500-pod selector), so the common case is one plain loop; several
        samples for one object show as fewer objects than samples, and only then are they looked at again."""
        label = binding.resource_label
        # A query whose template uses .LabelMatchers already asked for the namespace: no check per sample.
        ns_label = binding.namespace_label if namespace is not None and not binding.filters_namespace else None
        if not taken and ns_label is None:
            # The usual case (the first rule, namespace asked in the query): in C, one sample per object, each
            # with the label; anything else is sorted out by the loop below.
            mine = dict(zip(map(dict.get, map(_labels, samples), itertools.repeat(label)), samples, strict=True))
            if len(mine) == len(samples) and None not in mine and "" not in mine:
                return mine, all(map(math.isfinite, map(_value, samples)))
        mine = {}
        skipped, finite, isfinite = 0, True, math.isfinite
        for sample in samples:
            labels = sample.labels
            name = labels.get(label)  # type: ignore[arg-type]
            if not name or name in taken or (ns_label is not None and labels.get(ns_label, namespace) != namespace):
                skipped += 1
                continue
            mine[name] = sample
            if not isfinite(sample.value):
                finite = False
        if len(samples) - skipped != len(mine):
            finite = finite and self._settle_several(binding, samples, mine, namespace)
        return mine, finite

    def _settle_several(self, binding: Binding, samples: list[Sample], mine: dict[str, Sample],
                        namespace: str | None) -> bool:
        """Objects of ``mine`` with several samples keep them when all agree, else leave ``mine``; True."""
        label = binding.resource_label
        groups: dict[str, list[Sample]] = {}
        for sample in samples:
            name = sample.labels.get(label)  # type: ignore[arg-type]
            if name in mine and (binding.filters_namespace or namespace is None or binding.namespace_label is None
                                 or sample.labels.get(binding.namespace_label, namespace) == namespace):
                groups.setdefault(name, []).append(sample)
        for name, group in groups.items():
            if len(group) == 1:
                continue
            agreed = math.isfinite(group[0].value) and all(s.value == group[0].value for s in group)
            self.series_conflicts.record(binding, namespace, name, len(group), agreed)
            if agreed:
                mine[name] = group[0]
            else:
                del mine[name]
        return True

    # -- external.metrics.k8s.io -----------------------------------------------------------------------
    async def external(self, namespace: str, metric: str, label_selector: str = "") -> list[ExternalValue]:
        plan = self.plan_external(namespace, metric, label_selector)
        return self._external_items(plan, metric, await self._run(plan))

    async def explain_external(self, namespace: str, metric: str, label_selector: str = "") -> Explanation:
        plan = self.plan_external(namespace, metric, label_selector)
        answers = await self._run(plan)
        try:
            items: list[ExternalValue] = self._external_items(plan, metric, answers)
            error = None
        except ApiError as exc:
            items, error = [], exc
        return Explanation(plan, label_selector, tuple(tuple(r) for r in answers.samples), {}, tuple(items), error)

    def plan_external(self, namespace: str, metric: str, label_selector: str = "") -> QueryPlan:
        selector = _metric_selector(label_selector, "labelSelector")
        matchers = selector.matchers
        bindings = self._current().external_lookup(metric)
        if not bindings:
            raise ApiError(404, f"the server could not find the external metric {metric}")
        values, max_age_s = selector.values, self._max_sample_age()
        queries, freshness = [], []
        try:
            for b in bindings:
                args = external_args(b, namespace=namespace if b.namespaced else None, metric_matchers=matchers,
                                     metric_values=values)
                queries.append(render_query(b.rule.metrics_query, args))
                freshness.append(_freshness(b, args, (), max_age_s))
        except QueryError as exc:
            raise bad_request(str(exc)) from None
        return QueryPlan(tuple(bindings), tuple(queries), None, tuple(freshness))

    @staticmethod
    def _external_items(plan: QueryPlan, metric: str, answers: Answers) -> list[ExternalValue]:
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


# -- metrics.k8s.io ------------------------------------------------------------------------------------------------
class ResourceMetrics:
    """``metrics.k8s.io`` from ``resourceRules``, on the provider's query path (cache, errors, selectors).

    Honest values: a pod or node without a finite cpu *and* memory sample is left out (metrics-server's shape),
    as is a container without both; prometheus-adapter fills the missing one with 0, which we never invent.
    """

    def __init__(self, provider: Provider, rules: Callable[[], ResourceRules | None]) -> None:
        self._provider = provider
        self._rules = rules

    @property
    def rules(self) -> ResourceRules | None:
        return self._rules()

    async def nodes(self, name: str | None, label_selector: str = "") -> list[NodeUsage]:
        rules = self._require()
        names = [name] if name is not None else await self._names(NODE, None, label_selector)
        if names == []:
            return []
        try:
            queries = (rules.cpu.render_nodes(names), rules.memory.render_nodes(names))
        except QueryError as exc:
            raise bad_request(str(exc)) from None
        cpu, mem = await self._query(queries)
        cpu_by = _by_label(cpu, rules.cpu.label(NODE))
        mem_by = _by_label(mem, rules.memory.label(NODE))
        wanted = names if names is not None else sorted(cpu_by)
        found = [NodeUsage(n, Usage(cpu_by[n].value, mem_by[n].value, min(cpu_by[n].timestamp, mem_by[n].timestamp)))
                 for n in wanted if n in cpu_by and n in mem_by]
        if name is not None and not found:
            raise ApiError(404, f'nodemetrics.metrics.k8s.io "{name}" not found',
                           {"name": name, "group": "metrics.k8s.io", "kind": "nodes"})
        labels = await self._labels(NODE, None, [n.name for n in found])
        return [replace(n, labels=labels[n.name]) if n.name in labels else n for n in found]

    async def pods(self, namespace: str | None, name: str | None, label_selector: str = "") -> list[PodUsage]:
        rules = self._require()
        pairs: set[tuple[str, str]] | None = None  # all namespaces: the selected (namespace, name) pairs
        if name is not None:
            names: list[str] | None = [name]
        elif namespace is None:
            pairs = await self._all_namespaces(label_selector)
            names = sorted({n for _, n in pairs}) if pairs is not None else None
        else:
            names = await self._names(POD, namespace, label_selector)
        if names == []:
            return []
        try:
            queries = (rules.cpu.render_pods(namespace, names), rules.memory.render_pods(namespace, names))
        except QueryError as exc:
            raise bad_request(str(exc)) from None
        cpu, mem = await self._query(queries)
        cpu_by = _by_container(cpu, rules.cpu, namespace)
        mem_by = _by_container(mem, rules.memory, namespace)
        pods: list[PodUsage] = []
        keys = [(namespace, n) for n in names] if names is not None and namespace is not None else sorted(cpu_by)
        for key in keys:
            if pairs is not None and key not in pairs:
                continue
            containers = tuple((c, Usage(s.value, mem_by[key][c].value, min(s.timestamp, mem_by[key][c].timestamp)))
                               for c, s in sorted(cpu_by.get(key, {}).items()) if c in mem_by.get(key, {}))
            if containers:
                pods.append(PodUsage(key[0] or "", key[1], containers))
        if name is not None and not pods:
            raise ApiError(404, f'podmetrics.metrics.k8s.io "{namespace}/{name}" not found',
                           {"name": name, "group": "metrics.k8s.io", "kind": "pods"})
        by_namespace: dict[str, list[str]] = {}
        for pod in pods:
            by_namespace.setdefault(pod.namespace, []).append(pod.name)
        labels = {(ns, n): found for ns, names_in_ns in by_namespace.items()
                  for n, found in (await self._labels(POD, ns, names_in_ns)).items()}
        return [replace(p, labels=labels[(p.namespace, p.name)]) if (p.namespace, p.name) in labels else p
                for p in pods]

    async def _labels(self, gr: GroupResource, namespace: str | None,
                      names: list[str]) -> Mapping[str, Mapping[str, str]]:
        """The objects' labels where the resolver knows them (the Kubernetes API's cache, a standalone file)."""
        lookup = getattr(self._provider._resolver, "labels", None)
        return await lookup(gr, namespace, names) if lookup is not None and names else {}

    def _require(self) -> ResourceRules:
        rules = self._rules()
        if rules is None:
            raise not_found()
        return rules

    async def _all_namespaces(self, label_selector: str) -> set[tuple[str, str]] | None:
        """Pods of every namespace from the Kubernetes API; None (every pod with series) without one."""
        selector = _selector(label_selector, "labelSelector")
        resolver = self._provider._resolver
        if not hasattr(resolver, "namespaced_names"):
            await resolver.names(POD, None, selector)  # standalone: a selector is a clear 400
            return None
        return set(await resolver.namespaced_names(POD, selector))

    async def _names(self, gr: GroupResource, namespace: str | None, label_selector: str) -> list[str] | None:
        return await self._provider._resolver.names(gr, namespace, _selector(label_selector, "labelSelector"))

    async def _query(self, queries: tuple[str, str]) -> tuple[list[Sample], list[Sample]]:
        if promql_log.isEnabledFor(logging.DEBUG):
            for query in queries:
                promql_log.debug("PromQL: %s", query)
        try:
            cpu, mem = await asyncio.gather(*(self._provider._queries.query(q, rule) for q, rule in
                                              zip(queries, ("resourceRules.cpu", "resourceRules.memory"), strict=True)))
        except PrometheusUnavailable as exc:
            raise unavailable(f"unable to fetch metrics: {exc}") from None
        except QueryFailed as exc:
            log.error("query failed: %s (queries: %s)", exc, queries)
            raise internal(f"unable to fetch metrics: {exc}") from None
        return cpu, mem


def _by_label(samples: list[Sample], label: str) -> dict[str, Sample]:
    """The first finite, non-negative sample per value of ``label``."""
    found: dict[str, Sample] = {}
    for s in samples:
        key = s.labels.get(label)
        if key and key not in found and math.isfinite(s.value) and s.value >= 0:
            found[key] = s
    return found


def _by_container(samples: list[Sample], rule: ResourceQuery,
                  namespace: str | None) -> dict[tuple[str | None, str], dict[str, Sample]]:
    """(namespace, pod) -> container -> first finite, non-negative sample; samples without a container are
    pod-level aggregates (cAdvisor's ``container=""``) and are skipped."""
    pod_label, container_label = rule.label(POD), rule.container_label
    ns_label = rule.label(NAMESPACE)
    found: dict[tuple[str | None, str], dict[str, Sample]] = {}
    for s in samples:
        pod, container = s.labels.get(pod_label), s.labels.get(container_label)
        ns = namespace if namespace is not None else s.labels.get(ns_label)
        if not pod or not container or not ns or not math.isfinite(s.value) or s.value < 0:
            continue
        found.setdefault((ns, pod), {}).setdefault(container, s)
    return found


async def check_resource_rules(client: PrometheusClient, rules: ResourceRules) -> list[tuple[str, str, int]]:
    """``gpu-adapter check``: (rule, query, objects with a usable sample) for each of the four resourceRules
    queries over every pod and node; 0 means that query yields nothing."""
    found = []
    for rule in (rules.cpu, rules.memory):
        for what, query, label in ((f"{rule.where}.containerQuery", rule.render_pods(None, None), None),
                                   (f"{rule.where}.nodeQuery", rule.render_nodes(None), rule.label(NODE))):
            samples = await client.query(query)
            count = (len(_by_label(samples, label)) if label is not None
                     else len(_by_container(samples, rule, None)))
            found.append((what, query, count))
    return found
