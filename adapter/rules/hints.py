"""What a rules-file mistake probably meant (pure): the parser's errors, completed with a hint.

Strictness stays prometheus-adapter's (what it refuses is refused, what it accepts is accepted); only the message
says more. Each hint answers a slip found in published material:

* a key one level off: llm-d's "Autoscaling Workloads with HPA and EPP Metrics" guide
  (llm-d/llm-d ``guides/workload-autoscaling/README.hpa-epp.md``) puts ``namespaced: false`` inside
  ``resources.overrides``, where prometheus-adapter reads a label name and exits ("cannot unmarshal !!bool
  `false` into config.GroupResource"); ``namespaced`` is a field of ``resources`` (``ResourceMapping``), honoured
  for ``externalRules`` only (``pkg/naming/metric_namer.go``, ``metrics_query.go`` ``BuildExternal``);
* the prometheus-adapter Helm chart's values pasted as a rules file: its ``rules.custom``, ``rules.external`` and
  ``rules.resource`` become the file's ``rules``, ``externalRules`` and ``resourceRules``
  (prometheus-community/helm-charts ``charts/prometheus-adapter/templates/configmap.yaml``), and ``rules.default``
  / ``rules.existing`` are the chart's own switches (kubernetes-sigs/prometheus-adapter issue #412; the EKS GPU
  guide ships such a values file);
* a metric other than cpu and memory under ``resourceRules`` (prometheus-adapter issue #353);
* misspelt keys (``metricQuery``, ``seriesquery``, ``resource`` for ``resources``, ``match`` for ``matches``), a
  label mapped to a bare resource name instead of ``{resource: ...}``, ``name`` given as a string, templates with
  Helm's ``{{ }}`` instead of ``<< >>``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from adapter.rules.schema import FILTER, LEVELS, NAME, OVERRIDE, RESOURCE_RULE, RESOURCE_RULES, RESOURCES, RULE, TOP

HELM_VALUES = {"custom": "rules", "external": "externalRules", "resource": "resourceRules"}
HELM_SWITCHES = ("default", "existing")

# Keys written for another key of the same level: names other tools (or intuition) use.
ALIASES: Mapping[tuple[str, ...], Mapping[str, str]] = {
    TOP: {"customRules": "rules", "external_rules": "externalRules", "resource_rules": "resourceRules",
          "includes": "include"},
    RULE: {"query": "metricsQuery", "metricQuery": "metricsQuery", "metricsQueries": "metricsQuery",
           "series": "seriesQuery", "seriesSelector": "seriesQuery", "resource": "resources",
           "filters": "seriesFilters", "seriesFilter": "seriesFilters", "metricName": "name"},
    RESOURCES: {"override": "overrides"},
    OVERRIDE: {"apiGroup": "group", "resources": "resource"},
    NAME: {"match": "matches", "regex": "matches", "pattern": "matches", "to": "as", "rename": "as", "alias": "as"},
    RESOURCE_RULE: {"query": "containerQuery", "metricsQuery": "containerQuery and nodeQuery"},
}

_NAMESPACED = "honoured for externalRules only: false keeps the HPA's namespace out of the query"
_RULE_PATH = re.compile(r"^(?:(?:rules|externalRules)\[\d+\]|resourceRules\.(?:cpu|memory))")
_OVERRIDE_PATH = re.compile(r"\.resources\.overrides\.([^.]+)$")


def unknown_field(where: str, key: object, allowed: tuple[str, ...]) -> str:
    """The reason for ``key`` (at ``where``, e.g. ``rules[0].metricQuery``) not being one of ``allowed``."""
    reason = f"unknown field (allowed: {', '.join(allowed)})"
    hint = _unknown_hint(where, str(key), allowed)
    return f"{reason}; {hint}" if hint else reason


def not_a_mapping(path: str, raw: object, reason: str) -> str:
    """``reason`` (``... must be a mapping, not ...``) with what the value at ``path`` was probably meant to be."""
    hint = _mapping_hint(path, raw)
    return f"{reason}; {hint}" if hint else reason


def not_a_list(path: str, raw: object, reason: str) -> str:
    hint = _list_hint(path, raw)
    return f"{reason}; {hint}" if hint else reason


def template_hint(source: str, fields: Iterable[str]) -> str:
    """For a template written with Helm's delimiters: prometheus-adapter's are ``<< >>``."""
    if "{{" not in source:
        return ""
    return ("prometheus-adapter's templates use << >>, not {{ }}: " + ", ".join(f"<<.{f}>>" for f in fields))


# -- unknown keys ---------------------------------------------------------------------------------------------------


def _unknown_hint(where: str, key: str, allowed: tuple[str, ...]) -> str:
    rule = _rule_path(where)
    if allowed == TOP and key in HELM_VALUES:
        return _helm_values(f"rules.{key}", HELM_VALUES[key])
    if allowed == TOP and key in HELM_SWITCHES:
        return (f"'{key}' is a switch of the prometheus-adapter Helm chart's values (rules.{key}), not a "
                "rules-file key: leave it out")
    same = next((k for k in allowed if k.lower() == key.lower()), None)
    if same is not None:
        return f"did you mean '{same}'? (keys are case-sensitive)"
    alias = ALIASES.get(allowed, {}).get(key)
    if alias is not None:
        if alias in allowed:
            return f"did you mean '{alias}'?"
        return f"{LEVELS[allowed]} takes {alias}, not '{key}'"  # a key of another kind of rule
    for level in _candidates(allowed, where):  # a key valid one level up or down
        if key in level:
            note = f" ({_NAMESPACED})" if key == "namespaced" else ""
            return f"'{key}' belongs in {_place(level, key, rule)}{note}"
    close = _close(key, allowed)
    if close:
        return f"did you mean '{close}'?"
    if allowed == RESOURCE_RULES:
        return ("resourceRules serves metrics.k8s.io, which has only cpu and memory: serve "
                f"'{key}' as a custom metric, with a rule under 'rules'")
    for level in _candidates(allowed, where):  # a misspelt key of another level
        close = _close(key, level)
        if close:
            return f"did you mean '{close}', which belongs in {_place(level, close, rule)}?"
    return ""


def _close(key: str, keys: tuple[str, ...]) -> str | None:
    found = difflib.get_close_matches(key.lower(), [k.lower() for k in keys], n=1, cutoff=0.8)
    return next(k for k in keys if k.lower() == found[0]) if found else None


def _candidates(allowed: tuple[str, ...], where: str) -> list[tuple[str, ...]]:
    """The other levels a key found at ``allowed`` may have been meant for, nearest first."""
    order: list[tuple[str, ...]]
    if allowed == TOP:
        order = [RULE]
    elif where.startswith("resourceRules"):
        order = [RESOURCE_RULE, RESOURCES, OVERRIDE]
    else:
        order = [RULE, RESOURCES, NAME, OVERRIDE, FILTER]
    return [level for level in order if level != allowed]


def _place(level: tuple[str, ...], key: str, rule: str | None) -> str:
    if level == RESOURCE_RULE and rule is None:
        return f"resourceRules.cpu and resourceRules.memory (resourceRules.cpu.{key})"
    if rule is None:
        return "a rule: a list entry under 'rules' (custom metrics) or 'externalRules' (external metrics)"
    if level in (RULE, RESOURCE_RULE):
        return f"the rule ({rule}.{key})"
    if level == RESOURCES:
        return f"'resources' ({rule}.resources.{key})"
    if level == NAME:
        return f"'name' ({rule}.name.{key})"
    if level == OVERRIDE:
        return f"an override, under the label it maps ({rule}.resources.overrides.<label>.{key})"
    return f"an entry of 'seriesFilters' ({rule}.seriesFilters: [{{{key}: <regex>}}])"


def _helm_values(chart_key: str, file_key: str) -> str:
    return (f"'{chart_key}' is the prometheus-adapter Helm chart's values layout; a rules file (--config) holds "
            f"that list as '{file_key}'")


# -- wrong types ----------------------------------------------------------------------------------------------------


def _mapping_hint(path: str, raw: object) -> str:
    rule = _rule_path(path)
    override = _OVERRIDE_PATH.search(path)
    if override and rule:
        label = override.group(1)
        if label in RESOURCES:
            extra = f" ({_NAMESPACED})" if label == "namespaced" else ""
            return (f"each key of 'overrides' is a label, mapped to {{group, resource}}: '{label}' belongs one level "
                    f"up, as {rule}.resources.{label}: {_yaml(raw)}{extra}")
        if isinstance(raw, str) and raw:
            return f"a label maps to a group-resource: write {label}: {_group_resource(raw)}"
    if path.endswith(".resources.overrides") and isinstance(raw, list):
        return "'overrides' maps each label to a group-resource, e.g. {namespace: {resource: namespace}}"
    if path.endswith(".name") and rule and isinstance(raw, str) and raw:
        return (f"to serve the series under another name write name: {{as: {raw}}} (or {{matches: <regex>, "
                "as: <name>}}); to keep the series' name, leave 'name' out")
    if path.endswith(".resources") and rule and isinstance(raw, str) and raw:
        if "<<" in raw:
            return f"write resources: {{template: {_yaml(raw)}}}"
        return "write resources: {overrides: {<label>: {resource: <resource>}}} or {template: <<.Resource>>}"
    if re.search(r"\.seriesFilters\[\d+\]$", path) and isinstance(raw, str):
        return f"write {{is: {_yaml(raw)}}} (keep series whose name matches) or {{isNot: {_yaml(raw)}}}"
    if path == "" and isinstance(raw, list):
        return ("a rules file is a mapping: put the list of rules under 'rules:' (custom metrics) or "
                "'externalRules:' (external metrics)")
    return ""


def _list_hint(path: str, raw: object) -> str:
    if path in ("rules", "externalRules") and isinstance(raw, dict):
        chart = [key for key in raw if key in HELM_VALUES or key in HELM_SWITCHES]
        if chart:
            moves = ", ".join(f"rules.{k} -> {HELM_VALUES[k]}" for k in raw if k in HELM_VALUES)
            return ("this is the prometheus-adapter Helm chart's values layout (rules.custom, rules.external, "
                    "rules.resource, rules.default); a rules file (--config) has top-level 'rules', "
                    "'externalRules' and 'resourceRules'" + (f" ({moves})" if moves else ""))
        if any(key in RULE for key in raw):
            return "a list of rules: start each rule with '- '"
    if path.endswith(".seriesFilters") and isinstance(raw, dict):
        return "a list of filters: seriesFilters: [{isNot: <regex>}]"
    if path == "include" and isinstance(raw, str):
        return f"write include: [{raw}]"
    return ""


# -- helpers --------------------------------------------------------------------------------------------------------


def _rule_path(path: str) -> str | None:
    found = _RULE_PATH.match(path)
    return found.group(0) if found else None


def _group_resource(text: str) -> str:
    resource, dot, group = text.partition(".")
    return f"{{group: {group}, resource: {resource}}}" if dot and group else f"{{resource: {text}}}"


def _yaml(value: object) -> str:
    """``value`` as it would be written in YAML (``false``, not ``False``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)

