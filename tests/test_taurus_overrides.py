"""``-o PATH=VALUE`` overrides: the cases of Taurus' own tests (tests/unit/test_CLI.py, ``TestConfigOverrider`` and
``test_perform_overrides``), then the paths the guide's file needs."""

from __future__ import annotations

from typing import Any

import pytest

from loadtest.loadgen.taurus.overrides import OverrideError, apply_overrides

pytestmark = pytest.mark.unit

# (test in tests/unit/test_CLI.py, starting config, overrides, expected config)
UPSTREAM: list[tuple[str, dict[str, Any], list[str], dict[str, Any]]] = [
    ("test_numbers", {}, ["int=11", "float=3.14"], {"int": 11, "float": 3.14}),
    ("test_booleans", {}, ["yes=true", "no=false"], {"yes": True, "no": False}),
    ("test_strings", {}, ["plain=ima plain string", """quoted='"ima quoted string"'""", """empty-quoted='""'""",
                          '''escaped="a "b" 'c' d"''', '''escaped-quoted="a "b" 'c' d"'''],
     {"plain": "ima plain string", "quoted": '"ima quoted string"', "empty-quoted": '""',
      "escaped": '''"a "b" 'c' d"''', "escaped-quoted": '''"a "b" 'c' d"'''}),
    ("test_strings_literals_clash", {}, ['yes="true"', 'list="[1,2,3]"'], {"yes": "true", "list": "[1,2,3]"}),
    ("test_null", {}, ["nothing=null"], {"nothing": None}),
    ("test_objects", {"obj": {"key": "142857"}}, ['obj={"key": "value"}'], {"obj": {"key": "value"}}),
    ("test_lists", {"list": ["stuff"]}, ['list=[1, 2.0, "str", []]'], {"list": [1, 2.0, "str", []]}),
    ("test_nested_quotation", {}, ['''man={"name": "Robert \\"Destroyer of Worlds\\" Oppenheimer"}'''],
     {"man": {"name": 'Robert "Destroyer of Worlds" Oppenheimer'}}),
    ("test_no_override", {}, ["nothing="], {"nothing": None}),
    ("test_unquoted_keys", {}, ["obj={abc: def}"], {"obj": {"abc": "def"}}),
    ("test_override_delete_from_list", {"items": [1, 2, 3], "dict": {"1": 1, "2": 2, "3": 3}},
     ["items.^-4=null", "items.^1=null", "dict.^2=null"], {"items": [1, 3], "dict": {"1": 1, "3": 3}}),
    ("test_override_multiple",
     {"vals_dict": {"nums_list": ["one", "two", "three"], "dicts_list": [{"k1": "v1"}, {"k2": "v2"}, {"k3": "v3"}],
                    "k1": "v1", "bool_value": True}},
     ["vals_dict.*one=zero", "vals_dict.*k1=v2"],
     {"vals_dict": {"nums_list": ["zero", "two", "three"], "dicts_list": [{"k1": "v2"}, {"k2": "v2"}, {"k3": "v3"}],
                    "k1": "v2", "bool_value": True}}),
    ("test_perform_overrides", {},
     ["test.subkey5.-1=value", "test.subkey2.0.sskey=value", "test.subkey.0=value", "execution.-1.option=value"],
     {"test": {"subkey5": ["value"], "subkey2": [{"sskey": "value"}], "subkey": ["value"]},
      "execution": [{"option": "value"}]}),
]


@pytest.mark.parametrize(("case", "config", "overrides", "expected"), UPSTREAM, ids=[c[0] for c in UPSTREAM])
def test_overrides_as_taurus_applies_them(case: str, config: dict[str, Any], overrides: list[str],
                                          expected: dict[str, Any]) -> None:
    apply_overrides(config, overrides)
    assert config == expected


def guide() -> dict[str, Any]:
    """The shape of the guide's vision-api-bzt.yaml (DevSecOpsSamples/eks-gpu-autoscaling), as YAML loads it."""
    return {"execution": [{"concurrency": 1, "ramp-up": "1s", "hold-for": "10m30s", "scenario": "vision-api"}],
            "scenarios": {"vision-api": {"think-time": 0.75, "requests": ["https://vision-api.example.com/gputest"]}}}


def test_the_guides_test_is_shortened_and_pointed_elsewhere_without_editing_it() -> None:
    config = guide()
    paths = apply_overrides(config, ["execution.0.hold-for=30s", "execution.0.concurrency=4",
                                     "scenarios.vision-api.requests.0=http://127.0.0.1:8080/gputest",
                                     "scenarios.vision-api.^think-time="])
    assert config["execution"] == [{"concurrency": 4, "ramp-up": "1s", "hold-for": "30s", "scenario": "vision-api"}]
    assert config["scenarios"]["vision-api"] == {"requests": ["http://127.0.0.1:8080/gputest"]}
    assert paths == ["execution.0.hold-for", "execution.0.concurrency", "scenarios.vision-api.requests.0",
                     "scenarios.vision-api.^think-time"]


@pytest.mark.parametrize(("option", "message"), [
    ("execution.0.hold-for", "-o 'execution.0.hold-for': expected PATH=VALUE"),
    ("=30s", "expected PATH=VALUE"),
    ("scenarios.vision-api.think-time.x=1", "-o scenarios.vision-api.think-time.x=1: scenarios.vision-api.think-time "
                                            "is neither a mapping nor a list"),
    ("execution.scenario=x", "-o execution.scenario=x: execution is a list: index it with a number"),
    ("execution.0.scenario.requests.0=x", "-o execution.0.scenario.requests.0=x: execution.0.scenario is not a "
                                          "mapping"),
])
def test_overrides_that_cannot_apply_name_themselves(option: str, message: str) -> None:
    with pytest.raises(OverrideError) as caught:
        apply_overrides(guide(), [option])
    assert message in str(caught.value)


def readme_form() -> dict[str, Any]:
    """Taurus' README (and site/dat/docs/ExecutionSettings.md) writes one execution as a mapping, its scenario
    inline; bzt applies -o before it turns the mapping into a list (CLI.__configure, then Engine.unify_config)."""
    return {"execution": {"concurrency": 10, "ramp-up": "1m", "hold-for": "1m30s",
                          "scenario": {"requests": ["http://blazedemo.com/"]}}}


def test_a_single_execution_mapping_takes_its_keys_without_an_index() -> None:
    config = readme_form()
    apply_overrides(config, ["execution.hold-for=30s", "execution.scenario.requests.0=http://127.0.0.1:8080/",
                             "execution.^ramp-up="])
    assert config["execution"] == {"concurrency": 10, "hold-for": "30s",
                                   "scenario": {"requests": ["http://127.0.0.1:8080/"]}}


@pytest.mark.parametrize(("config", "option", "message"), [
    # bzt: pointer[0] on the mapping, a KeyError; here the path to write instead.
    (readme_form(), "execution.0.hold-for=30s", "-o execution.0.hold-for=30s: execution is one mapping in this file, "
                                                "not a list: its keys are set without an index, as bzt sets them "
                                                "(-o execution.hold-for=...; bzt fails on 0 here too)"),
    (readme_form(), "execution.0=x", "execution is one mapping in this file, not a list"),
    # bzt: append() on the mapping, an AttributeError.
    (readme_form(), "execution.-1.scenario=other", "execution is one mapping in this file, not a list, so there is "
                                                   "nothing to append to (bzt fails here too)"),
    # A request written as a URL and a scenario named by scenario hold no keys.
    (guide(), "scenarios.vision-api.requests.0.method=POST",
     "scenarios.vision-api.requests.0 is neither a mapping nor a list (the text "
     "'https://vision-api.example.com/gputest'); a request written as a URL is replaced whole: "
     "-o 'scenarios.vision-api.requests.0={url: https://vision-api.example.com/gputest, ...}'"),
    (guide(), "execution.0.scenario.think-time=1s", "execution.0.scenario is neither a mapping nor a list (the text "
                                                    "'vision-api'); it names a scenario, whose keys are set under "
                                                    "scenarios.vision-api"),
])
def test_paths_that_do_not_fit_the_files_shape_say_which_path_does(config: dict[str, Any], option: str,
                                                                   message: str) -> None:
    with pytest.raises(OverrideError) as caught:
        apply_overrides(config, [option])
    assert message in str(caught.value)
