"""Rules file loading: prometheus-adapter files load unchanged; every error names file, rule and field."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from adapter.presets.gpu import gpu_presets
from adapter.rules import GroupResource, MissingValue, RulesError
from adapter.rules.template import Template, TemplateError
from adapter.rulesfile.loader import load_rules, parse_rules

pytestmark = pytest.mark.unit

# The shape users copy from prometheus-adapter docs and charts for dcgm-exporter (honorLabels: false).
DCGM_ADAPTER_RULES = """\
rules:
- seriesQuery: '{__name__=~"^DCGM_.*",exported_namespace!="",exported_pod!=""}'
  resources:
    overrides:
      exported_namespace: {resource: namespace}
      exported_pod: {resource: pod}
  name:
    matches: ^(.*)$
    as: ${1}
  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
"""

# The prometheus-adapter Helm chart's six default rules (rules.default: true), as the chart renders them.
HELM_DEFAULT_RULES = """\
rules:
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters: []
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^container_(.*)_seconds_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[5m])) by (<<.GroupBy>>)
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters:
  - isNot: ^container_.*_seconds_total$
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^container_(.*)_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[5m])) by (<<.GroupBy>>)
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters:
  - isNot: ^container_.*_total$
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^container_(.*)$
    as: ""
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>,container!="POD"}) by (<<.GroupBy>>)
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  seriesFilters:
  - isNot: .*_total$
  resources:
    template: <<.Resource>>
  name:
    matches: ""
    as: ""
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  seriesFilters:
  - isNot: .*_seconds_total
  resources:
    template: <<.Resource>>
  name:
    matches: ^(.*)_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  seriesFilters: []
  resources:
    template: <<.Resource>>
  name:
    matches: ^(.*)_seconds_total$
    as: ""
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)
"""


def test_dcgm_adapter_rules_load_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(DCGM_ADAPTER_RULES)
    config = load_rules(path)
    [rule] = config.rules
    assert rule.where == "rules[0]" and rule.source == str(path) and not rule.external
    assert rule.resources.overrides == (
        ("exported_namespace", GroupResource("", "namespaces")),
        ("exported_pod", GroupResource("", "pods")),
    )
    assert rule.name.as_ == "${1}"
    assert rule.missing_value is MissingValue.ERROR
    assert rule.metric_name("DCGM_FI_DEV_GPU_UTIL") == "DCGM_FI_DEV_GPU_UTIL"
    assert config.series_queries() == ('{__name__=~"^DCGM_.*",exported_namespace!="",exported_pod!=""}',)


def test_helm_default_rules_load_unchanged() -> None:
    config = parse_rules(HELM_DEFAULT_RULES, "values.yaml")
    assert [r.where for r in config.rules] == [f"rules[{i}]" for i in range(6)]
    assert [r.name.as_ for r in config.rules] == ["$1", "$1", "$1", "$0", "$1", "$1"]
    assert config.rules[3].name.matches is None  # `matches: ""` means every name, as-is
    assert config.rules[3].resources.template is not None and config.rules[3].resources.overrides == ()
    # Rules with identical seriesQuery share one /api/v1/series call.
    assert config.series_queries() == (
        '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}',
        '{namespace!="",__name__!~"^container_.*"}',
    )
    names = ["container_cpu_usage_seconds_total", "container_network_receive_bytes_total", "container_memory_rss"]
    assert [config.rules[i].metric_name(n) for i in range(3) for n in names] == [
        "cpu_usage", None, None,
        None, "network_receive_bytes", None,
        None, None, "memory_rss",
    ]  # fmt: skip


def test_defaults_and_extensions() -> None:
    config = parse_rules(
        textwrap.dedent("""\
            resourceRules:
              cpu: {containerQuery: 'sum by (<<.GroupBy>>) (rate(x{<<.LabelMatchers>>}[1m]))', nodeQuery: y,
                    resources: {template: <<.Resource>>}, containerLabel: container}
              memory: {containerQuery: m, nodeQuery: 'n{<<.LabelMatchers>>}', resources: {template: <<.Resource>>},
                       containerLabel: c}
              window: 1m30s
            rules:
            - seriesQuery: 'queue_depth{namespace!=""}'
              resources: {template: <<.Resource>>}
              missingValue: zero
              metricsQuery: 'max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
            externalRules:
            - seriesQuery: 'queue_depth{queue!=""}'
              resources: {namespaced: false}
              name: {matches: ^queue_(depth)$}
              metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
            """),
        "rules.yaml",
    )
    resources = config.resource_rules
    assert resources is not None and resources.window_s == 90
    assert resources.cpu.render_pods("ns", ["p"]) == 'sum by (pod,container) (rate(x{namespace="ns",pod="p"}[1m]))'
    assert resources.memory.render_nodes(None) == 'n{node!=""}' and resources.memory.container_label == "c"
    assert config.rules[0].missing_value is MissingValue.ZERO
    [ext] = config.external_rules
    assert ext.external and ext.where == "externalRules[0]" and ext.resources.namespaced is False
    assert ext.name.as_ == "$1" and ext.metric_name("queue_depth") == "depth"
    assert ext.missing_value is MissingValue.ERROR
    assert config.series_queries() == ('queue_depth{namespace!=""}', 'queue_depth{queue!=""}')


def test_empty_file_is_an_empty_config() -> None:
    config = parse_rules("", "rules.yaml")
    assert config.rules == () and config.external_rules == () and config.resource_rules is None


def test_include_appends_gpu_presets_after_own_rules() -> None:
    config = parse_rules(DCGM_ADAPTER_RULES + "include: [gpu-presets, gpu-presets]\n", "rules.yaml")
    presets = gpu_presets().rules
    assert config.rules[0].source == "rules.yaml"
    assert config.rules[1:] == presets  # once, after the file's own rules
    assert config.include == ("gpu-presets", "gpu-presets")


def test_as_without_matches_names_the_metric_like_prometheus_adapter() -> None:
    # pkg/naming/metric_namer.go: a missing 'matches' is '.*', and 'as' is expanded against it.
    config = parse_rules(
        "rules:\n- seriesQuery: 'foo{pod!=\"\"}'\n  name: {as: bar}\n"
        "  resources: {template: <<.Resource>>}\n  metricsQuery: '<<.Series>>{<<.LabelMatchers>>}'\n"
        "- seriesQuery: 'foo{pod!=\"\"}'\n  name: {as: '${0}_per_second'}\n"
        "  resources: {template: <<.Resource>>}\n  metricsQuery: '<<.Series>>{<<.LabelMatchers>>}'\n",
        "rules.yaml",
    )
    assert config.rules[0].metric_name("foo") == "bar"
    assert config.rules[1].metric_name("foo") == "foo_per_second"


def _rule(body: str, *, key: str = "rules", before: int = 0) -> str:
    """A rules document whose rule number ``before`` has ``body`` (YAML mapping lines, unindented)."""
    good = (
        "- seriesQuery: 'up{namespace!=\"\"}'\n  resources: {template: <<.Resource>>}\n"
        "  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'\n"
    )
    return f"{key}:\n" + good * before + "- " + textwrap.indent(textwrap.dedent(body), "  ")[2:]


BASE = """\
seriesQuery: 'up{namespace!=""}'
resources: {template: <<.Resource>>}
metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
"""

ERROR_CASES = [
    pytest.param(
        "rulez: []\n",
        "rules.yaml: rulez: unknown field (allowed: rules, externalRules, resourceRules, include)",
        id="unknown top-level key",
    ),
    pytest.param(
        _rule(BASE + "seriesQuerry: x\n"),
        "rules.yaml: rules[0].seriesQuerry: unknown field (allowed: seriesQuery, seriesFilters, resources, name, "
        "metricsQuery, missingValue)",
        id="unknown rule key",
    ),
    pytest.param(
        _rule(BASE.replace("{template:", "{templates:")),
        "rules.yaml: rules[0].resources.templates: unknown field (allowed: overrides, template, namespaced)",
        id="unknown resources key",
    ),
    pytest.param(
        _rule(BASE + "name: {match: x}\n"),
        "rules.yaml: rules[0].name.match: unknown field (allowed: matches, as)",
        id="unknown name key",
    ),
    pytest.param(
        _rule(BASE.replace("{template: <<.Resource>>}", "{overrides: {pod: {resource: pod, kind: Pod}}}")),
        "rules.yaml: rules[0].resources.overrides.pod.kind: unknown field (allowed: group, resource)",
        id="unknown override key",
    ),
    pytest.param(
        _rule(BASE + "name: {matches: '('}\n", before=2),
        "rules.yaml: rules[2].name.matches: invalid regex '(': missing ), unterminated subpattern",
        id="bad regex",
    ),
    pytest.param(
        _rule(BASE + "name: {matches: '^(?=x)'}\n"),
        "rules.yaml: rules[0].name.matches: invalid regex '^(?=x)': Go regexp does not support lookaheads",
        id="regex Go rejects",
    ),
    pytest.param(
        _rule(BASE + "name: {matches: '^(.*)_(total)$'}\n"),
        "rules.yaml: rules[0].name.as: name.matches has 2 capture groups; say which to use with 'as'",
        id="as with 2 capture groups",
    ),
    pytest.param(
        _rule(BASE + "seriesFilters: [{is: a, isNot: b}]\n"),
        "rules.yaml: rules[0].seriesFilters[0]: each filter needs exactly one of 'is' or 'isNot'",
        id="filter with both keys",
    ),
    pytest.param(
        _rule(BASE + "seriesFilters: [{}]\n"),
        "rules.yaml: rules[0].seriesFilters[0]: each filter needs exactly one of 'is' or 'isNot'",
        id="filter with no key",
    ),
    pytest.param(
        _rule(BASE + "seriesFilters: [{is: a}, {isNot: '[a'}]\n"),
        "rules.yaml: rules[0].seriesFilters[1].isNot: invalid regex '[a': missing closing ]",
        id="filter bad regex",
    ),
    pytest.param(
        _rule(BASE.replace("<<.Series>>", "<<.Serie>>")),
        "rules.yaml: rules[0].metricsQuery: invalid template 'sum(<<.Serie>>{<<.LabelMatchers>>}) by "
        "(<<.GroupBy>>)': unknown field .Serie (available: .GroupBy, .GroupBySlice, .LabelMatchers, "
        ".LabelValuesByName, .Series)",
        id="unknown template field",
    ),
    pytest.param(
        _rule(BASE.replace("<<.Series>>", '<<.Series | printf "%s">>')),
        "rules.yaml: rules[0].metricsQuery: invalid template",
        id="template pipeline",
    ),
    pytest.param(
        _rule(BASE.replace("<<.Series>>", "<<range .GroupBySlice>>x<<end>>")),
        "rules.yaml: rules[0].metricsQuery: invalid template 'sum(<<range .GroupBySlice>>x<<end>>{<<.LabelMatchers>>}) "
        "by (<<.GroupBy>>)': 'range' actions are not supported",
        id="template range",
    ),
    pytest.param(
        _rule(BASE.replace("<<.Series>>", "<<len .GroupBySlice>>")),
        "rules.yaml: rules[0].metricsQuery: invalid template 'sum(<<len .GroupBySlice>>{<<.LabelMatchers>>}) by "
        "(<<.GroupBy>>)': function 'len' is not supported (only index)",
        id="template function",
    ),
    pytest.param(
        _rule(BASE.replace("by (<<.GroupBy>>)", "by (<<.GroupBy)")),
        "rules.yaml: rules[0].metricsQuery: invalid template",
        id="template unclosed",
    ),
    pytest.param(
        _rule(BASE.replace("<<.Resource>>", "<<.Kind>>")),
        "rules.yaml: rules[0].resources.template: invalid template '<<.Kind>>': unknown field .Kind "
        "(available: .Group, .Resource)",
        id="resources template field",
    ),
    pytest.param(
        _rule(BASE.replace("<<.Resource>>", "<<.Group>>_label")),
        "rules.yaml: rules[0].resources.template: the template must use .Resource",
        id="resources template without Resource",
    ),
    pytest.param(
        _rule(BASE.replace("by (<<.GroupBy>>)", "by (<<.GroupBy>>")),
        "rules.yaml: rules[0].metricsQuery: renders invalid PromQL for one object",
        id="metricsQuery renders invalid PromQL",
    ),
    pytest.param(
        _rule(
            "seriesQuery: 'q{queue!=\"\"}'\nresources: {namespaced: false}\n"
            "metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>,x=\"y\"})'\n",
            key="externalRules",
        ),
        "rules.yaml: externalRules[0].metricsQuery: renders invalid PromQL for no metric label selector",
        id="external metricsQuery invalid without matchers",
    ),
    pytest.param(
        "include: [gpu-presets, cpu-presets]\n",
        "rules.yaml: include[1]: unknown include 'cpu-presets' (known: capacity-headroom, gpu-presets, "
        "inference-gateway, sglang, tgi, triton, vllm)",
        id="unknown include",
    ),
    pytest.param(
        _rule("resources: {template: <<.Resource>>}\nmetricsQuery: '<<.Series>>{<<.LabelMatchers>>}'\n"),
        "rules.yaml: rules[0].seriesQuery: is required",
        id="seriesQuery missing",
    ),
    pytest.param(
        _rule(BASE.replace("'up{namespace!=\"\"}'", "'sum(up)'")),
        "rules.yaml: rules[0].seriesQuery: must be a plain series selector",
        id="seriesQuery not a selector",
    ),
    pytest.param(
        _rule(BASE.replace("'up{namespace!=\"\"}'", "'up{namespace!=}'")),
        "rules.yaml: rules[0].seriesQuery: not a valid series selector",
        id="seriesQuery does not parse",
    ),
    pytest.param(
        _rule("seriesQuery: up\n"),
        "rules.yaml: rules[0].metricsQuery: is required",
        id="metricsQuery missing",
    ),
    pytest.param(
        _rule(BASE + "missingValue: nan\n"),
        "rules.yaml: rules[0].missingValue: must be 'error' or 'zero', not 'nan'",
        id="missingValue",
    ),
    pytest.param(
        _rule(BASE.replace("{template: <<.Resource>>}", "{namespaced: 'no'}"), key="externalRules"),
        "rules.yaml: externalRules[0].resources.namespaced: must be true or false",
        id="namespaced not a bool",
    ),
    pytest.param(
        _rule(BASE.replace("{template: <<.Resource>>}", "{overrides: {gadget: {resource: widget}}}")),
        "rules.yaml: rules[0].resources.overrides.gadget.resource: unknown resource 'widget'; give the group of a "
        "custom resource",
        id="override unknown resource",
    ),
    pytest.param(
        _rule(BASE.replace("{template: <<.Resource>>}", "{overrides: {my-pod: {resource: pod}}}")),
        "rules.yaml: rules[0].resources.overrides: invalid Prometheus label name 'my-pod'",
        id="override bad label",
    ),
    pytest.param(
        _rule(BASE + "seriesQuery: again\n"),
        "rules.yaml: invalid YAML: line 5: key 'seriesQuery' given twice",
        id="duplicate key",
    ),
    pytest.param("rules: {}\n", "rules.yaml: rules: must be a list, not a mapping", id="rules not a list"),
    pytest.param("- a\n", "rules.yaml: the top level must be a mapping, not a list", id="top level not a mapping"),
    pytest.param("rules: [x]\n", "rules.yaml: rules[0]: must be a mapping, not 'x'", id="rule not a mapping"),
    pytest.param(
        _rule(BASE + "name: {matches: [a]}\n"),
        "rules.yaml: rules[0].name.matches: must be a string, not a list",
        id="wrong type",
    ),
]


@pytest.mark.parametrize(("text", "message"), ERROR_CASES)
def test_errors_name_file_rule_and_field(text: str, message: str) -> None:
    with pytest.raises(RulesError) as caught:
        parse_rules(text, "rules.yaml")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_load_errors_name_the_path(tmp_path: Path) -> None:
    path = tmp_path / "custom-rules.yaml"
    path.write_text(_rule(BASE + "name: {matches: '('}\n"))
    with pytest.raises(RulesError, match=r"custom-rules\.yaml: rules\[0\]\.name\.matches: invalid regex"):
        load_rules(path)
    with pytest.raises(RulesError, match=r"missing\.yaml: cannot read the rules file"):
        load_rules(tmp_path / "missing.yaml")


def test_error_attributes() -> None:
    with pytest.raises(RulesError) as caught:
        parse_rules(_rule(BASE + "missingValue: nan\n"), "rules.yaml")
    assert (caught.value.source, caught.value.path) == ("rules.yaml", "rules[0].missingValue")
    assert isinstance(caught.value, ValueError)


QUERY_FIELDS = {
    "Series": "string",
    "LabelMatchers": "string",
    "GroupBy": "string",
    "GroupBySlice": "list",
    "LabelValuesByName": "map",
}
DATA = {
    "Series": "up",
    "LabelMatchers": 'a="b"',
    "GroupBy": "pod,namespace",
    "GroupBySlice": ["pod", "namespace"],
    "LabelValuesByName": {"pod": "p1|p2", "namespace": "ns"},
}


@pytest.mark.parametrize(
    ("source", "rendered"),
    [
        ("<<.Series>>{<<.LabelMatchers>>}", 'up{a="b"}'),
        ("<< .GroupBy >>", "pod,namespace"),
        ("<<.GroupBySlice>>", "[pod namespace]"),
        ("<<.LabelValuesByName>>", "map[namespace:ns pod:p1|p2]"),
        ("<<.LabelValuesByName.pod>>", "p1|p2"),
        ('<<index .LabelValuesByName "pod">>', "p1|p2"),
        ("<<index .LabelValuesByName `namespace`>>", "ns"),
        ("<<.LabelValuesByName.missing>>", "<no value>"),
        ('<<index .LabelValuesByName "missing">>', ""),
        ('x <<- "\\x41\\u00e9" ->> y', "xAéy"),
        ("a  <<- .Series>>  b", "aup  b"),
        ("a>>b<<.Series>>", "a>>bup"),
    ],
)
def test_template_renders_like_go(source: str, rendered: str) -> None:
    assert Template.parse(source, QUERY_FIELDS).render(DATA) == rendered


def test_template_renders_empty_slice_like_go() -> None:
    assert (
        Template.parse("by (<<.GroupBy>>) <<.GroupBySlice>>", QUERY_FIELDS).render(
            {**DATA, "GroupBy": "", "GroupBySlice": []}
        )
        == "by () []"
    )


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("<<.Series.foo>>", "can't evaluate field foo of .Series"),
        ("<<.LabelValuesByName.pod.x>>", "can't evaluate field x of .LabelValuesByName.pod"),
        ('<<index .Series "x">>', "index of .Series is not supported (only maps)"),
        ("<<index .LabelValuesByName>>", "index takes a map field and one string key"),
        ("<<.>>", "'.' on its own is not supported"),
        ("<<$x := .Series>>", "unsupported syntax '$'"),
        ("<<(.Series)>>", "unsupported syntax '('"),
        ("<<if .Series>>x<<end>>", "'if' actions are not supported"),
        ("<<>>", "empty action"),
        ("<</* note */>>", "template comments are not supported"),
        ('<<index .LabelValuesByName "pod>>', "unterminated string"),
        ('<<index .LabelValuesByName "\\q">>', "unknown escape sequence"),
    ],
)
def test_template_rejects_unsupported(source: str, reason: str) -> None:
    with pytest.raises(TemplateError, match=re.escape(reason)):
        Template.parse(source, QUERY_FIELDS)


def test_template_reports_fields_used() -> None:
    template = Template.parse('<<.Series>><<index .LabelValuesByName "a">><<.GroupBy>>', QUERY_FIELDS)
    assert template.fields == {"Series", "LabelValuesByName", "GroupBy"}


def test_yaml_anchors_and_merge_keys_work() -> None:
    config = parse_rules(
        textwrap.dedent("""\
            rules:
            - &gpu
              seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
              resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
              metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
            - <<: *gpu
              seriesQuery: 'DCGM_FI_DEV_FB_USED{namespace!="",pod!=""}'
            """),
        "rules.yaml",
    )
    assert [r.series_query for r in config.rules] == [
        'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}',
        'DCGM_FI_DEV_FB_USED{namespace!="",pod!=""}',
    ]
