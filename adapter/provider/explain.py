"""Explain a metric request: the rules used, the rendered PromQL, Prometheus' raw answer, the objects, the items.

The answer to "why does my HPA see no metric?" without ``--v=6`` and pasting URL-decoded queries into
Prometheus. It runs the providers' own planning and querying (``CustomMetrics.explain``,
``ExternalMetrics.explain``), so it shows exactly what the API does. Errors are the API's own Status errors,
raised as ``ApiError``. Used by ``gpu-adapter explain`` and ``GET /debug/explain/<API path>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from adapter.api.paths import VERSIONS, MetricPath, parse_custom_path, parse_external_path
from adapter.api.resource_metrics import RESOURCE_GROUP
from adapter.api.serialise import (
    CUSTOM_GROUP,
    EXTERNAL_GROUP,
    ExternalValue,
    ObjectValue,
    external_metric_value_list,
    metric_value_list,
    rfc3339,
)
from adapter.api.status import ApiError, bad_request, not_found
from adapter.prometheus.client import PrometheusClient, PrometheusConfig, Sample
from adapter.prometheus.discovery import Discovery
from adapter.provider.custom import CustomMetrics
from adapter.provider.engine import Engine, Explanation
from adapter.provider.explain_resource import explain_resource, render_resource_text
from adapter.provider.external import ExternalMetrics
from adapter.provider.resolvers import ObjectResolver
from adapter.rules import Binding, RulesConfig, result_object_name
from adapter.rules.resource_rules import ResourceRules
from adapter.rulesfile.loader import rule_label

if TYPE_CHECKING:  # rich is imported when a report is rendered, never by the server
    from rich.console import Console


@dataclass(frozen=True)
class Target:
    """A metric request path: custom (``metric_path`` set) or external (``namespace``, ``metric``)."""

    group: str
    version: str
    metric_path: MetricPath | None = None
    namespace: str = ""
    metric: str = ""


def parse_api_path(path: str) -> Target:
    """``/apis/<group>/<version>/...`` of a metric request, checked as the API checks it."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if len(parts) < 3 or parts[0] != "apis" or parts[1] not in (CUSTOM_GROUP, EXTERNAL_GROUP):
        raise not_found()
    group, version, rest = parts[1], parts[2], "/".join(parts[3:])
    if group == CUSTOM_GROUP:
        if version not in VERSIONS:
            raise not_found()
        metric_path = parse_custom_path(rest)
        if metric_path is None:
            raise bad_request("explain needs a metric request path, not a discovery path")
        return Target(group, version, metric_path=metric_path)
    if version != "v1beta1":
        raise not_found()
    external = parse_external_path(rest)
    if external is None:
        raise bad_request("explain needs a metric request path, not a discovery path")
    return Target(group, version, namespace=external[0], metric=external[1])


def query_selectors(path: str) -> tuple[str, str]:
    """``labelSelector`` and ``metricLabelSelector`` from a path's query string, if it has one."""
    query = parse_qs(path.split("?", 1)[1]) if "?" in path else {}
    return query.get("labelSelector", [""])[0], query.get("metricLabelSelector", [""])[0]


async def explain(engine: Engine, path: str, label_selector: str = "",
                  metric_label_selector: str = "",
                  resource_rules: Callable[[], ResourceRules | None] = lambda: None) -> dict[str, Any]:
    """The explanation as JSON-ready data (``metrics.k8s.io`` paths are answered from ``resource_rules``)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if len(parts) >= 3 and parts[:2] == ["apis", RESOURCE_GROUP]:
        return await explain_resource(engine, resource_rules, parts[2], "/".join(parts[3:]), label_selector)
    target = parse_api_path(path)
    request: dict[str, Any] = {"path": path.split("?", 1)[0], "group": target.group, "version": target.version,
                               "labelSelector": label_selector}
    if target.metric_path is not None:
        mp = target.metric_path
        request |= {"namespace": mp.namespace, "resource": mp.resource, "name": mp.name, "metric": mp.metric,
                    "metricLabelSelector": metric_label_selector}
        found = await CustomMetrics(engine).explain(mp, label_selector, metric_label_selector)
        objects: dict[str, Any] | None = {
            "labelSelector": label_selector,
            "names": list(found.plan.names) if found.plan.names is not None else None,
            "withValues": sorted(found.chosen)}
        items = metric_value_list(target.version, _objects(found.items))["items"] if found.items else []
    else:
        request |= {"namespace": target.namespace, "metric": target.metric}
        found = await ExternalMetrics(engine).explain(target.namespace, target.metric, label_selector)
        objects = None
        items = external_metric_value_list(_externals(found.items))["items"] if found.items else []
    return {"request": request, "objects": objects, "rules": _rules(found), "items": items,
            "status": found.error.body() if found.error is not None else None}


async def explain_live(prometheus: PrometheusConfig, rules: RulesConfig, path: str, label_selector: str = "",
                       metric_label_selector: str = "", *, max_age_s: float = 300.0,
                       resolver: ObjectResolver | None = None) -> dict[str, Any]:
    """One series relist against Prometheus, then ``explain``. ``resolver`` resolves ``labelSelector`` to object
    names (a Kubernetes-backed one when there is a cluster; without one such requests are refused as the
    standalone API refuses them)."""
    client = PrometheusClient(prometheus)
    try:
        discovery = Discovery(client, lambda: rules, max_age_s=max_age_s)
        if not await discovery.relist():
            raise ApiError(503, f"cannot list series from {prometheus.url}: {discovery.last_error}")
        # The sample-age limit `serve` applies by default (--max-sample-age): 3 scrape intervals.
        engine = Engine(client, lambda: discovery.catalogue, resolver,
                        max_sample_age=lambda: discovery.default_max_sample_age_s)
        return await explain(engine, path, label_selector, metric_label_selector, lambda: rules.resource_rules)
    finally:
        await client.aclose()


def _objects(items: Sequence[ObjectValue | ExternalValue]) -> list[ObjectValue]:
    return [i for i in items if isinstance(i, ObjectValue)]


def _externals(items: Sequence[ObjectValue | ExternalValue]) -> list[ExternalValue]:
    return [i for i in items if isinstance(i, ExternalValue)]


def _rules(found: Explanation) -> list[dict[str, Any]]:
    rules = []
    for i, (binding, promql, samples) in enumerate(zip(found.plan.bindings, found.plan.queries, found.results,
                                                       strict=True)):
        rule = binding.rule
        rules.append({
            "rule": rule_label(rule), "source": rule.source, "seriesQuery": rule.series_query,
            "name": {"matches": rule.name.matches.pattern if rule.name.matches else None,
                     "as": rule.name.as_ if rule.name.matches else None},
            "metricsQuery": rule.metrics_query.source, "missingValue": rule.missing_value.value,
            "series": binding.series, "resourceLabel": binding.resource_label,
            "namespaceLabel": binding.namespace_label, "promql": promql,
            "freshnessPromql": found.plan.freshness[i] if i < len(found.plan.freshness) else None,
            "samples": [_sample(found, binding, i, s) for s in samples]})
    return rules


def _sample(found: Explanation, binding: Binding, index: int, sample: Sample) -> dict[str, Any]:
    entry: dict[str, Any] = {"labels": dict(sample.labels), "value": prometheus_value(sample.value),
                             "timestamp": sample.timestamp, "time": rfc3339(sample.timestamp)}
    if binding.resource_label is not None:
        name = result_object_name(binding, sample.labels)
        entry["object"] = name
        entry["used"] = name is not None and found.chosen.get(name) is sample
    else:  # external: the first rule's finite (and recent) samples are the items
        entry["used"] = index == 0 and any(item.labels == sample.labels and item.value == sample.value
                                           for item in found.items if isinstance(item, ExternalValue))
    return entry


def prometheus_value(value: float) -> str:
    """As Prometheus writes it: ``75``, ``100.5``, ``NaN``, ``+Inf``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def render_text(console: Console, report: dict[str, Any]) -> None:
    """The explanation for a terminal."""
    from rich.markup import escape

    if report["request"]["group"] == RESOURCE_GROUP:
        render_resource_text(console, report)
        return
    req = report["request"]
    p = console.print
    p(f"[bold]Request[/bold]  GET {escape(req['path'])}")
    for key in ("labelSelector", "metricLabelSelector"):
        if req.get(key):
            p(f"  {key}: {escape(req[key])}")
    objects = report["objects"]
    if objects is not None:
        if objects["names"] is None:
            p("[bold]Objects[/bold]  every object with series (no labelSelector)")
        else:
            selector = f"labelSelector {escape(objects['labelSelector'])} -> " if objects["labelSelector"] else ""
            p(f"[bold]Objects[/bold]  {selector}{escape(', '.join(objects['names']))}")
        p(f"  with a value: {escape(', '.join(objects['withValues'])) or '(none)'}")
    for rule in report["rules"]:
        p(f"[bold]Rule[/bold] {escape(rule['rule'])} ({escape(rule['source'])}), series {escape(rule['series'])}")
        p(f"  seriesQuery:  {escape(rule['seriesQuery'])}")
        if rule["name"]["matches"] is not None:
            p(f"  name:         matches {escape(rule['name']['matches'])} as {escape(rule['name']['as'])}")
        p(f"  metricsQuery: {escape(rule['metricsQuery'])}")
        p(f"  PromQL:       {escape(rule['promql'])}")
        if rule.get("freshnessPromql"):
            p(f"  freshness:    {escape(rule['freshnessPromql'])}  (objects without a row: samples too old)")
        p(f"  Prometheus answered {len(rule['samples'])} sample(s)")
        for s in rule["samples"]:
            mark = "[green]used[/green]" if s["used"] else "[dim]unused[/dim]"
            labels = ", ".join(f'{k}="{v}"' for k, v in sorted(s["labels"].items()))
            p(f"    {mark} {escape(s['value'])} @ {s['time']} {{{escape(labels)}}}")
    if report["status"] is not None:
        status = report["status"]
        p(f"[bold]Answer[/bold]  [red]{status['code']} {status['reason']}: {escape(status['message'])}[/red]")
        return
    p(f"[bold]Answer[/bold]  {len(report['items'])} item(s)")
    for item in report["items"]:
        described = item.get("describedObject")
        what = f"{described['kind']} {described['name']}" if described else item["metricName"]
        if not described and item["metricLabels"]:
            what += " {" + ", ".join(f'{k}="{v}"' for k, v in sorted(item["metricLabels"].items())) + "}"
        p(f"  {escape(what)}: {escape(item['value'])} @ {item['timestamp']}")
