"""Taurus files read into plans: what each file's keys mean here (as Taurus documents them), and the one-line error,
naming the file and the key, for everything outside the subset this runner runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadtest.cli.main import main
from loadtest.loadgen.taurus.keys import ANY_VALUE, LEVELS, Key, markdown
from loadtest.loadgen.taurus.plan import HttpRequest, TaurusFileError, TaurusPlan, load_plan, read_plan
from loadtest.loadgen.taurus.values import ThinkTime
from tests.support.docs import generated_block

pytestmark = pytest.mark.unit

# The guide's test (shared/reference/eks-gpu-hpa-guide.md, "AutoScaling Test": bzt vision-api-bzt.yaml). The file
# lives in the guide's repository (DevSecOpsSamples/eks-gpu-autoscaling, vision-api-bzt.yaml), not in
# shared/reference: this is its shape (one URL, here example.com's), not a copy.
GUIDE = {"execution": [{"concurrency": 1, "ramp-up": "1s", "hold-for": "10m30s", "scenario": "vision-api"}],
         "scenarios": {"vision-api": {"think-time": 0.75,
                                      "requests": ["https://vision-api.example.com/gputest"]}}}


def write(tmp_path: Path, config: Any, name: str = "test.yaml") -> Path:
    path = tmp_path / name
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
    return path


def plan_of(tmp_path: Path, config: Any, *overrides: str) -> TaurusPlan:
    return load_plan(write(tmp_path, config), list(overrides))


def test_the_guides_file() -> None:
    """One user from half a second in (Concurrency Thread Group: round(1 * t / 1s) reaches 1 at 0.5 s), for
    10m30s after the 1 s ramp-up; a GET every 0.75 s of think time plus the answer."""
    plan = read_plan(yaml.safe_load(yaml.safe_dump(GUIDE)), Path("vision-api-bzt.yaml"))
    (execution,) = plan.executions
    assert (execution.concurrency, execution.ramp_up_s, execution.hold_s) == (1, 1, 630)
    assert execution.concurrency_group and execution.iterations is None and execution.throughput is None
    assert execution.user_starts() == [0.5] and plan.end_s == 631.0
    assert execution.scenario.requests == (HttpRequest(
        label="https://vision-api.example.com/gputest", method="GET",
        url="https://vision-api.example.com/gputest", headers=(), body=None, think=ThinkTime("constant", 0.75),
        timeout_s=30.0, follow_redirects=True),)
    assert [plan.phase_at(t) for t in (0, 0.9, 1, 600)] == ["ramp-up", "ramp-up", "hold", "hold"]
    assert plan.rate_cap_at(5) is None and plan.users_at(0.4) == 0 and plan.users_at(0.6) == 1


def test_the_guides_test_shortened_with_o(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, GUIDE, "execution.0.hold-for=30s", "execution.0.concurrency=4")
    assert (plan.executions[0].concurrency, plan.end_s) == (4, 31.0)
    assert plan.executions[0].user_starts() == [0.125, 0.375, 0.625, 0.875]


def test_taurus_readme_form_one_execution_mapping_with_an_inline_scenario(tmp_path: Path) -> None:
    """Taurus' README: execution as one mapping (ExecutionSettings.md: the same as a list of one), scenario inline."""
    plan = plan_of(tmp_path, {"execution": {"concurrency": 10, "ramp-up": "1m", "hold-for": "1m30s", "scenario": {
        "think-time": 0.75, "requests": ["http://blazedemo.com/", "http://blazedemo.com/vacation.html"]}}})
    (execution,) = plan.executions
    assert execution.scenario.name == "execution 0" and len(execution.scenario.requests) == 2
    assert plan.end_s == 150.0 and execution.user_starts()[0] == 3.0  # (1 - 0.5) * 60 s / 10


def test_taurus_readme_form_overridden_as_bzt_overrides_it(tmp_path: Path) -> None:
    """With execution written as one mapping, bzt's -o path is execution.KEY (it runs before the mapping becomes
    a list of one)."""
    config = {"execution": {"concurrency": 10, "ramp-up": "1m", "hold-for": "1m30s",
                            "scenario": {"requests": ["http://blazedemo.com/"]}}}
    plan = plan_of(tmp_path, config, "execution.hold-for=30s", "execution.concurrency=2")
    (execution,) = plan.executions
    assert (execution.concurrency, execution.hold_s, plan.end_s) == (2, 30, 90.0)


def test_taurus_defaults_that_change_what_is_sent(tmp_path: Path) -> None:
    """bzt/jmx/http.py: store-cache and retrieve-resources are on unless a scenario turns them off. The cache is
    kept (loadtest.loadgen.taurus.cache); embedded resources are not fetched, and a scenario leaving them on says so."""
    plan = read_plan(yaml.safe_load(yaml.safe_dump(GUIDE)), Path("vision-api-bzt.yaml"))
    assert plan.executions[0].scenario.store_cache is True
    assert plan.notes == ("scenarios.vision-api: retrieve-resources is on (Taurus' default): JMeter would also "
                          "fetch the images, scripts and styles an HTML answer embeds; this runner sends only the "
                          "requests listed (retrieve-resources: false says so)",)
    off = scenario(**{"store-cache": False, "retrieve-resources": False, "use-dns-cache-mgr": False})
    plan = plan_of(tmp_path, off)
    assert plan.executions[0].scenario.store_cache is False and plan.notes == ()


def test_boolean_body_values_as_taurus_sends_them(tmp_path: Path) -> None:
    """simple_body_dict (bzt/utils.py) counts a bool as a number (a Python bool is an int), so a flat mapping with
    booleans is JMeter parameters, each value written by str() (_string_prop in bzt/jmx/base.py): True, False; with
    Content-Type: application/json, or a bare boolean, json.dumps writes true."""
    plan = plan_of(tmp_path, scenario(requests=[
        {"url": "http://x/q", "body": {"stream": True, "n": 2}},
        {"url": "http://x/form", "method": "POST", "body": {"stream": False}},
        {"url": "http://x/json", "method": "POST", "body": {"stream": True},
         "headers": {"Content-Type": "application/json"}},
        {"url": "http://x/bare", "method": "POST", "body": True},
    ]))
    query, form, as_json, bare = plan.executions[0].scenario.requests
    assert (query.url, query.body) == ("http://x/q?stream=True&n=2", None)
    assert form.body == b"stream=False"
    assert as_json.body == b'{"stream": true}' and bare.body == b"true"


def test_without_durations_each_user_makes_one_pass(tmp_path: Path) -> None:
    """get_load (bzt/engine/modules.py): no ramp-up, hold-for or iterations: 1 iteration; test_default_iteartions."""
    plan = plan_of(tmp_path, {"execution": [{"concurrency": 3, "scenario": "s"}],
                              "scenarios": {"s": {"requests": ["http://x/"]}}})
    (execution,) = plan.executions
    assert (execution.iterations, execution.concurrency_group, plan.end_s) == (1, False, None)
    assert execution.user_starts() == [0.0, 0.0, 0.0]


def test_iterations_run_in_a_regular_thread_group(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, {"execution": [{"concurrency": 4, "ramp-up": 2, "iterations": 5, "scenario": "s"},
                                            {"concurrency": 2, "iterations": 3, "hold-for": "10s", "scenario": "s",
                                             "delay": "1s"}],
                              "scenarios": {"s": {"requests": ["http://x/"]}}})
    first, second = plan.executions
    assert (first.iterations, first.concurrency_group, first.end_s) == (5, False, None)
    assert first.user_starts() == [0.0, 0.5, 1.0, 1.5]
    assert (second.iterations, second.end_s, second.delay_s) == (3, 10.0, 1.0)
    assert plan.end_s is None  # one execution ends by its iterations


def test_throughput_and_steps(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, {"execution": [{"concurrency": {"local": 4, "cloud": 100}, "ramp-up": "4s", "steps": 2,
                                             "hold-for": "2s", "throughput": 8, "scenario": "s"}],
                              "scenarios": {"s": {"requests": ["http://x/"]}}})
    (execution,) = plan.executions
    assert execution.concurrency == 4 and execution.user_starts() == [0.0, 0.0, 2.0, 2.0]
    cap = execution.rate_cap()
    assert cap is not None and cap.rows == ((4.0, 4.0, 2), (8.0, 8.0, 2), (8.0, 8.0, 2))
    assert [plan.rate_cap_at(t) for t in (0.5, 2.5, 5, 6.5)] == [4.0, 8.0, 8.0, 0.0]


def test_requests_with_methods_headers_and_bodies(tmp_path: Path) -> None:
    (tmp_path / "prompt.json").write_text('{"prompt": "hi"}')
    plan = plan_of(tmp_path, {
        "execution": [{"concurrency": 1, "iterations": 1, "scenario": "api"}],
        "scenarios": {"api": {
            "default-address": "http://api.local:8080/ignored-path",
            "headers": {"Authorization": "Bearer t", "X-Tenant": "a"},
            "think-time": "uniform(1s, 500ms)", "timeout": "2s", "keepalive": False,
            "requests": [
                "/health",
                {"url": "/v1/completions", "method": "post", "label": "completion",
                 "headers": {"Content-Type": "application/json", "x-tenant": "b"},
                 "body": {"model": "m", "max_tokens": 8}, "think-time": 0, "timeout": "500ms"},
                {"url": "/search", "body": {"q": "gpu", "n": 2}},
                {"url": "http://other.local/login", "method": "POST", "body": {"user": "u"}},
                {"url": "/echo", "method": "PUT", "body": "raw text", "follow-redirects": False,
                 "keepalive": True},
                {"url": "/file", "method": "POST", "body-file": "prompt.json"},
                {"url": "/nested", "method": "PATCH", "body": {"a": {"b": 1}}},
            ]}}})
    health, completion, search, login, echo, file, nested = plan.executions[0].scenario.requests
    close = ("Connection", "close")
    assert (health.label, health.method, health.url) == ("/health", "GET", "http://api.local:8080/health")
    assert health.headers == (("Authorization", "Bearer t"), ("X-Tenant", "a"), close)
    assert health.think == ThinkTime("uniform", 1.0, 0.5) and health.timeout_s == 2.0
    assert (completion.label, completion.method, completion.think, completion.timeout_s) == (
        "completion", "POST", None, 0.5)
    assert completion.headers == (("Authorization", "Bearer t"), ("x-tenant", "b"),
                                  ("Content-Type", "application/json"), close)
    assert json.loads(completion.body or b"") == {"model": "m", "max_tokens": 8}
    assert (search.url, search.body) == ("http://api.local:8080/search?q=gpu&n=2", None)
    assert (login.url, login.body) == ("http://other.local/login", b"user=u")
    assert ("Content-Type", "application/x-www-form-urlencoded") in login.headers
    assert (echo.body, echo.follow_redirects, close in echo.headers) == (b"raw text", False, False)
    assert file.body == b'{"prompt": "hi"}'
    assert json.loads(nested.body or b"") == {"a": {"b": 1}}  # nested: JSON whatever the Content-Type


def test_what_is_accepted_with_a_note_or_the_value_this_runner_follows(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, {
        "execution": [{"concurrency": 1, "hold-for": "2.5s", "executor": "jmeter", "scenario": "s"}],
        "scenarios": {"s": {"store-cache": False, "retrieve-resources": False, "protocol": "http",
                            "store-cookie": False, "requests": ["http://x/"]}},
        "reporting": [{"module": "final-stats"}, "console"], "provisioning": "local"})
    assert plan.executions[0].hold_s == 2 and plan.executions[0].scenario.store_cookie is False
    assert plan.notes == ("reporting (console, final-stats): this runner prints its own progress and summary",
                          "execution.0.hold-for 2.5s: JMeter's thread group takes whole seconds, 2s (as Taurus "
                          "writes it)")


def simple(**execution: Any) -> dict[str, Any]:
    return {"execution": [{"concurrency": 1, "hold-for": "5s", "scenario": "s", **execution}],
            "scenarios": {"s": {"requests": ["http://x/"]}}}


def scenario(**settings: Any) -> dict[str, Any]:
    return {"execution": [{"concurrency": 1, "hold-for": "5s", "scenario": "s"}],
            "scenarios": {"s": {"requests": ["http://x/"], **settings}}}


def request(**fields: Any) -> dict[str, Any]:
    return scenario(requests=[{"url": "http://x/", **fields}])


# (what the file has, its config, -o options, the key path the error names, words of the reason)
BAD = [
    ("another executor", simple(executor="locust"), [], "execution.0.executor", "Taurus' default executor, JMeter"),
    ("a JMeter-only option", scenario(**{"use-dns-cache-mgr": True}), [], "scenarios.s.use-dns-cache-mgr",
     "JMeter setting this runner does not emulate"),
    ("an assertion", request(**{"assert": ["200"]}), [], "scenarios.s.requests.0.assert", "assertions are not checked"),
    ("an extractor", request(**{"extract-jsonpath": {"id": "$.id"}}), [], "scenarios.s.requests.0.extract-jsonpath",
     "extractors feed JMeter variables"),
    ("a data source", scenario(**{"data-sources": ["users.csv"]}), [], "scenarios.s.data-sources",
     "data sources"),
    ("a JSR223 block", request(jsr223="vars.put('x', 1)"), [], "scenarios.s.requests.0.jsr223", "inside JMeter"),
    ("a logic block", scenario(requests=[{"loop": 3, "do": ["http://x/"]}]), [], "scenarios.s.requests.0.loop",
     "logic blocks (loop)"),
    ("a script scenario", {"execution": [{"concurrency": 1, "scenario": {"script": "test.jmx"}}]}, [],
     "execution.0.scenario.script", "(a .jmx: JMeter's), which needs the tool"),
    ("a bad duration", simple(**{"hold-for": "10x"}), [], "execution.0.hold-for", "bad duration '10x'"),
    ("a bad duration from -o", simple(), ["execution.0.hold-for=soon"], "execution.0.hold-for", "(as set by -o)"),
    ("a bad -o path", simple(), ["execution.scenario=x"], "-o execution.scenario=x", "index it with a number"),
    ("an unknown key", simple(**{"hold-fr": "5s"}), [], "execution.0.hold-fr", "did you mean hold-for?"),
    ("no such scenario", simple(scenario="missing"), [], "execution.0.scenario", "no scenario named 'missing'"),
    ("a cap without a duration", {"execution": [{"concurrency": 2, "throughput": 5, "scenario": "s"}],
                                  "scenarios": {"s": {"requests": ["http://x/"]}}}, [],
     "execution.0.throughput", "needs ramp-up and/or hold-for"),
    ("steps with iterations", simple(**{"ramp-up": "4s", "steps": 2, "iterations": 3}), [], "execution.0.steps",
     "not with iterations"),
    ("steps without a ramp-up", simple(steps=2), [], "execution.0.steps", "needs ramp-up"),
    ("under a second", simple(**{"hold-for": "500ms"}), [], "execution.0.hold-for", "nothing would run"),
    ("no default-address", scenario(requests=["/infer"]), [], "scenarios.s.requests.0.url", "no default-address"),
    ("a JMeter variable", scenario(requests=["http://x/${id}"]), [], "scenarios.s.requests.0.url",
     "JMeter variables and functions are not evaluated"),
    ("embedded resources", scenario(**{"retrieve-resources": True}), [], "scenarios.s.retrieve-resources",
     "(retrieve-resources: false is accepted); remove it from the file, or drop it for this run with "
     "-o scenarios.s.^retrieve-resources="),
    ("a pass/fail reporter", {**simple(), "reporting": [{"module": "passfail", "criteria": ["avg-rt>1s"]}]}, [],
     "reporting.0", "reporter 'passfail' is not run"),
    ("engine settings", {**simple(), "settings": {"artifacts-dir": "/tmp/x"}}, [], "settings",
     "engine settings"),
    ("a form body with PUT", request(method="PUT", body={"a": 1}), [], "scenarios.s.requests.0.body",
     "JMeter's handling differs by method"),
    ("no execution", {"scenarios": {"s": {"requests": ["http://x/"]}}}, [], "execution", "the file runs nothing"),
    ("not a mapping", "- just\n- a list\n", [], "the file", "expected a Taurus file"),
    ("not YAML", "execution: [\n", [], "not valid YAML (line 2", ""),
    ("concurrency 0", simple(concurrency=0), [], "execution.0.concurrency", "at least 1"),
    # One execution written as a mapping: its keys are execution.KEY, as bzt's -o addresses them.
    ("one execution's refused key", {"execution": {"hold-for": "5s", "executor": "locust", "scenario": {
        "requests": ["http://x/"]}}}, [], "execution.executor", "drop it for this run with -o execution.^executor="),
    ("an index into one execution", {"execution": {"hold-for": "5s", "scenario": {"requests": ["http://x/"]}}},
     ["execution.0.hold-for=30s"], "-o execution.0.hold-for=30s: execution is one mapping",
     "(-o execution.hold-for=...; bzt fails on 0 here too)"),
    ("a DNS cache manager", scenario(**{"use-dns-cache-mgr": True}), [], "scenarios.s.use-dns-cache-mgr",
     "(use-dns-cache-mgr: false is accepted)"),
    ("several documents, one not a mapping", "execution: {scenario: {requests: ['http://x/']}}\n---\n- x\n", [],
     "document 2 (of 2)", "expected a Taurus file (a mapping)"),
]


@pytest.mark.parametrize(("case", "config", "overrides", "key", "reason"), BAD, ids=[b[0] for b in BAD])
def test_files_outside_the_subset_get_one_line_naming_file_and_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, config: Any, overrides: list[str], key: str,
        reason: str) -> None:
    path = write(tmp_path, config)
    with pytest.raises(SystemExit) as exited:
        main(["run", "--taurus", str(path), *[arg for o in overrides for arg in ("-o", o)]])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"gpu-loadtest: error: {path}: {key}"), lines[0]
    assert reason in lines[0]


@pytest.mark.parametrize(("args", "message"), [
    (["--taurus", "/nonexistent/test.yaml"], "/nonexistent/test.yaml: No such file or directory"),
    (["--taurus", "FILE", "--url", "http://x/"],
     "--url: not with --taurus (the file says what to send, and how much)"),
    (["--taurus", "FILE", "--arrivals", "uniform"],
     "--arrivals: not with --taurus (the file says what to send, and how much)"),
    (["--url", "http://x/", "--profile", "5", "-o", "execution.0.hold-for=1s"],
     "-o/--option: only with --taurus (it overrides the file's settings)"),
    (["--url", "http://x/"], "give --url and --profile (open loop), or --taurus FILE (closed loop)"),
])
def test_command_line_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                            message: str) -> None:
    path = write(tmp_path, simple())
    with pytest.raises(SystemExit) as exited:
        main(["run", *[str(path) if a == "FILE" else a for a in args]])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == f"gpu-loadtest: error: {message}"


def test_the_error_type_carries_the_same_line(tmp_path: Path) -> None:
    with pytest.raises(TaurusFileError, match=r"execution\.0\.executor: "):
        plan_of(tmp_path, simple(executor="k6"))


def test_docs_key_tables_are_the_code_tables() -> None:
    assert generated_block("taurus.md", "taurus-keys") == markdown(), (
        "regenerate docs/taurus.md's taurus-keys tables: python -c 'from loadtest.loadgen.taurus.keys import markdown; "
        "print(markdown(), end=\"\")'")


def placed(level: str, key: str, value: Any) -> tuple[dict[str, Any], str]:
    """A runnable file with ``key: value`` added at ``level``, and the path an error about it names."""
    if level == "Top level":
        return {**simple(), key: value}, key
    if level == "`execution` items":
        return simple(**{key: value}), f"execution.0.{key}"
    if level == "Scenarios":
        return scenario(**{key: value}), f"scenarios.s.{key}"
    return request(**{key: value}), f"scenarios.s.requests.0.{key}"


REFUSED = [(level, key, spec) for level, table in LEVELS for key, spec in table.items() if spec.read is None]


@pytest.mark.parametrize(("level", "key", "spec"), REFUSED, ids=[f"{r[0]}:{r[1]}" for r in REFUSED])
def test_every_refused_key_is_refused_naming_itself(tmp_path: Path, level: str, key: str, spec: Key) -> None:
    config, path = placed(level, key, "x")
    with pytest.raises(TaurusFileError) as refused:
        plan_of(tmp_path, config)
    assert f": {path}: {spec.note}" in str(refused.value) and "\n" not in str(refused.value)
    if spec.only is not ANY_VALUE:  # the one value this runner follows anyway runs
        config, _ = placed(level, key, spec.only)
        assert plan_of(tmp_path, config).executions
