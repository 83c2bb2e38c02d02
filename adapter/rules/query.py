"""Rendering a rule's ``metricsQuery`` for a request (pure). Every request value enters PromQL quoted.

``.LabelMatchers`` is built as prometheus-adapter builds it: the metric label selector's matchers, then the
namespace matcher, then (custom metrics) the object matcher, ``="name"`` for one object or an escaped
``=~"a|b"`` for several. ``.LabelValuesByName`` holds the same parts by label, in the same order (a later part
replacing an earlier one on the same label): the selector's values joined by ``|``, the namespace, the object
names joined by ``|``; each value regex-escaped and string-escaped, ready for ``label=~"<<.LabelValuesByName.label>>"``.
The providers render them (``adapter.provider.custom``/``external``); the rules' load-time check parses each shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from adapter.rules.catalogue import Binding
from adapter.rules.errors import QueryError
from adapter.rules.promql import PromQLError, matcher, one_of
from adapter.rules.queryargs import QueryArgs, regex_values


def custom_args(
    binding: Binding, *, namespace: str | None, names: Sequence[str] | None, metric_matchers: Sequence[str],
    metric_values: Iterable[tuple[str, str]] = (), with_values: bool = True, extra_group_by: Sequence[str] = (),
) -> QueryArgs:
    """The template arguments for ``names`` in ``namespace`` (prometheus-adapter's ``metricsQuery.Build``).

    ``names=None`` asks for every object that has series: the object matcher becomes ``label!=""`` and
    ``.LabelValuesByName`` holds ``.+`` for the object label.

    ``metric_matchers`` are PromQL matchers already rendered with ``adapter.rules.promql`` from the request's
    ``metricLabelSelector``; ``metric_values`` its ``.LabelValuesByName`` entries (``selectors.to_label_values``).
    No namespace matcher is added when the binding has no namespace label (root-scoped objects; rules that match
    objects by name alone); ``namespace`` is then ignored. ``extra_group_by`` follows the object label in
    ``.GroupBy`` (upstream's ``extraGroupBy``; no request sets it).
    """
    label = binding.resource_label
    if label is None:
        raise QueryError(f"metric {binding.metric!r} is an external metric, not a custom one")
    if names is not None and not names:
        raise QueryError("no object names to query")
    if binding.namespace_label is not None and namespace is None:
        raise QueryError(f"{binding.group_resource} are namespaced: the request must name a namespace")
    matchers = list(metric_matchers)
    values = dict(metric_values) if with_values else {}
    try:
        if binding.namespace_label is not None and namespace is not None:
            matchers.append(matcher(binding.namespace_label, "=", namespace))
            if with_values:
                values[binding.namespace_label] = regex_values([namespace])
        matchers.append(one_of(label, names) if names is not None else matcher(label, "!=", ""))
    except PromQLError as exc:
        raise QueryError(str(exc)) from None
    if with_values:
        values[label] = regex_values(names) if names is not None else ".+"
    return QueryArgs(binding.series, tuple(matchers), (label, *extra_group_by), values)


def external_args(binding: Binding, *, namespace: str | None, metric_matchers: Sequence[str],
                  metric_values: Iterable[tuple[str, str]] = (), group_by: Sequence[str] = ()) -> QueryArgs:
    """The template arguments for an external metric (upstream's ``BuildExternal``): the selector's matchers, then
    the namespace matcher, only for a namespaced rule with a label for it. ``.GroupBy`` is ``group_by``, which no
    request sets (upstream's ``QueryForExternalSeries`` passes none either)."""
    matchers = list(metric_matchers)
    values = dict(metric_values)
    if binding.namespace_label is not None and namespace is not None:
        try:
            matchers.append(matcher(binding.namespace_label, "=", namespace))
        except PromQLError as exc:
            raise QueryError(str(exc)) from None
        values[binding.namespace_label] = regex_values([namespace])
    return QueryArgs(binding.series, tuple(matchers), tuple(group_by), values)


def result_object_name(binding: Binding, sample_labels: Mapping[str, str]) -> str | None:
    """The object a returned sample belongs to: its resource label's value (``None`` if absent or external)."""
    if binding.resource_label is None:
        return None
    return sample_labels.get(binding.resource_label) or None
