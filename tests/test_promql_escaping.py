"""adapter.rules.promql must make request values inert: whatever the string, the query keeps the shape we built.

promql_parser (a port of the Prometheus parser) checks the shape; Python's ``re`` stands in for RE2 on the
escaped patterns (both treat exactly ``\\.+*?()|[]{}^$`` as metacharacters outside classes).
"""

from __future__ import annotations

import re

import promql_parser
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.rules.promql import PromQLError, check_label_name, matcher, one_of, quote, regex_literal
from tests.support.promql_checks import SPECIALS, hostile_text, parsed_matchers

pytestmark = pytest.mark.unit

nasty_text = hostile_text(12)


@settings(max_examples=300, deadline=None)
@given(nasty_text)
def test_quote_round_trips_in_a_matcher(value: str) -> None:
    assert parsed_matchers(f"a={quote(value)}") == [("a", "=", value)]
    assert parsed_matchers(matcher("a", "!=", value)) == [("a", "!=", value)]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12))
def test_quote_round_trips_as_a_string_literal(value: str) -> None:
    expr = promql_parser.parse(quote(value))
    assert isinstance(expr, promql_parser.StringLiteral)
    assert expr.val == value


@settings(max_examples=300, deadline=None)
@given(nasty_text)
def test_regex_literal_matches_only_itself(value: str) -> None:
    pattern = regex_literal(value)
    assert re.fullmatch(pattern, value)
    (name, op, parsed) = parsed_matchers(matcher("a", "=~", pattern))[0]
    assert (name, op, parsed) == ("a", "=~", pattern)  # the Rust port compiled it too
    for other in (value + "x", "x" + value, value[:-1], value * 2):
        if other != value:
            assert not re.fullmatch(pattern, other)


@settings(max_examples=300, deadline=None)
@given(st.sets(nasty_text, min_size=1, max_size=5), st.lists(nasty_text, max_size=5), st.booleans())
def test_one_of_matches_exactly_its_values(values: set[str], probes: list[str], negate: bool) -> None:
    [(name, op, value)] = parsed_matchers(one_of("gpu", values, negate=negate))
    assert name == "gpu"
    if len(values) == 1:
        assert (op, value) == ("!=" if negate else "=", next(iter(values)))
        return
    assert op == ("!~" if negate else "=~")
    ordered = sorted(values)
    # Probes that an unescaped alternation would confuse with the values themselves.
    probes += ["|".join(ordered), "".join(ordered), ordered[0] + "|", "", ".*", *(v + v for v in ordered)]
    for probe in [*values, *probes]:
        assert bool(re.fullmatch(value, probe)) == (probe in values), (ordered, probe)


def test_one_of_examples() -> None:
    assert one_of("pod", ["b", "a", "a"]) == 'pod=~"a|b"'
    assert one_of("pod", ["x.y"], negate=True) == 'pod!="x.y"'
    assert one_of("pod", ["a.b", "c|d"]) == 'pod=~"a\\\\.b|c\\\\|d"'
    with pytest.raises(PromQLError):
        one_of("pod", [])


@pytest.mark.parametrize(
    "name",
    [
        'a="x"} or vector(1) #',
        'a="x"}',
        "a}",
        "a=",
        "a b",
        "a,b",
        "",
        "1a",
        "a-b",
        "a.b",
        "app.kubernetes.io/name",
        "é",
        "a\x00",
        " a",
        "a\nb",
    ],
)
def test_check_label_name_rejects(name: str) -> None:
    with pytest.raises(PromQLError):
        check_label_name(name)
    with pytest.raises(PromQLError):
        matcher(name, "=", "v")


@pytest.mark.parametrize("name", ["a", "_a", "pod", "exported_namespace", "A_1", "_"])
def test_check_label_name_accepts(name: str) -> None:
    assert check_label_name(name) == name
    assert parsed_matchers(matcher(name, "=", "v")) == [(name, "=", "v")]


@settings(max_examples=300, deadline=None)
@given(st.text(st.one_of(st.sampled_from(SPECIALS), st.characters(max_codepoint=127)), max_size=20))
def test_accepted_label_names_cannot_change_the_query(name: str) -> None:
    try:
        built = matcher(name, "=", "v")
    except PromQLError:
        return
    [(parsed_name, op, value)] = parsed_matchers(built)
    assert (parsed_name.strip(), op, value) == (name.strip(), "=", "v")


def test_matcher_rejects_unknown_operators() -> None:
    for op in ("==", "~", "=~~", "", " ="):
        with pytest.raises(PromQLError):
            matcher("a", op, "v")


def test_check_label_name_rejects_trailing_newline() -> None:
    with pytest.raises(PromQLError):
        check_label_name("a\n")


def test_quote_never_emits_a_raw_replacement_character() -> None:
    assert "\ufffd" not in quote("bad \ufffd byte")
