"""A Taurus file's documents merged as bzt merges them (``BetterDict.merge`` in bzt/utils.py, applied per document by
``Configuration.load`` in bzt/engine/dicts.py): the cases of Taurus' tests/unit/test_configuration.py, the rules of
site/dat/docs/ConfigSyntax.md ("Multiple Files Merging Rules"), and files of Taurus' examples/ written as one file
of several documents, read into plans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from loadtest.cli.main import main
from loadtest.loadgen.taurus.merge import merge_documents, replace_tabs
from loadtest.loadgen.taurus.plan import TaurusFileError, load_plan

pytestmark = pytest.mark.unit

JMETER = "bzt.modules.jmeter.JMeterExecutor"

# tests/unit/test_configuration.py test_merge: tests/resources/yaml/test.yml, then json/merge1.json, json/merge2.json
MERGE1 = {"provisioning": "local",
          "modules": {"local": "bzt.modules.provisioning.Local", "remote": "bzt.modules.provisioning.Remote",
                      "jmeter": {"class": JMETER, "path": "build/jmeter/bin/jmeter",
                                 "properties": {"log_level.jmeter": "DEBUG"}}},
          "list-append": [1, 2, 3], "list-replace": [1, 2, 3], "list-complex": [["simple"], [{"token": "test"}]]}
MERGE2 = {"provisioning": "local",
          "modules": {"jmeter": {"path": "build/jmeter/bin/jmeter", "^properties": ""},
                      "remote": {"dict-over": "string"}},
          "list-append": [4, 5, 6], "~list-replace": [4, 5], "~list-replace-notexistent": [6, 7],
          "list-complex": [[{"dict2": False}]]}

# (upstream test or rule, documents in order, the merged config)
UPSTREAM: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
    ("test_configuration.py test_merge", [{"key": "value"}, MERGE1, MERGE2], {
        "key": "value", "provisioning": "local",
        "modules": {"local": "bzt.modules.provisioning.Local", "remote": {"dict-over": "string"},
                    "jmeter": {"class": JMETER, "path": "build/jmeter/bin/jmeter"}},  # ^properties deleted it
        "list-append": [1, 2, 3, 4, 5, 6],  # lists are joined
        "list-replace": [4, 5], "list-replace-notexistent": [6, 7],  # ~ replaces
        "list-complex": [["simple"], [{"token": "test"}], [{"dict2": False}]]}),
    ("test_configuration.py test_merge_removal", [{"foo": "bar"}, {"^foo": "baz"}], {}),
    ("test_configuration.py test_merge_overwrite", [{"foo": {"bar": "baz"}}, {"~foo": "baz"}], {"foo": "baz"}),
    ("test_configuration.py test_elementwise_merge",
     [{"execution": [{"executor": "jmeter", "iterations": 10}]}, {"$execution": [{"iterations": 20}]}],
     {"execution": [{"executor": "jmeter", "iterations": 20}]}),
    ("test_configuration.py test_elementwise_merge_do_not_erase",
     [{"execution": [{"executor": "jmeter", "iterations": 10}, {"executor": "selenium", "iterations": 30}]},
      {"$execution": [{"iterations": 20}]}],
     {"execution": [{"executor": "jmeter", "iterations": 20}, {"executor": "selenium", "iterations": 30}]}),
    ("test_configuration.py test_elementwise_merge_right_is_bigger",
     [{"execution": [{"executor": "jmeter", "iterations": 10}]},
      {"$execution": [{"iterations": 20}, {"iterations": 30}]}],
     {"execution": [{"executor": "jmeter", "iterations": 20}, {"iterations": 30}]}),
    ("test_configuration.py test_overwrite_execution_locations",
     [{"execution": [{"locations": {"us-central1-a": 1}}]}, {"$execution": [{"~locations": {"harbor-1": 1}}]}],
     {"execution": [{"locations": {"harbor-1": 1}}]}),
    # ConfigSyntax.md: "Attempting to merge file containing array of executions with single-execution will lead to
    # overwriting instead of appending array"; two mappings merge into one.
    ("ConfigSyntax.md: a list, then a mapping",
     [{"execution": [{"concurrency": 1}]}, {"execution": {"concurrency": 2}}],
     {"execution": {"concurrency": 2}}),
    ("ConfigSyntax.md: a mapping, then a mapping",
     [{"execution": {"concurrency": 1, "scenario": "a"}}, {"execution": {"hold-for": "1m"}}],
     {"execution": {"concurrency": 1, "scenario": "a", "hold-for": "1m"}}),
    # BetterDict.merge: prefixes are read where a mapping merges into a mapping, at any depth...
    ("merge: nested prefixes", [{"scenarios": {"s": {"headers": {"A": "1", "B": "2"}}}},
                                {"scenarios": {"s": {"headers": {"^A": None, "C": "3"}}}}],
     {"scenarios": {"s": {"headers": {"B": "2", "C": "3"}}}}),
    # ...and a mapping put into a list, or over a value of another type, is taken as written (from_dict).
    ("merge: a prefix in a list item stays a key", [{"execution": [{"~concurrency": 5}]}],
     {"execution": [{"~concurrency": 5}]}),
    ("merge: a prefix in a mapping over a list stays a key",
     [{"execution": [{"concurrency": 1}]}, {"execution": {"~concurrency": 5}}], {"execution": {"~concurrency": 5}}),
]


@pytest.mark.parametrize(("case", "documents", "merged"), UPSTREAM, ids=[u[0] for u in UPSTREAM])
def test_documents_merge_as_taurus_merges_them(case: str, documents: list[dict[str, Any]],
                                               merged: dict[str, Any]) -> None:
    assert merge_documents(documents) == merged


def test_merging_copies_its_documents() -> None:
    first, second = {"execution": [{"concurrency": 1}]}, {"execution": [{"concurrency": 2}]}
    merge_documents([first, second])
    assert first == {"execution": [{"concurrency": 1}]} and second == {"execution": [{"concurrency": 2}]}


# examples/executor-benchmark/scenario.yml and exec-vu.yml (run together: bzt exec-vu.yml scenario.yml), written as
# one file of two documents: the scenario turns off Taurus' cache, cookies, DNS cache manager and resource fetching.
BENCHMARK = """\
---
scenarios:
  dummy:
    default-address: http://192.168.2.2:8080
    retrieve-resources: false
    store-cache: false
    store-cookie: false
    use-dns-cache-mgr: false
    headers:
      Host: localhost
    timeout: 1s
    requests:
    - /
---
execution:
- scenario: dummy
  concurrency: 64
  ramp-up: 5m
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "test.yml"
    path.write_text(text)
    return path


def test_the_benchmark_example_as_one_file_of_two_documents(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, BENCHMARK))
    (execution,) = plan.executions
    assert (execution.concurrency, execution.ramp_up_s, execution.concurrency_group) == (64, 300, True)
    scenario = execution.scenario
    assert (scenario.store_cookie, scenario.store_cache) == (False, False)
    (request,) = scenario.requests
    assert (request.url, request.timeout_s) == ("http://192.168.2.2:8080/", 1.0)
    assert request.headers == (("Host", "localhost"),)
    assert plan.notes == ()  # retrieve-resources: false, so nothing to announce


def test_executions_of_several_documents_are_joined(tmp_path: Path) -> None:
    """examples/all-executors.yml's layout: each document a list of executions; the file runs them all."""
    text = ("scenarios: {s: {requests: ['http://x/']}}\n---\nexecution:\n- {scenario: s, hold-for: 1s}\n"
            "---\nexecution:\n- {scenario: s, hold-for: 2s}\n- {scenario: s, hold-for: 3s}\n")
    assert [e.hold_s for e in load_plan(write(tmp_path, text)).executions] == [1, 2, 3]


def test_a_later_document_replaces_with_tilde(tmp_path: Path) -> None:
    """examples/BOOTH1/cloud.yml's ``~execution`` (run after run-jmeter.yml): its executions replace the earlier
    ones instead of joining them."""
    text = ("scenarios: {s: {requests: ['http://x/']}}\nexecution:\n- {scenario: s, concurrency: 50, ramp-up: 30s, "
            "hold-for: 1m}\n---\n~execution:\n- {scenario: s, concurrency: 150, ramp-up: 2m, hold-for: 5m}\n")
    (execution,) = load_plan(write(tmp_path, text)).executions
    assert (execution.concurrency, execution.ramp_up_s, execution.hold_s) == (150, 120, 300)


def test_a_later_document_merges_item_by_item_with_dollar(tmp_path: Path) -> None:
    text = ("scenarios: {s: {requests: ['http://x/']}}\nexecution:\n- {scenario: s, concurrency: 2, hold-for: 1m}\n"
            "---\n$execution:\n- {hold-for: 30s}\n")
    (execution,) = load_plan(write(tmp_path, text)).executions
    assert (execution.concurrency, execution.hold_s) == (2, 30)


def test_prefixes_in_a_single_document_apply_as_against_an_empty_config(tmp_path: Path) -> None:
    """Taurus merges a user's file into its base config, where ``^reporting`` drops the base's reporters and
    ``~execution`` replaces nothing; from nothing, as here, they delete nothing and set the key."""
    text = ("~execution: {scenario: s, hold-for: 2s}\n^reporting: null\n"
            "scenarios: {s: {requests: ['http://x/'], ~headers: {A: '1'}}}\n")
    plan = load_plan(write(tmp_path, text))
    assert plan.executions[0].hold_s == 2 and plan.executions[0].scenario.requests[0].headers == (("A", "1"),)


def test_empty_documents_are_skipped(tmp_path: Path) -> None:
    text = "---\n---\nexecution: {scenario: {requests: ['http://x/']}, hold-for: 1s}\n---\n"
    assert load_plan(write(tmp_path, text)).executions[0].hold_s == 1


def test_a_json_file_yaml_cannot_read_is_read_as_json(tmp_path: Path) -> None:
    """Configuration._read_yaml_or_json: text YAML refuses (here: a tab after a colon) that starts with ``{``."""
    text = '{"execution":\t[{"scenario": {"requests": ["http://x/"]}, "hold-for": "1s"}]}\n'
    assert load_plan(write(tmp_path, text)).executions[0].hold_s == 1


# tests/unit/test_configuration.py test_tabs: tests/resources/yaml/tabs-issue.yml, loaded, equals tabs-issue-spaces.yml
TABS_ISSUE = ('blockstart1:\n    simple tab: true\n    tab in: "\tmiddle"\n    space: tab\n\nblockstart2:\n'
              '     tab: space\n    \n    # some comment\nblockstart3:\n\tdouble: tab\nblockstart4:\n'
              '        tab-space: tab\nblockstart5:\n \t space-tab-space: tab\nblockstart6:\n    four-spaces: 1\n'
              '\tone-tab: 1\n')
TABS_ISSUE_SPACES = {"blockstart1": {"simple tab": True, "space": "tab", "tab in": "\tmiddle"},
                     "blockstart2": {"tab": "space"}, "blockstart3": {"double": "tab"},
                     "blockstart4": {"tab-space": "tab"}, "blockstart5": {"space-tab-space": "tab"},
                     "blockstart6": {"four-spaces": 1, "one-tab": 1}}


def test_tabs_as_taurus_replaces_them() -> None:
    text, changed = replace_tabs(TABS_ISSUE)
    assert yaml.safe_load(text) == TABS_ISSUE_SPACES and changed == [11, 15, 18]


def test_leading_tabs_are_read_as_taurus_reads_them(tmp_path: Path) -> None:
    """Configuration._replace_tabs (tests/unit/test_configuration.py test_tabs): each line's leading run of tabs is
    4 spaces (a run of two as well), with a note where Taurus warns; YAML alone refuses such a file."""
    text = "execution:\n\tscenario: s\n\thold-for: 2s\nscenarios:\n\ts:\n\t    requests: ['http://x/']\n"
    with pytest.raises(yaml.YAMLError, match="cannot start any token"):
        yaml.safe_load(text)
    plan = load_plan(write(tmp_path, text))
    assert plan.executions[0].hold_s == 2
    assert plan.notes[0] == ("lines 2, 3, 5, 6: leading tabs read as 4 spaces, as Taurus reads them (YAML does not "
                             "allow tabs there)")


# (what the file has, its text, the key path the error names, words of the reason)
REFUSED = [
    ("a document that is not a mapping", "execution: {scenario: {requests: ['http://x/']}}\n---\n- a list\n",
     "document 2 (of 2)", "expected a Taurus file (a mapping), got ['a list']; Taurus refuses a document"),
    ("a prefix inside a list item", "execution:\n- {~concurrency: 5, scenario: {requests: ['http://x/']}}\n",
     "execution.0.~concurrency", "~ (replace) is a merge prefix, which Taurus applies only where a mapping merges "
                                "into a mapping"),
    ("a prefix in a mapping that replaced a list",
     "execution:\n- {scenario: {requests: ['http://x/']}}\n---\nexecution: {$hold-for: 1s}\n",
     "execution.$hold-for", "write hold-for"),
    ("JSON that is not JSON either", "{\n\t\"execution\": [\n", "neither YAML nor JSON", ""),
]


@pytest.mark.parametrize(("case", "text", "key", "reason"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_taurus_refuses_or_ignores_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           case: str, text: str, key: str, reason: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TaurusFileError):
        load_plan(path)
    with pytest.raises(SystemExit) as exited:
        main(["run", "--taurus", str(path)])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"gpu-loadtest: error: {path}: {key}") and reason in line, line
    assert "not valid YAML" not in line


def test_a_prefix_set_by_o_is_refused_by_name(tmp_path: Path) -> None:
    """ConfigOverrider reads no prefixes: ``-o execution.0.~hold-for=5s`` sets a key of that name."""
    path = write(tmp_path, "execution:\n- {scenario: {requests: ['http://x/']}, hold-for: 1s}\n")
    refusal = r"execution\.0\.~hold-for: ~ \(replace\) is a merge prefix.*\(as set by -o\)"
    with pytest.raises(TaurusFileError, match=refusal):
        load_plan(path, ["execution.0.~hold-for=5s"])
