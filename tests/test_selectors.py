"""Label selectors: Kubernetes parsing and matching, and PromQL matchers that no value can reshape."""

from __future__ import annotations

import contextlib
import re
from urllib.parse import parse_qs, urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.rules.selectors import (
    Requirement,
    SelectorError,
    format_selector,
    matches,
    parse_selector,
    to_label_selector,
    to_promql_matchers,
)
from tests.support.promql_checks import hostile_text, parsed_matchers

pytestmark = pytest.mark.unit

R = Requirement
# A label value as Kubernetes validates it (apimachinery validation.IsValidLabelValue).
K8S_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
SELECTOR_SYNTAX = set(" \t\r\n=!(),<>")

# --- parsing ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("   ", ()),
        ("app=vision-api", (R("app", "=", ("vision-api",)),)),
        ("app==vision-api", (R("app", "==", ("vision-api",)),)),
        ("app!=vision-api", (R("app", "!=", ("vision-api",)),)),
        ("tier in (web,gpu)", (R("tier", "in", ("gpu", "web")),)),
        ("tier notin (web, gpu, web)", (R("tier", "notin", ("gpu", "web")),)),
        ("tier", (R("tier", "exists"),)),
        ("!tier", (R("tier", "!"),)),
        ("! tier", (R("tier", "!"),)),
        ("replicas>3", (R("replicas", "gt", ("3",)),)),
        ("replicas<10", (R("replicas", "lt", ("10",)),)),
        ("replicas < 10", (R("replicas", "lt", ("10",)),)),
        (
            "app=vision-api,tier in (gpu,web)",
            (R("app", "=", ("vision-api",)), R("tier", "in", ("gpu", "web"))),
        ),
        (
            " zeta = 1 ,\talpha in(x) , !beta,gamma\n",
            (R("alpha", "in", ("x",)), R("beta", "!"), R("gamma", "exists"), R("zeta", "=", ("1",))),
        ),
        ("k=", (R("k", "=", ("",)),)),
        ("k!=", (R("k", "!=", ("",)),)),
        ("k in ()", (R("k", "in", ("",)),)),  # Go reads "()" as the empty value
        ("k in (,a,)", (R("k", "in", ("", "a")),)),
        ("k in (a,,b)", (R("k", "in", ("", "a", "b")),)),
        ("in in (in,notin)", (R("in", "in", ("in", "notin")),)),  # keywords are plain words as keys and values
        ("notin=in", (R("notin", "=", ("in",)),)),
        ("app.kubernetes.io/name=gpu-worker", (R("app.kubernetes.io/name", "=", ("gpu-worker",)),)),
        ("a" * 63 + "=" + "b" * 63, (R("a" * 63, "=", ("b" * 63,)),)),
        ("x/" + "n" * 63, (R("x/" + "n" * 63, "exists"),)),
        ("k=A.b_c-9", (R("k", "=", ("A.b_c-9",)),)),
        ("b=2,a=1,b=1", (R("a", "=", ("1",)), R("b", "=", ("2",)), R("b", "=", ("1",)))),  # stable sort by key
        ("k>-0", None),
        ("k>007", (R("k", "gt", ("007",)),)),
    ],
)
def test_parse_valid(text: str, expected: tuple[Requirement, ...] | None) -> None:
    if expected is None:
        with pytest.raises(SelectorError):
            parse_selector(text)
        return
    assert parse_selector(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (",", "found ',' at position 0"),
        ("a,", "after ','"),
        ("a,,b", "found ','"),
        ("a=b c", "found 'c' at position 4"),
        ("a b", "found 'b'"),
        ("=b", "found '='"),
        ("a=(b)", "found '('"),
        ("a=b=c", "found '='"),
        ("a in b", "expected '('"),
        ("a in (b", "found end of string"),
        ("a in (b c)", "found 'c'"),
        ("a in (b))", "found ')'"),
        ("a in ((b))", "found '('"),
        ("!a=b", "found '='"),
        ("!!a", "found '!'"),
        ("!", "found end of string"),
        ("a>=1", "found '='"),
        ("a=>1", "found '>'"),
        ("a~=b", "invalid label key"),
        ("a=~b", "invalid value"),
        ('a="b"', "invalid value"),
        ("a=b*", "invalid value"),
        ("a=-b", "invalid value"),
        ("a=b" + "c" * 63, "at most 63"),
        ("a" * 64 + "=b", "at most 63"),
        ("-a=b", "invalid label key"),
        ("a./b=c", "prefix"),
        ("Example.com/a=b", "prefix"),
        ("/a=b", "prefix"),
        ("a/=b", "non-empty"),
        ("a/b/c=d", "at most one '/'"),
        ("é=b", "invalid label key"),
        ("a=é", "invalid value"),
        ("a=b\x00", "invalid value"),
        ("a>b", "must be an integer"),
        ("a>", "must be an integer"),
        ("a<1.5", "must be an integer"),
        ("a>99999999999999999999", "must be an integer"),
        ("a>+1", "invalid value"),
        ("a in", "expected '('"),
    ],
)
def test_parse_invalid(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=re.escape(message)) as excinfo:
        parse_selector(text)
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # Go's url.Values.Encode: keys sorted, space as '+', '=' ',' '(' ')' '!' percent-encoded.
        (
            "labelSelector=app%3Dvision-api%2Ctier+in+%28gpu%2Cweb%29",
            (R("app", "=", ("vision-api",)), R("tier", "in", ("gpu", "web"))),
        ),
        ("metricLabelSelector=%21canary%2Cgpu+notin+%28a100%29", (R("canary", "!"), R("gpu", "notin", ("a100",)))),
        ("metricLabelSelector=model%21%3Dbert", (R("model", "!=", ("bert",)),)),
        ("labelSelector=app%3D%3Dweb&pretty=true", (R("app", "==", ("web",)),)),
    ],
)
def test_url_encoded_forms(query: str, expected: tuple[Requirement, ...]) -> None:
    params = parse_qs(query, keep_blank_values=True)
    key = "labelSelector" if "labelSelector" in params else "metricLabelSelector"
    assert parse_selector(params[key][0]) == expected
    assert urlencode({key: format_selector(expected)}) == query.split("&")[0]


def test_format_selector_is_gos_string_form() -> None:
    text = "a=1,b==2,c!=3,d in (x,y),e notin (z),f,!g,h>4,i<5"
    assert format_selector(parse_selector(text)) == text
    assert format_selector(()) == ""


def test_requirement_checks_its_arity() -> None:
    for key, op, values in [("k", "=", ()), ("k", "in", ()), ("k", "exists", ("x",)), ("k", "gt", ("1", "2"))]:
        with pytest.raises(SelectorError):
            Requirement(key, op, values)
    with pytest.raises(SelectorError):
        Requirement("k", "~", ("x",))


# --- PromQL matchers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("model=bert", ['model="bert"']),
        ("model==bert", ['model="bert"']),
        ("model!=bert", ['model!="bert"']),
        ("model in (bert)", ['model="bert"']),
        ("model in (gpt.2,bert)", ['model=~"bert|gpt\\\\.2"']),
        ("model notin (bert)", ['model!="bert"']),
        ("model notin (bert,t5)", ['model!~"bert|t5"']),
        ("model", ['model!=""']),
        ("!model", ['model=""']),
        ("model=,b_1 in (x,)", ['b_1=~"|x"', 'model=""']),
    ],
)
def test_promql_matchers(text: str, expected: list[str]) -> None:
    assert to_promql_matchers(parse_selector(text)) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("replicas>3", "not supported for metric label selectors"),
        ("replicas<3", "not supported for metric label selectors"),
        ("app.kubernetes.io/name=x", "not a valid Prometheus label name"),
        ("gpu-model=a100", "not a valid Prometheus label name"),
        ("gpu.model=a100", "not a valid Prometheus label name"),
        ("9lives=x", "not a valid Prometheus label name"),
    ],
)
def test_promql_matchers_reject(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=re.escape(message)):
        to_promql_matchers(parse_selector(text))


def test_promql_matchers_reject_bad_keys_built_directly() -> None:
    for key in ("a\n", 'a="x"} or vector(1) #', "", "a b"):
        with pytest.raises(SelectorError):
            to_promql_matchers([R(key, "=", ("v",))])


# --- echo JSON and matching -------------------------------------------------------------------------------------


def test_label_selector_echo() -> None:
    assert to_label_selector(()) is None
    assert to_label_selector(parse_selector("")) is None
    assert to_label_selector(parse_selector("b=2,a==1")) == {"matchLabels": {"a": "1", "b": "2"}}
    assert to_label_selector(parse_selector("app=web,tier in (web,gpu),!canary,gpu,x notin (a),y!=b,n>1,m<2")) == {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "canary", "operator": "DoesNotExist"},
            {"key": "gpu", "operator": "Exists"},
            {"key": "m", "operator": "Lt", "values": ["2"]},
            {"key": "n", "operator": "Gt", "values": ["1"]},
            {"key": "tier", "operator": "In", "values": ["gpu", "web"]},
            {"key": "x", "operator": "NotIn", "values": ["a"]},
            {"key": "y", "operator": "NotIn", "values": ["b"]},
        ],
    }
    # Two different equalities on one key select nothing; the echo keeps both.
    assert to_label_selector(parse_selector("a=1,a=2")) == {
        "matchLabels": {"a": "1"},
        "matchExpressions": [{"key": "a", "operator": "In", "values": ["2"]}],
    }


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", {}, True),
        ("", {"a": "1"}, True),
        ("app=web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app=web", {}, False),
        ("app=", {"app": ""}, True),
        ("app=", {}, False),
        ("app!=web", {}, True),  # a missing label is "not equal"
        ("app!=web", {"app": "web"}, False),
        ("app!=web", {"app": "db"}, True),
        ("tier in (gpu,web)", {"tier": "gpu"}, True),
        ("tier in (gpu,web)", {"tier": "db"}, False),
        ("tier in (gpu,web)", {}, False),
        ("tier in ()", {"tier": ""}, True),
        ("tier notin (gpu,web)", {}, True),
        ("tier notin (gpu,web)", {"tier": "web"}, False),
        ("tier notin (gpu,web)", {"tier": "db"}, True),
        ("tier", {"tier": ""}, True),
        ("tier", {}, False),
        ("!tier", {}, True),
        ("!tier", {"tier": ""}, False),
        ("n>3", {"n": "4"}, True),
        ("n>3", {"n": "3"}, False),
        ("n>3", {"n": "-10"}, False),
        ("n<3", {"n": "-10"}, True),
        ("n>3", {"n": "x"}, False),
        ("n>3", {"n": "4.5"}, False),
        ("n>3", {"n": "1_000"}, False),
        ("n>3", {"n": "٤"}, False),  # not an ASCII digit
        ("n>3", {}, False),
        ("n<3", {}, False),
        ("app=web,tier in (gpu)", {"app": "web", "tier": "gpu", "x": "y"}, True),
        ("app=web,tier in (gpu)", {"app": "web"}, False),
        ("a=1,a=2", {"a": "1"}, False),
    ],
)
def test_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert matches(parse_selector(text), labels) is expected


# --- properties -------------------------------------------------------------------------------------------------

any_value = hostile_text(10)
prom_key = st.from_regex(r"[a-zA-Z]([a-zA-Z0-9_]{0,14}[a-zA-Z0-9])?", fullmatch=True)  # valid for both
selector_words = ["a", "b_1", "x.y/z", "in", "notin", "=", "==", "!=", "!", "(", ")", ",", " ", "<", ">", "7", "-"]


def parsed(matchers: list[str]) -> list[tuple[str, str, str]]:
    return parsed_matchers(",".join(matchers))


@st.composite
def requirements(draw: st.DrawFn) -> tuple[Requirement, set[str]]:
    """A requirement with arbitrary (unvalidated) values, plus probe strings to try its regex against."""
    key = draw(prom_key)
    op = draw(st.sampled_from(["=", "==", "!=", "in", "notin", "exists", "!"]))
    if op in ("exists", "!"):
        return R(key, op), set()
    if op in ("in", "notin"):
        values = tuple(sorted(draw(st.sets(any_value, min_size=1, max_size=4))))
    else:
        values = (draw(any_value),)
    probes = set(draw(st.lists(any_value, max_size=3))) | {"|".join(values), "".join(values), ""}
    return R(key, op, values), probes


@settings(max_examples=300, deadline=None)
@given(st.lists(requirements(), min_size=1, max_size=4))
def test_no_value_can_change_the_query(drawn: list[tuple[Requirement, set[str]]]) -> None:
    reqs = [req for req, _ in drawn]
    result = parsed(to_promql_matchers(reqs))
    assert [name for name, _, _ in result] == [req.key for req in reqs]
    for (_, op, value), (req, probes) in zip(result, drawn, strict=True):
        if req.operator in ("exists", "!"):
            assert (op, value) == ("!=" if req.operator == "exists" else "=", "")
        elif req.operator in ("=", "==", "!=") or len(req.values) == 1:
            assert op == ("!=" if req.operator in ("!=", "notin") else "=")
            assert value == req.values[0]
        else:
            assert op == ("!~" if req.operator == "notin" else "=~")
            for probe in {*req.values, *probes}:
                assert bool(re.fullmatch(value, probe)) == (probe in req.values), (req.values, probe)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(prom_key, any_value | st.from_regex(K8S_VALUE, fullmatch=True)), min_size=1, max_size=4))
def test_selector_strings_with_arbitrary_values(pairs: list[tuple[str, str]]) -> None:
    text = ",".join(f"{key}={value}" for key, value in pairs)
    all_valid = all(K8S_VALUE.fullmatch(value) and len(value) <= 63 for _, value in pairs)
    try:
        reqs = parse_selector(text)
    except SelectorError:
        assert not all_valid, text
        return
    if all_valid:
        assert sorted(reqs, key=lambda r: r.key) == list(reqs)
        assert sorted((r.key, r.values[0]) for r in reqs) == sorted(pairs)
    elif all(not (set(value) & SELECTOR_SYNTAX) for _, value in pairs):
        pytest.fail(f"invalid value accepted: {text!r}")
    # Whatever was accepted (a value with ',' or '=' may split into more requirements) is valid and inert.
    for req in reqs:
        assert all(K8S_VALUE.fullmatch(v) and len(v) <= 63 for v in req.values)
    try:
        built = to_promql_matchers(reqs)
    except SelectorError:
        return  # e.g. a split-off key such as "0" that cannot be a Prometheus label name
    assert [name for name, _, _ in parsed(built)] == [r.key for r in reqs]


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=40) | st.lists(st.sampled_from(selector_words), max_size=12).map("".join))
def test_parse_only_raises_selector_error(text: str) -> None:
    try:
        reqs = parse_selector(text)
    except SelectorError as exc:
        assert "\n" not in str(exc)
        return
    # Accepted selectors survive a round trip through Go's string form.
    assert parse_selector(format_selector(reqs)) == reqs
    matches(reqs, {"a": "1", "in": "7"})
    to_label_selector(reqs)
    with contextlib.suppress(SelectorError):
        to_promql_matchers(reqs)
