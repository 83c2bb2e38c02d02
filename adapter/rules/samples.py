"""Representative ``metricsQuery`` arguments, so a rule whose query cannot render to PromQL fails at load.

The cases are those a request can produce: one object, several objects, a metric label selector, a
root-scoped object (no namespace matcher); for external rules with and without the namespace matcher.
"""

from __future__ import annotations

from collections.abc import Iterator

from adapter.rules.mapping import ResourceMapping
from adapter.rules.promql import matcher, one_of
from adapter.rules.queryargs import QueryArgs, regex_values
from adapter.rules.resources import NAMESPACES, PODS

_OBJECTS = ("sample-object.a", "sample-object.b")
_NAMESPACE = "sample-namespace"
_METRIC_MATCHERS = (matcher("code", "=~", "5.."), matcher("le", "!=", "+Inf"))


def sample_args(resources: ResourceMapping, *, external: bool, series: str) -> Iterator[tuple[str, QueryArgs]]:
    """``(case description, arguments)`` pairs covering the shapes a request can render."""
    ns_label = resources.label_for_resource(NAMESPACES)
    if external:
        ns = (matcher(ns_label, "=", _NAMESPACE),) if ns_label and resources.namespaced else ()
        values = {ns_label: _NAMESPACE} if ns and ns_label else {}
        yield "no metric label selector", QueryArgs(series, ns, (), values)
        yield "a metric label selector", QueryArgs(series, _METRIC_MATCHERS + ns, (), values)
        return
    label = _resource_label(resources) or "pod"
    values = dict.fromkeys((name for name, _ in resources.overrides), regex_values(_OBJECTS))
    values[label] = regex_values(_OBJECTS)
    ns = ()
    if ns_label:
        values[ns_label] = _NAMESPACE
        ns = (matcher(ns_label, "=", _NAMESPACE),)
    one = (*ns, matcher(label, "=", _OBJECTS[0]))
    several = (*ns, one_of(label, _OBJECTS))
    yield "one object", QueryArgs(series, one, (label,), values)
    yield "several objects", QueryArgs(series, several, (label,), values)
    yield "a metric label selector", QueryArgs(series, _METRIC_MATCHERS + several, (label,), values)
    if ns:
        yield "a root-scoped object", QueryArgs(series, (matcher(label, "=", _OBJECTS[0]),), (label,), values)


def _resource_label(resources: ResourceMapping) -> str | None:
    for name, gr in resources.overrides:
        if gr != NAMESPACES:
            return name
    return resources.label_for_resource(PODS) or resources.label_for_resource(NAMESPACES)
