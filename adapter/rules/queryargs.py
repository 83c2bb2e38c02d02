"""The arguments a ``metricsQuery`` template sees (prometheus-adapter's ``queryTemplateArgs``) and rendering."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from adapter.rules.promql import quote, regex_alternation
from adapter.rules.shape import check_query
from adapter.rules.template import FieldKind, Template, Value

QUERY_TEMPLATE_FIELDS: Mapping[str, FieldKind] = {
    "Series": "string",
    "LabelMatchers": "string",
    "GroupBy": "string",
    "GroupBySlice": "list",
    "LabelValuesByName": "map",
}


@dataclass(frozen=True)
class QueryArgs:
    """``label_matchers`` are rendered PromQL matchers; ``label_values`` are already escaped for the inside
    of a double-quoted regex string (``pod=~"<<.LabelValuesByName.pod>>"``)."""

    series: str
    label_matchers: tuple[str, ...] = ()
    group_by: tuple[str, ...] = ()
    label_values: Mapping[str, str] = field(default_factory=dict)

    def template_data(self) -> dict[str, Value]:
        return {
            "Series": self.series,
            "LabelMatchers": ",".join(self.label_matchers),
            "GroupBy": ",".join(self.group_by),
            "GroupBySlice": list(self.group_by),
            "LabelValuesByName": dict(self.label_values),
        }


def render_query(template: Template, args: QueryArgs) -> str:
    """A request's query. It is not parsed again here: the template language has no conditionals, a request's
    values enter it only escaped (quoted matchers, regex alternations inside quotes; label names from the rules, or
    from a ``metricLabelSelector``, whose keys ``rules.selectors.to_promql_matchers`` refuses unless they are valid
    label names), and ``render_checked`` parsed the rendering of every shape a request can take when the rules
    were loaded."""
    return template.render(args.template_data())


def render_checked(template: Template, args: QueryArgs) -> str:
    """Render and check that the result is PromQL (``QueryError`` otherwise): for the load-time checks."""
    query = render_query(template, args)
    check_query(query)
    return query


def regex_values(values: Iterable[str]) -> str:
    """Values as a literal-matching regex alternation, escaped to sit inside a PromQL double-quoted string."""
    return quote(regex_alternation(values))[1:-1]
