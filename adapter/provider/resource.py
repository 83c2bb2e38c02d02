"""metrics.k8s.io over the engine, from ``resourceRules``: what ``kubectl top`` and a Resource-metric HPA read.

Honest values: a pod or node without a finite cpu *and* memory sample is left out (metrics-server's shape), as is
a container without both; prometheus-adapter fills the missing one with 0, which we never invent. Each value goes
through the engine's policy, the one every API follows (``engine.pick_values``): several series for one container
or node give its value only when they agree (counted and logged as for custom metrics), and a query that reaches
back further than the sample-age limit (cAdvisor's ``irate(...[5m])`` keeps answering five minutes after the
kubelet's target stopped) is asked which objects' series have a recent sample; the others get no value.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace

from adapter.api.resource_metrics import NodeUsage, PodUsage, Usage
from adapter.api.status import ApiError, bad_request, not_found
from adapter.prometheus.client import PrometheusClient, Sample
from adapter.provider.engine import Engine, SeveralSeries, parse_request_selector, pick_values
from adapter.rules import GroupResource, QueryError
from adapter.rules.resource_rules import NAMESPACE, NODE, POD, ResourceQuery, ResourceRules

QUERY_LABELS = ("resourceRules.cpu", "resourceRules.memory")

class ResourceMetrics:
    """``rules`` gives the current ``resourceRules`` (None: metrics.k8s.io is not served)."""

    def __init__(self, engine: Engine, rules: Callable[[], ResourceRules | None]) -> None:
        self.engine = engine
        self._rules = rules

    @property
    def rules(self) -> ResourceRules | None:
        return self._rules()

    async def nodes(self, name: str | None, label_selector: str = "") -> list[NodeUsage]:
        rules = self._require()
        names = [name] if name is not None else await self._names(NODE, None, label_selector)
        if names == []:
            return []
        max_age = self.engine.max_sample_age()
        try:
            queries = (rules.cpu.render_nodes(names), rules.memory.render_nodes(names))
            fresh = (rules.cpu.fresh_nodes(names, max_age), rules.memory.fresh_nodes(names, max_age))
        except QueryError as exc:
            raise bad_request(str(exc)) from None
        (cpu, mem), (cpu_recent, mem_recent) = await self._ask(queries, fresh)
        several = self.engine.series_conflicts
        cpu_by = _by_label(cpu, rules.cpu.label(NODE), _labels_of(cpu_recent, rules.cpu.label(NODE)),
                           _noting(several, rules.cpu, "nodeQuery"))
        mem_by = _by_label(mem, rules.memory.label(NODE), _labels_of(mem_recent, rules.memory.label(NODE)),
                           _noting(several, rules.memory, "nodeQuery"))
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
        max_age = self.engine.max_sample_age()
        try:
            queries = (rules.cpu.render_pods(namespace, names), rules.memory.render_pods(namespace, names))
            fresh = (rules.cpu.fresh_pods(namespace, names, max_age),
                     rules.memory.fresh_pods(namespace, names, max_age))
        except QueryError as exc:
            raise bad_request(str(exc)) from None
        (cpu, mem), (cpu_recent, mem_recent) = await self._ask(queries, fresh)
        several = self.engine.series_conflicts
        cpu_by = _by_container(cpu, rules.cpu, namespace, _containers_of(cpu_recent, rules.cpu, namespace),
                               _noting(several, rules.cpu, "containerQuery"))
        mem_by = _by_container(mem, rules.memory, namespace, _containers_of(mem_recent, rules.memory, namespace),
                               _noting(several, rules.memory, "containerQuery"))
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
        return await self.engine.resolver.labels(gr, namespace, names) if names else {}

    def _require(self) -> ResourceRules:
        rules = self._rules()
        if rules is None:
            raise not_found()
        return rules

    async def _all_namespaces(self, label_selector: str) -> set[tuple[str, str]] | None:
        """Pods of every namespace from the Kubernetes API; None (every pod with series) without one."""
        selector = parse_request_selector(label_selector, "labelSelector")
        pairs = await self.engine.resolver.namespaced_names(POD, selector)
        return set(pairs) if pairs is not None else None

    async def _names(self, gr: GroupResource, namespace: str | None, label_selector: str) -> list[str] | None:
        return await self.engine.select(gr, namespace, label_selector)

    async def _ask(self, queries: tuple[str, str], fresh: tuple[str | None, str | None],
                   ) -> tuple[tuple[list[Sample], list[Sample]], tuple[list[Sample] | None, list[Sample] | None]]:
        """The cpu and memory queries and, where asked, their freshness queries, sent together."""
        asked = [q for q in fresh if q is not None]
        labels = [label for label, q in zip(QUERY_LABELS, fresh, strict=True) if q is not None]
        answers = await self._query(queries, tuple(asked), tuple(labels))
        recent = iter(answers[2:])
        cpu_fresh, memory_fresh = (next(recent) if q is not None else None for q in fresh)
        return (answers[0], answers[1]), (cpu_fresh, memory_fresh)

    async def _query(self, queries: tuple[str, str], extra: tuple[str, ...] = (),
                     extra_labels: tuple[str, ...] = ()) -> list[list[Sample]]:
        return await self.engine.query((*queries, *extra), (*QUERY_LABELS, *extra_labels))


Several = Callable[[Hashable, int, bool], None]
ContainerKey = tuple[str, str, str]  # namespace, pod, container


def _noting(several: SeveralSeries, rule: ResourceQuery, field: str) -> Several:
    """Tell the engine's several-series count about an object of a ``resourceRules`` query."""
    def note(key: Hashable, count: int, agreed: bool) -> None:
        where = "/".join(k for k in key if k) if isinstance(key, tuple) else str(key)
        several.note(f"{rule.where}.{field}", f"{rule.where}.{field}", field, (rule.where, field, key),
                     f"{'container' if isinstance(key, tuple) else 'node'} {where}", count, agreed)
    return note


def _by_label(samples: list[Sample], label: str, recent: set[str] | None = None,
              several: Several = lambda *_: None) -> dict[str, Sample]:
    """Per value of ``label``, its value under the engine's policy, when non-negative."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        key = s.labels.get(label)
        if key:
            groups.setdefault(key, []).append(s)
    return {k: s for k, s in pick_values(groups, recent, several).items() if s.value >= 0}


def _by_container(samples: list[Sample], rule: ResourceQuery, namespace: str | None,
                  recent: set[ContainerKey] | None = None, several: Several = lambda *_: None,
                  ) -> dict[tuple[str | None, str], dict[str, Sample]]:
    """(namespace, pod) -> container -> its value under the engine's policy, when non-negative; samples without a
    container are pod-level aggregates (cAdvisor's ``container=""``) and are skipped."""
    groups: dict[ContainerKey, list[Sample]] = {}
    for s in samples:
        key = _container_key(s, rule, namespace)
        if key is not None:
            groups.setdefault(key, []).append(s)
    found: dict[tuple[str | None, str], dict[str, Sample]] = {}
    for (ns, pod, container), s in pick_values(groups, recent, several).items():
        if s.value >= 0:
            found.setdefault((ns, pod), {})[container] = s
    return found


def _container_key(sample: Sample, rule: ResourceQuery, namespace: str | None) -> ContainerKey | None:
    pod, container = sample.labels.get(rule.label(POD)), sample.labels.get(rule.container_label)
    ns = namespace if namespace is not None else sample.labels.get(rule.label(NAMESPACE))
    return (ns, pod, container) if pod and container and ns else None


def _labels_of(samples: list[Sample] | None, label: str) -> set[str] | None:
    return None if samples is None else {s.labels.get(label, "") for s in samples}


def _containers_of(samples: list[Sample] | None, rule: ResourceQuery, namespace: str | None,
                   ) -> set[ContainerKey] | None:
    return None if samples is None else {k for s in samples if (k := _container_key(s, rule, namespace))}


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
