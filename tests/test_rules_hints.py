"""Rules-file errors that say what was probably meant (adapter.rules.hints).

Each case: a rules file with a slip found in published material (its source named), the part of the message that
must name the fix, and the file as the message says to write it, which must then load. Strictness is unchanged:
every slip is still refused (prometheus-adapter's ``yaml.UnmarshalStrict`` refuses each of them too)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest

from adapter.rules import RulesError
from adapter.rulesfile.loader import parse_rules

pytestmark = pytest.mark.unit

QUERY = "metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'"
EXTERNAL_QUERY = "metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'"
BY_TEMPLATE = "resources: {template: <<.Resource>>}"
HELM_DELIMITERS_QUERY = "metricsQuery: 'sum({{.Series}}{ {{.LabelMatchers}} }) by ({{.GroupBy}})'"


@dataclass(frozen=True)
class Slip:
    source: str  # where the slip was seen
    text: str
    message: str  # the whole message must contain this
    fixed: str | None  # the file written as the message says (None: nothing to load, e.g. a switch to drop)


def doc(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def rule(series: str, *keys: str, query: str = QUERY, under: str = "rules") -> str:
    """A rules file of one rule under ``under``: its seriesQuery, then ``keys`` (YAML, a key's nested lines indented
    below it), then its metricsQuery."""
    lines = [f"- seriesQuery: '{series}'", *(f"  {line}" for key in keys for line in key.splitlines()), f"  {query}"]
    return f"{under}:\n" + "".join(f"{line}\n" for line in lines)


def external_rule(series: str, *keys: str, query: str = EXTERNAL_QUERY) -> str:
    return rule(series, *keys, query=query, under="externalRules")


# llm-d's EPP queue rule as published: 'namespaced' under 'overrides', where it is taken for a label
LLM_D_EPP_RULE = doc("""
    externalRules:
    - seriesQuery: 'inference_extension_flow_control_queue_size'
      resources:
        overrides:
          namespace:
            resource: "namespace"
          namespaced: false
      name:
        as: "epp_queue_size"
      metricsQuery: 'sum(inference_extension_flow_control_queue_size{inference_pool="vllm-llama3-8b-instruct"})'
    """)

SLIPS = {
    "namespaced inside overrides (external)": Slip(
        "llm-d/llm-d guides/workload-autoscaling/README.hpa-epp.md, its prometheus-adapter rules",
        LLM_D_EPP_RULE,
        "externalRules[0].resources.overrides.namespaced: must be a mapping, not false; each key of 'overrides' is "
        "a label, mapped to {group, resource}: 'namespaced' belongs one level up, as "
        "externalRules[0].resources.namespaced: false (honoured for externalRules only: false keeps the HPA's "
        "namespace out of the query)",
        LLM_D_EPP_RULE.replace("      namespaced: false", "    namespaced: false"),  # moved one level up
    ),
    "namespaced inside overrides (custom)": Slip(
        "the same slip in a custom rule",
        rule('queue_depth{namespace!=""}',
             "resources: {overrides: {namespace: {resource: namespace}, namespaced: false}}"),
        "'namespaced' belongs one level up, as rules[0].resources.namespaced: false (honoured for externalRules only",
        rule('queue_depth{namespace!=""}',
             "resources: {overrides: {namespace: {resource: namespace}}, namespaced: false}"),
    ),
    "namespaced beside seriesQuery": Slip(
        "prometheus-adapter docs/externalmetrics.md puts it in the rule's resources section",
        external_rule('queue_depth{queue!=""}', "namespaced: false"),
        "externalRules[0].namespaced: unknown field (allowed: seriesQuery, seriesFilters, resources, name, "
        "metricsQuery, missingValue); 'namespaced' belongs in 'resources' (externalRules[0].resources.namespaced)",
        external_rule('queue_depth{queue!=""}', "resources: {namespaced: false}"),
    ),
    "overrides beside seriesQuery": Slip(
        "a key one level off",
        rule('up{namespace!="",pod!=""}', "overrides: {namespace: {resource: namespace}, pod: {resource: pod}}"),
        "'overrides' belongs in 'resources' (rules[0].resources.overrides)",
        rule('up{namespace!="",pod!=""}',
             "resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}"),
    ),
    "template inside overrides": Slip(
        "a key one level off",
        rule('up{namespace!=""}', "resources:\n  overrides:\n    template: <<.Resource>>"),
        "'template' belongs one level up, as rules[0].resources.template: <<.Resource>>",
        rule('up{namespace!=""}', "resources:\n  template: <<.Resource>>"),
    ),
    "as beside seriesQuery": Slip(
        "a key one level off",
        rule('http_requests_total{namespace!="",pod!=""}', BY_TEMPLATE, "as: http_requests_per_second"),
        "'as' belongs in 'name' (rules[0].name.as)",
        rule('http_requests_total{namespace!="",pod!=""}', BY_TEMPLATE, "name: {as: http_requests_per_second}"),
    ),
    "isNot beside seriesQuery": Slip(
        "a key one level off",
        rule('{namespace!="",__name__!~"^container_.*"}', "isNot: .*_total$", BY_TEMPLATE),
        "'isNot' belongs in an entry of 'seriesFilters' (rules[0].seriesFilters: [{isNot: <regex>}])",
        rule('{namespace!="",__name__!~"^container_.*"}', "seriesFilters: [{isNot: .*_total$}]", BY_TEMPLATE),
    ),
    "metricsQuery indented into resources": Slip(
        "a key one level off",
        doc("""
            rules:
            - seriesQuery: 'up{namespace!=""}'
              resources:
                template: <<.Resource>>
                metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
            """),
        "rules[0].resources.metricsQuery: unknown field (allowed: overrides, template, namespaced); 'metricsQuery' "
        "belongs in the rule (rules[0].metricsQuery)",
        rule('up{namespace!=""}', "resources:\n  template: <<.Resource>>"),
    ),
    "resource at the resources level": Slip(
        "a key one level off",
        rule('up{pod!=""}', "resources: {resource: pod}"),
        "'resource' belongs in an override, under the label it maps (rules[0].resources.overrides.<label>.resource)",
        rule('up{pod!=""}', "resources: {overrides: {pod: {resource: pod}}}"),
    ),
    "metricQuery": Slip(
        "misspelt key",
        rule('up{namespace!=""}',
             BY_TEMPLATE, query="metricQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'"),
        "rules[0].metricQuery: unknown field (allowed: seriesQuery, seriesFilters, resources, name, metricsQuery, "
        "missingValue); did you mean 'metricsQuery'?",
        rule('up{namespace!=""}', BY_TEMPLATE),
    ),
    "seriesquery": Slip(
        "misspelt key (case)",
        doc(f"""
            rules:
            - seriesquery: 'up{{namespace!=""}}'
              {BY_TEMPLATE}
              {QUERY}
            """),
        "did you mean 'seriesQuery'? (keys are case-sensitive)",
        rule('up{namespace!=""}', BY_TEMPLATE),
    ),
    "seriesQuerry": Slip(
        "misspelt key",
        doc(f"""
            rules:
            - seriesQuerry: 'up{{namespace!=""}}'
              {BY_TEMPLATE}
              {QUERY}
            """),
        "did you mean 'seriesQuery'?",
        None,
    ),
    "resource for resources": Slip(
        "misspelt key",
        rule('up{namespace!=""}', "resource: {template: <<.Resource>>}"),
        "rules[0].resource: unknown field (allowed: seriesQuery, seriesFilters, resources, name, metricsQuery, "
        "missingValue); did you mean 'resources'?",
        None,
    ),
    "resources for resource in an override": Slip(
        "misspelt key",
        rule('up{pod!=""}', "resources: {overrides: {pod: {resources: pod}}}"),
        "rules[0].resources.overrides.pod.resources: unknown field (allowed: group, resource); did you mean "
        "'resource'?",
        None,
    ),
    "match for matches": Slip(
        "misspelt key",
        rule('http_requests_total{namespace!=""}', BY_TEMPLATE, "name: {match: '^(.*)_total$', as: '${1}_per_second'}"),
        "rules[0].name.match: unknown field (allowed: matches, as); did you mean 'matches'?",
        rule('http_requests_total{namespace!=""}',
             BY_TEMPLATE, "name: {matches: '^(.*)_total$', as: '${1}_per_second'}"),
    ),
    "to for as": Slip(
        "another tool's word for name.as",
        rule('http_requests_total{namespace!=""}',
             BY_TEMPLATE, "name: {matches: '^(.*)_total$', to: '${1}_per_second'}"),
        "rules[0].name.to: unknown field (allowed: matches, as); did you mean 'as'?",
        None,
    ),
    "name as a string": Slip(
        "name given the API name directly",
        rule('DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}', BY_TEMPLATE, "name: gpu_utilization"),
        "rules[0].name: must be a mapping, not 'gpu_utilization'; to serve the series under another name write "
        "name: {as: gpu_utilization}",
        rule('DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}', BY_TEMPLATE, "name: {as: gpu_utilization}"),
    ),
    "override to a bare resource name": Slip(
        "a label mapped to a resource name instead of {resource: ...}",
        rule('up{namespace!="",pod!=""}',
             "resources:\n  overrides:\n    namespace: namespace\n    pod: {resource: pod}"),
        "rules[0].resources.overrides.namespace: must be a mapping, not 'namespace'; a label maps to a "
        "group-resource: write namespace: {resource: namespace}",
        rule('up{namespace!="",pod!=""}',
             "resources:\n  overrides:\n    namespace: {resource: namespace}\n    pod: {resource: pod}"),
    ),
    "override to a qualified resource name": Slip(
        "the same, with an API group",
        rule('up{namespace!="",deployment!=""}',
             "resources: {overrides: {namespace: {resource: namespace}, deployment: deployments.apps}}"),
        "write deployment: {group: apps, resource: deployments}",
        rule('up{namespace!="",deployment!=""}',
             "resources:\n"
             "  overrides: {namespace: {resource: namespace}, deployment: {group: apps, resource: deployments}}"),
    ),
    "overrides as a list": Slip(
        "a list where a mapping goes",
        rule('up{namespace!=""}', "resources:\n  overrides:\n  - namespace: {resource: namespace}"),
        "rules[0].resources.overrides: must be a mapping, not a list; 'overrides' maps each label to a "
        "group-resource, e.g. {namespace: {resource: namespace}}",
        None,
    ),
    "Helm chart values as the rules file": Slip(
        "kubernetes-sigs/prometheus-adapter issue #412; the EKS GPU guide's prometheus-adapter-values.yaml",
        doc("""
            rules:
              default: false
              custom:
              - seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{exported_namespace!="",exported_pod!=""}'
                resources: {overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}
                metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
              external:
              - seriesQuery: 'queue_depth{queue!=""}'
                resources: {namespaced: false}
                metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'
            """),
        "rules: must be a list, not a mapping; this is the prometheus-adapter Helm chart's values layout "
        "(rules.custom, rules.external, rules.resource, rules.default); a rules file (--config) has top-level "
        "'rules', 'externalRules' and 'resourceRules' (rules.custom -> rules, rules.external -> externalRules)",
        doc("""
            rules:
            - seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{exported_namespace!="",exported_pod!=""}'
              resources: {overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}
              metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
            externalRules:
            - seriesQuery: 'queue_depth{queue!=""}'
              resources: {namespaced: false}
              metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'
            """),
    ),
    "Helm values key external at the top": Slip(
        "the chart's rules block, dedented",
        rule('queue_depth{queue!=""}', "resources: {namespaced: false}", query=EXTERNAL_QUERY, under="external"),
        "external: unknown field (allowed: rules, externalRules, resourceRules, include); 'rules.external' is the "
        "prometheus-adapter Helm chart's values layout; a rules file (--config) holds that list as 'externalRules'",
        external_rule('queue_depth{queue!=""}', "resources: {namespaced: false}"),
    ),
    "Helm values switch at the top": Slip(
        "the chart's rules block, dedented",
        "default: false\nrules: []\n",
        "default: unknown field (allowed: rules, externalRules, resourceRules, include); 'default' is a switch of "
        "the prometheus-adapter Helm chart's values (rules.default), not a rules-file key: leave it out",
        "rules: []\n",
    ),
    "a rule at the top level": Slip(
        "a rule without its list",
        doc(f"""
            seriesQuery: 'up{{namespace!=""}}'
            {BY_TEMPLATE}
            {QUERY}
            """),
        "seriesQuery: unknown field (allowed: rules, externalRules, resourceRules, include); 'seriesQuery' belongs "
        "in a rule: a list entry under 'rules' (custom metrics) or 'externalRules' (external metrics)",
        None,
    ),
    "a rule not in a list": Slip(
        "a rule without its dash",
        doc(f"""
            rules:
              seriesQuery: 'up{{namespace!=""}}'
              {BY_TEMPLATE}
              {QUERY}
            """),
        "rules: must be a list, not a mapping; a list of rules: start each rule with '- '",
        rule('up{namespace!=""}', BY_TEMPLATE),
    ),
    "a GPU metric under resourceRules": Slip(
        "kubernetes-sigs/prometheus-adapter issue #353",
        doc("""
            resourceRules:
              gpu-memory:
                containerQuery: 'sum(DCGM_FI_DEV_FB_USED{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
            """),
        "resourceRules.gpu-memory: unknown field (allowed: cpu, memory, window); resourceRules serves "
        "metrics.k8s.io, which has only cpu and memory: serve 'gpu-memory' as a custom metric, with a rule under "
        "'rules'",
        None,
    ),
    "metricsQuery in a resource rule": Slip(
        "a discovery rule's key in resourceRules",
        doc("""
            resourceRules:
              window: 5m
              cpu:
                metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)'
            """),
        "resourceRules.cpu.metricsQuery: unknown field (allowed: containerQuery, nodeQuery, resources, "
        "containerLabel); a resource rule takes containerQuery and nodeQuery, not 'metricsQuery'",
        None,
    ),
    "memroy": Slip(
        "misspelt key",
        doc("""
            resourceRules:
              window: 5m
              memroy: {}
            """),
        "resourceRules.memroy: unknown field (allowed: cpu, memory, window); did you mean 'memory'?",
        None,
    ),
    "containerQuery directly under resourceRules": Slip(
        "a key one level off",
        doc("""
            resourceRules:
              window: 5m
              containerQuery: 'sum(rate(container_cpu_usage_seconds_total{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)'
            """),
        "'containerQuery' belongs in resourceRules.cpu and resourceRules.memory (resourceRules.cpu.containerQuery)",
        None,
    ),
    "overides beside seriesQuery": Slip(
        "a key one level off, misspelt",
        rule('up{namespace!=""}', "overides: {namespace: {resource: namespace}}"),
        "did you mean 'overrides', which belongs in 'resources' (rules[0].resources.overrides)?",
        None,
    ),
    "Helm template delimiters": Slip(
        "templates written as Helm's",
        rule('up{namespace!=""}', BY_TEMPLATE, query=HELM_DELIMITERS_QUERY),
        "rules[0].metricsQuery: renders invalid PromQL for one object: ",
        None,
    ),
    "Helm template delimiters (hint)": Slip(
        "templates written as Helm's",
        rule('up{namespace!=""}', BY_TEMPLATE, query=HELM_DELIMITERS_QUERY),
        "prometheus-adapter's templates use << >>, not {{ }}: <<.Series>>, <<.LabelMatchers>>, <<.GroupBy>>",
        None,
    ),
    "Helm delimiters in resources.template": Slip(
        "templates written as Helm's",
        rule('up{namespace!=""}', "resources: {template: '{{.Resource}}'}"),
        "rules[0].resources.template: the template must use .Resource; prometheus-adapter's templates use << >>, "
        "not {{ }}: <<.Resource>>, <<.Group>>",
        None,
    ),
    "a series filter as a string": Slip(
        "a regex where a filter goes",
        rule('{namespace!=""}', "seriesFilters: ['.*_total$']", BY_TEMPLATE),
        "rules[0].seriesFilters[0]: must be a mapping, not '.*_total$'; write {is: .*_total$} (keep series whose "
        "name matches) or {isNot: .*_total$}",
        rule('{namespace!=""}', "seriesFilters: [{isNot: '.*_total$'}]", BY_TEMPLATE),
    ),
    "seriesFilters as a mapping": Slip(
        "a mapping where a list goes",
        rule('{namespace!=""}', "seriesFilters: {isNot: '.*_total$'}", BY_TEMPLATE),
        "rules[0].seriesFilters: must be a list, not a mapping; a list of filters: seriesFilters: [{isNot: <regex>}]",
        None,
    ),
    "include as a string": Slip(
        "our extension, written as a scalar",
        "include: gpu-presets\n",
        "include: must be a list, not 'gpu-presets'; write include: [gpu-presets]",
        "include: [gpu-presets]\n",
    ),
    "externalrules": Slip(
        "misspelt key (case)",
        "externalrules: []\n",
        "did you mean 'externalRules'? (keys are case-sensitive)",
        "externalRules: []\n",
    ),
}


@pytest.mark.parametrize("slip", SLIPS.values(), ids=SLIPS.keys())
def test_the_message_names_what_was_meant(slip: Slip) -> None:
    with pytest.raises(RulesError) as caught:
        parse_rules(slip.text, "rules.yaml")
    message = str(caught.value)
    assert message.startswith("rules.yaml: ") and "\n" not in message
    assert slip.message in message, message
    if slip.fixed is not None:
        parse_rules(slip.fixed, "rules.yaml")  # what the message says to write loads


def test_a_key_with_no_likely_meaning_gets_no_guess() -> None:
    with pytest.raises(RulesError) as caught:
        parse_rules(rule('up{pod!=""}', "resources: {overrides: {pod: {resource: pod, kind: Pod}}}"), "rules.yaml")
    assert str(caught.value) == ("rules.yaml: rules[0].resources.overrides.pod.kind: unknown field (allowed: group, "
                                 "resource)")
