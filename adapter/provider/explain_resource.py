"""Explain a ``metrics.k8s.io`` request: the objects selected, each ``resourceRules`` query as rendered, Prometheus'
raw samples (which ones made an item, which were left out and why), and the items or the Status the API answers.

It runs :class:`ResourceMetrics` itself, recording what it asked Prometheus, so it shows exactly what the API does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from adapter.api.resource_metrics import (
    NodeUsage,
    PodUsage,
    ResourcePath,
    node_metrics,
    parse_resource_path,
    pod_metrics,
)
from adapter.api.serialise import rfc3339
from adapter.api.status import ApiError, bad_request, not_found
from adapter.prometheus.client import Sample
from adapter.provider.engine import Engine
from adapter.provider.resource import QUERY_LABELS, ResourceMetrics
from adapter.rules.resource_rules import NAMESPACE, NODE, POD, ResourceRules

if TYPE_CHECKING:  # rich is imported when a report is rendered, never by the server
    from rich.console import Console

class _Recording(ResourceMetrics):
    """ResourceMetrics that keeps the queries it sent, their answers and the object names it selected."""

    def __init__(self, engine: Engine, rules: Callable[[], ResourceRules | None]) -> None:
        super().__init__(engine, rules)
        self.queries: tuple[str, str] | None = None
        self.answers: tuple[list[Sample], list[Sample]] = ([], [])
        self.freshness: dict[str, list[Sample]] = {}  # rule label -> its freshness query's answer
        self.selected: list[str] | None = None

    async def _query(self, queries: tuple[str, str], extra: tuple[str, ...] = (),
                     extra_labels: tuple[str, ...] = ()) -> list[list[Sample]]:
        self.queries = queries
        answers = await super()._query(queries, extra, extra_labels)
        self.answers = (answers[0], answers[1])
        self.freshness = dict(zip(extra_labels, answers[2:], strict=True))
        return answers

    async def _names(self, gr: Any, namespace: str | None, label_selector: str) -> list[str] | None:
        self.selected = await super()._names(gr, namespace, label_selector)
        return self.selected


def parse_resource_request(rest: str) -> ResourcePath:
    path = parse_resource_path(rest)
    if path is None:
        raise bad_request("explain needs a metrics request path (nodes[/NAME], pods, namespaces/NS/pods[/NAME])")
    return path


async def explain_resource(engine: Engine, rules: Callable[[], ResourceRules | None], version: str, rest: str,
                           label_selector: str = "") -> dict[str, Any]:
    """The explanation of ``/apis/metrics.k8s.io/<version>/<rest>`` as JSON-ready data."""
    if version != "v1beta1" or rules() is None:
        raise not_found()
    path = parse_resource_request(rest)
    recording = _Recording(engine, rules)
    request = {"path": f"/apis/metrics.k8s.io/{version}/{rest}", "group": "metrics.k8s.io", "version": version,
               "resource": path.resource, "namespace": path.namespace, "name": path.name,
               "labelSelector": label_selector}
    status = None
    answer: list[NodeUsage] | list[PodUsage] = []
    try:
        if path.resource == "nodes":
            answer = await recording.nodes(path.name, label_selector)
        else:
            answer = await recording.pods(path.namespace, path.name, label_selector)
    except ApiError as exc:
        status = exc.body()
    current = rules()
    assert current is not None
    window = current.window_s
    items = [node_metrics(u, window) if isinstance(u, NodeUsage) else pod_metrics(u, window) for u in answer]
    used = {(getattr(u, "namespace", None), u.name) for u in answer}
    containers: set[tuple[str | None, str, str]] = {(u.namespace, u.name, c) for u in answer
                                                    if isinstance(u, PodUsage) for c, _ in u.containers}
    queries = []
    for where, rule, promql, samples in zip(QUERY_LABELS, (current.cpu, current.memory), recording.queries or ("", ""),
                                            recording.answers, strict=True):
        if not promql:
            continue
        why = _Why(samples, recording.freshness.get(where), rule, path)
        queries.append({"rule": f"{where}.{'nodeQuery' if path.resource == 'nodes' else 'containerQuery'}",
                        "promql": promql,
                        "samples": [_sample(s, rule, path, used, containers, why) for s in samples]})
    names = recording.selected if path.name is None else [path.name]
    return {"request": request,
            "objects": {"labelSelector": label_selector, "names": names,
                        "withValues": [f"{ns}/{n}" if ns else n for ns, n in sorted(used, key=str)]},
            "queries": queries, "items": items if status is None else [], "status": status}


class _Why:
    """Why a sample made no value, under the engine's policy: it differs from another series of its object, or the
    object's series had no recent sample (the freshness query's answer, where one was asked)."""

    def __init__(self, samples: list[Sample], fresh: list[Sample] | None, rule: Any, path: ResourcePath) -> None:
        self.rule, self.path = rule, path
        values: dict[tuple[Any, ...], set[float]] = {}
        for s in samples:
            values.setdefault(self.key(s), set()).add(s.value)
        self.conflicts = {k for k, v in values.items() if len(v) > 1}
        self.recent = None if fresh is None else {self.key(s) for s in fresh}

    def key(self, sample: Sample) -> tuple[Any, ...]:
        labels, rule = sample.labels, self.rule
        if self.path.resource == "nodes":
            return (labels.get(rule.label(NODE)),)
        ns = self.path.namespace if self.path.namespace is not None else labels.get(rule.label(NAMESPACE))
        return ns, labels.get(rule.label(POD)), labels.get(rule.container_label)

    def reason(self, sample: Sample, what: str) -> str:
        key = self.key(sample)
        if key in self.conflicts:
            return f"the {what} has several series with different values (no value from this rule)"
        if self.recent is not None and key not in self.recent:
            return f"the {what}'s series have no sample within the sample-age limit (--max-sample-age)"
        return _why_not(sample, what)


def _sample(sample: Sample, rule: Any, path: ResourcePath, used: set[tuple[str | None, str]],
            containers: set[tuple[str | None, str, str]], why: _Why) -> dict[str, Any]:
    labels = sample.labels
    entry: dict[str, Any] = {"labels": dict(labels), "value": sample.value if math.isfinite(sample.value) else
                             str(sample.value), "time": rfc3339(sample.timestamp)}
    if path.resource == "nodes":
        node = labels.get(rule.label(NODE))
        entry["object"] = node
        entry["used"] = (None, node) in used
        reason = None if entry["used"] else why.reason(sample, "node")
    else:
        ns = path.namespace if path.namespace is not None else labels.get(rule.label(NAMESPACE))
        pod, container = labels.get(rule.label(POD)), labels.get(rule.container_label)
        entry["object"] = f"{ns}/{pod}" + (f" {container}" if container else "")
        entry["used"] = (ns, pod or "", container or "") in containers
        reason = None if entry["used"] else (
            "no container label (a pod-level aggregate)" if not container else why.reason(sample, "container"))
    if reason:
        entry["unused"] = reason
    return entry


def _why_not(sample: Sample, what: str) -> str:
    if not math.isfinite(sample.value) or sample.value < 0:
        return "not a finite, non-negative value"
    return f"the {what} has no usable sample for the other resource (cpu and memory are both needed)"


def render_resource_text(console: Console, report: dict[str, Any]) -> None:
    from rich.markup import escape

    req = report["request"]
    p = console.print
    p(f"[bold]Request[/bold]  GET {escape(req['path'])}")
    if req["labelSelector"]:
        p(f"  labelSelector: {escape(req['labelSelector'])}")
    objects = report["objects"]
    names = objects["names"]
    p("[bold]Objects[/bold]  " + ("every object with samples" if names is None else escape(", ".join(names))))
    p(f"  with a value: {escape(', '.join(objects['withValues'])) or '(none)'}")
    for query in report["queries"]:
        p(f"[bold]Rule[/bold] {escape(query['rule'])}")
        p(f"  PromQL: {escape(query['promql'])}")
        p(f"  Prometheus answered {len(query['samples'])} sample(s)")
        for s in query["samples"]:
            mark = "[green]used[/green]" if s["used"] else f"[dim]unused: {escape(s.get('unused', ''))}[/dim]"
            p(f"    {mark} {escape(str(s['object']))} = {escape(str(s['value']))} @ {s['time']}")
    if report["status"] is not None:
        status = report["status"]
        p(f"[bold]Answer[/bold]  [red]{status['code']} {status['reason']}: {escape(status['message'])}[/red]")
        return
    p(f"[bold]Answer[/bold]  {len(report['items'])} item(s), window {report['items'][0]['window']}"
      if report["items"] else "[bold]Answer[/bold]  0 item(s)")
    for item in report["items"]:
        meta = item["metadata"]
        name = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        if "usage" in item:
            p(f"  {item['kind']} {escape(name)}: cpu {item['usage']['cpu']}, memory {item['usage']['memory']}"
              f" @ {item['timestamp']}")
            continue
        p(f"  {item['kind']} {escape(name)} @ {item['timestamp']}")
        for c in item["containers"]:
            p(f"    {escape(c['name'])}: cpu {c['usage']['cpu']}, memory {c['usage']['memory']}")
