"""The rules file, in prometheus-adapter's format (``rules``, ``externalRules``, ``resourceRules``), parsed strictly.

Unknown keys anywhere are errors, as with prometheus-adapter's ``yaml.UnmarshalStrict``. Every regex and
template is compiled here, and every ``metricsQuery`` is rendered with representative arguments and parsed as
PromQL, so a broken rule fails at load with ``<file>: <rule>.<field>: <reason>``. Two extensions:
top-level ``include`` (built-in rule sets, resolved by ``loader``) and per-rule ``missingValue``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml

from adapter.rules import hints, schema
from adapter.rules.errors import QueryError, RulesError
from adapter.rules.freshness import lookback_s
from adapter.rules.mapping import RESOURCE_TEMPLATE_FIELDS, ResourceMapping
from adapter.rules.naming import ANY_NAME, NameMapping, SeriesFilter, compile_regexp, default_as
from adapter.rules.promql import PromQLError, check_label_name
from adapter.rules.queryargs import QUERY_TEMPLATE_FIELDS, render_checked
from adapter.rules.resource_rules import ResourceRules, parse_resource_rules
from adapter.rules.resources import BUILTIN, GroupResource, ResourceError, ResourceTable
from adapter.rules.samples import sample_args
from adapter.rules.shape import check_series_selector
from adapter.rules.template import Template, TemplateError
from adapter.rules.yamlstrict import load_strict

_TOP_KEYS = schema.TOP
_RULE_KEYS = schema.RULE
_RESOURCES_KEYS = schema.RESOURCES
_OVERRIDE_KEYS = schema.OVERRIDE
_NAME_KEYS = schema.NAME
_FILTER_KEYS = schema.FILTER
_SAMPLE_SERIES = "sample_series"


class MissingValue(StrEnum):
    """``missingValue``: what a rule reports for an object Prometheus has no usable sample for.

    ``error`` (the default): an object with no sample, or whose sample is NaN or ±Inf, gets no value; the API
    layer answers an error Status, so the HPA holds its current scale instead of acting on an invented number.
    ``zero``: such objects get 0, as KEDA does; opt in per rule where "no data" really means idle.
    """

    ERROR = "error"
    ZERO = "zero"


@dataclass(frozen=True, eq=False)
class DiscoveryRule:
    """One entry of ``rules`` or ``externalRules``. ``where`` is its position, e.g. ``rules[2]``."""

    source: str
    where: str
    external: bool
    series_query: str
    series_filters: tuple[SeriesFilter, ...]
    resources: ResourceMapping
    name: NameMapping
    metrics_query: Template
    missing_value: MissingValue = MissingValue.ERROR
    lookback_s: float = 0.0  # how far back the query's samples may lie (``freshness.lookback_s``)

    @property
    def describe(self) -> str:
        return f"{self.source}: {self.where}"

    def metric_name(self, series_name: str) -> str | None:
        """The API metric name for a series, or ``None`` if ``seriesFilters`` or ``name.matches`` drop it."""
        if not all(f.accepts(series_name) for f in self.series_filters):
            return None
        return self.name.metric_name(series_name) or None


@dataclass(frozen=True, eq=False)
class RulesConfig:
    """A parsed rules file. ``resource_rules`` (if any) serve ``metrics.k8s.io``. ``table`` is the resource table
    its names were resolved with (the API's discovery, or the built-in one): requests for it resolve with it too."""

    source: str
    rules: tuple[DiscoveryRule, ...] = ()
    external_rules: tuple[DiscoveryRule, ...] = ()
    resource_rules: ResourceRules | None = None
    include: tuple[str, ...] = ()
    table: ResourceTable = field(default=BUILTIN, repr=False)

    def series_queries(self) -> tuple[str, ...]:
        """The distinct ``seriesQuery`` strings, in rule order: one ``/api/v1/series`` call each."""
        return tuple(dict.fromkeys(r.series_query for r in (*self.rules, *self.external_rules)))


def parse_document(text: str, source: str, table: ResourceTable = BUILTIN) -> RulesConfig:
    """Parse one rules document, resource names resolved with ``table``; ``include`` is recorded, not resolved."""
    return _Parser(source, table).document(text)


class _Parser:
    def __init__(self, source: str, table: ResourceTable) -> None:
        self.source = source
        self.table = table

    def fail(self, path: str, reason: str) -> RulesError:
        return RulesError(reason, source=self.source, path=path)

    def document(self, text: str) -> RulesConfig:
        try:
            data = load_strict(text)
        except yaml.YAMLError as exc:
            raise self.fail("", f"invalid YAML: {exc}") from None
        data = {} if data is None else data
        self.mapping(data, "", _TOP_KEYS, what="the top level")
        resource_rules = parse_resource_rules(data.get("resourceRules"), self)
        return RulesConfig(
            source=self.source,
            rules=self.rules(data.get("rules"), "rules", external=False),
            external_rules=self.rules(data.get("externalRules"), "externalRules", external=True),
            resource_rules=resource_rules,
            include=tuple(self.strings(data.get("include"), "include")),
            table=self.table,
        )

    def rules(self, raw: object, key: str, *, external: bool) -> tuple[DiscoveryRule, ...]:
        return tuple(self.rule(item, f"{key}[{i}]", external) for i, item in enumerate(self.sequence(raw, key)))

    def rule(self, raw: object, where: str, external: bool) -> DiscoveryRule:
        data = self.mapping(raw, where, _RULE_KEYS)
        series_query = self.string(data.get("seriesQuery"), f"{where}.seriesQuery", required=True)
        try:
            selector = check_series_selector(series_query)
        except ValueError as exc:
            raise self.fail(f"{where}.seriesQuery", str(exc)) from None
        missing = self.string(data.get("missingValue"), f"{where}.missingValue") or MissingValue.ERROR.value
        if missing not in {m.value for m in MissingValue}:
            raise self.fail(f"{where}.missingValue", f"must be 'error' or 'zero', not {missing!r}")
        rule = DiscoveryRule(
            source=self.source,
            where=where,
            external=external,
            series_query=series_query,
            series_filters=self.filters(data.get("seriesFilters"), f"{where}.seriesFilters"),
            resources=self.resources(data.get("resources"), f"{where}.resources"),
            name=self.name(data.get("name"), f"{where}.name"),
            metrics_query=self.template(data.get("metricsQuery"), f"{where}.metricsQuery", QUERY_TEMPLATE_FIELDS),
            missing_value=MissingValue(missing),
        )
        query = self.check_samples(rule, selector.name or _SAMPLE_SERIES)
        return dataclasses.replace(rule, lookback_s=lookback_s(query))

    def filters(self, raw: object, path: str) -> tuple[SeriesFilter, ...]:
        result = []
        for i, item in enumerate(self.sequence(raw, path)):
            entry = self.mapping(item, f"{path}[{i}]", _FILTER_KEYS)
            if len(entry) != 1:
                raise self.fail(f"{path}[{i}]", "each filter needs exactly one of 'is' or 'isNot'")
            ((key, pattern),) = entry.items()
            result.append(SeriesFilter(self.regex(pattern, f"{path}[{i}].{key}"), negate=key == "isNot"))
        return tuple(result)

    def resources(self, raw: object, path: str) -> ResourceMapping:
        data = self.mapping(raw, path, _RESOURCES_KEYS) if raw is not None else {}
        namespaced = data.get("namespaced", True)
        if not isinstance(namespaced, bool):
            raise self.fail(f"{path}.namespaced", "must be true or false")
        overrides = [
            (self.label(label, f"{path}.overrides"), self.override(target, f"{path}.overrides.{label}"))
            for label, target in self.mapping(data.get("overrides"), f"{path}.overrides", None).items()
        ]
        template_text = self.string(data.get("template"), f"{path}.template")
        template = self.template(template_text, f"{path}.template", RESOURCE_TEMPLATE_FIELDS) if template_text else None
        try:
            return ResourceMapping(tuple(overrides), template, namespaced, self.table)
        except ValueError as exc:
            hint = hints.template_hint(template_text, ("Resource", "Group"))
            raise self.fail(f"{path}.template", f"{exc}; {hint}" if hint else str(exc)) from None

    def override(self, raw: object, path: str) -> GroupResource:
        data = self.mapping(raw, path, _OVERRIDE_KEYS)
        resource = self.string(data.get("resource"), f"{path}.resource", required=True)
        group = self.string(data.get("group"), f"{path}.group")
        try:
            gr = self.table.normalise(resource, group if group else None)
        except ResourceError as exc:
            raise self.fail(f"{path}.resource", exc.reason) from None
        if not gr.group and not self.table.is_known(gr):
            raise self.fail(f"{path}.resource", f"unknown resource {resource!r}; give the group of a custom resource")
        return gr

    def name(self, raw: object, path: str) -> NameMapping:
        data = self.mapping(raw, path, _NAME_KEYS) if raw is not None else {}
        matches = self.string(data.get("matches"), f"{path}.matches")
        as_ = self.string(data.get("as"), f"{path}.as")
        if not matches and not as_:
            return NameMapping()  # the series name, unchanged
        # As in prometheus-adapter (pkg/naming/metric_namer.go), a missing 'matches' is '.*': 'as' alone names
        # every series of the rule, e.g. {as: DCGM_FI_DEV_GPU_UTIL_AVG}.
        pattern = self.regex(matches, f"{path}.matches") if matches else ANY_NAME
        if not as_:
            try:
                as_ = default_as(pattern)
            except ValueError as exc:
                raise self.fail(f"{path}.as", str(exc)) from None
        return NameMapping(pattern, as_)

    def check_samples(self, rule: DiscoveryRule, series: str) -> str:
        """Render the rule's query for each shape of request; the first rendering is returned."""
        try:
            cases = list(sample_args(rule.resources, external=rule.external, series=series))
        except PromQLError as exc:
            raise self.fail(f"{rule.where}.resources.template", f"does not render a label name: {exc}") from None
        rendered = []
        for case, args in cases:
            try:
                rendered.append(render_checked(rule.metrics_query, args))
            except QueryError as exc:
                reason = f"renders invalid PromQL for {case}: {exc}"
                hint = hints.template_hint(rule.metrics_query.source, ("Series", "LabelMatchers", "GroupBy"))
                raise self.fail(f"{rule.where}.metricsQuery", f"{reason}; {hint}" if hint else reason) from None
        return rendered[0]

    def template(self, raw: object, path: str, fields: Mapping[str, Any]) -> Template:
        text = self.string(raw, path, required=True)
        try:
            return Template.parse(text, fields)
        except TemplateError as exc:
            raise self.fail(path, f"invalid template {text!r}: {exc}") from None

    def regex(self, raw: object, path: str) -> re.Pattern[str]:
        try:
            return compile_regexp(self.string(raw, path, required=True))
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None

    def label(self, raw: object, path: str) -> str:
        try:
            return check_label_name(self.string(raw, path, required=True))
        except PromQLError as exc:
            raise self.fail(path, str(exc)) from None

    def mapping(self, raw: object, path: str, keys: tuple[str, ...] | None, what: str = "") -> dict[Any, Any]:
        """``raw`` as a mapping (``None`` → empty); with ``keys``, any other key is an error."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            reason = f"{what + ' ' if what else ''}must be a mapping, not {_yaml_type(raw)}"
            raise self.fail(path, hints.not_a_mapping(path, raw, reason))
        for key in raw:
            if keys is not None and key not in keys:
                where = f"{path}.{key}" if path else str(key)
                raise self.fail(where, hints.unknown_field(where, key, keys))
        return raw

    def sequence(self, raw: object, path: str) -> list[Any]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self.fail(path, hints.not_a_list(path, raw, f"must be a list, not {_yaml_type(raw)}"))
        return raw

    def strings(self, raw: object, path: str) -> list[str]:
        return [self.string(item, f"{path}[{i}]", required=True) for i, item in enumerate(self.sequence(raw, path))]

    def string(self, raw: object, path: str, *, required: bool = False) -> str:
        if raw is None or raw == "":
            if required:
                raise self.fail(path, "is required")
            return ""
        if not isinstance(raw, str):
            raise self.fail(path, f"must be a string, not {_yaml_type(raw)}")
        return raw


def _yaml_type(value: object) -> str:
    """What the file gave, as YAML writes it (``false``, not Python's ``False``)."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return f"{value!r}"
