"""The two duration grammars, checked with their owners' own test tables.

Go: golang/go src/time/time_test.go, ``parseDurationTests`` and ``parseDurationErrorTests`` (inputs and expected
nanoseconds). Prometheus: prometheus/common model/time_test.go, ``TestParseDuration`` (its base cases),
``TestDuration_UnmarshalJSON`` (``289y``) and ``TestParseBadDuration``.
"""

from __future__ import annotations

import pytest

from clikit.durations import DurationError, parse_go_duration, parse_prometheus_duration

pytestmark = pytest.mark.unit

NS, US, MS, S, MIN, H = 1, 1_000, 1_000_000, 10**9, 60 * 10**9, 3600 * 10**9

# golang/go src/time/time_test.go parseDurationTests: (text, nanoseconds)
GO_VALID = [
    ("0", 0), ("5s", 5 * S), ("30s", 30 * S), ("1478s", 1478 * S),
    ("-5s", -5 * S), ("+5s", 5 * S), ("-0", 0), ("+0", 0),
    ("5.0s", 5 * S), ("5.6s", 5 * S + 600 * MS), ("5.s", 5 * S), (".5s", 500 * MS), ("1.0s", S), ("1.00s", S),
    ("1.004s", S + 4 * MS), ("1.0040s", S + 4 * MS), ("100.00100s", 100 * S + MS),
    ("10ns", 10 * NS), ("11us", 11 * US), ("12\u00b5s", 12 * US), ("12\u03bcs", 12 * US), ("13ms", 13 * MS),
    ("14s", 14 * S), ("15m", 15 * MIN), ("16h", 16 * H),
    ("3h30m", 3 * H + 30 * MIN), ("10.5s4m", 4 * MIN + 10 * S + 500 * MS), ("-2m3.4s", -(2 * MIN + 3 * S + 400 * MS)),
    ("1h2m3s4ms5us6ns", H + 2 * MIN + 3 * S + 4 * MS + 5 * US + 6 * NS),
    ("39h9m14.425s", 39 * H + 9 * MIN + 14425 * MS),
    ("52763797000ns", 52763797000), ("0.3333333333333333333h", 20 * MIN), ("9007199254740993ns", (1 << 53) + 1),
    ("9223372036854775807ns", (1 << 63) - 1), ("9223372036854775.807us", (1 << 63) - 1),
    ("9223372036s854ms775us807ns", (1 << 63) - 1), ("-9223372036854775808ns", -(1 << 63)),
    ("-9223372036854775.808us", -(1 << 63)), ("-9223372036s854ms775us808ns", -(1 << 63)),
    ("-2562047h47m16.854775808s", -(1 << 63)), ("0.100000000000000000000h", 6 * MIN),
    ("0.830103483285477580700h", 49 * MIN + 48 * S + 372539827),
]

# golang/go src/time/time_test.go parseDurationErrorTests: invalid, then overflow
GO_INVALID = [
    "", "3", "-", "s", ".", "-.", ".s", "+.s", "1d", "\x85\x85", "\xffff", "hello \xffff world", "\ufffd",
    "\ufffd hello \ufffd world",
    "9223372036854775810ns", "9223372036854775808ns", "-9223372036854775809ns", "9223372036854776us", "3000000h",
    "9223372036854775.808us", "9223372036854ms775us808ns",
]

# prometheus/common model/time_test.go TestParseDuration (base cases) and TestDuration_UnmarshalJSON ("289y")
PROMETHEUS_VALID = [
    ("0", 0), ("0w", 0), ("0s", 0), ("324ms", 324 * MS), ("3s", 3 * S), ("5m", 5 * MIN), ("1h", H), ("4d", 96 * H),
    ("4d1h", 97 * H), ("14d", 14 * 24 * H), ("3w", 21 * 24 * H), ("3w2d1h", (23 * 24 + 1) * H),
    ("10y", 10 * 365 * 24 * H), ("289y", 289 * 365 * 24 * H),
]

# prometheus/common model/time_test.go TestParseBadDuration, and TestParseDuration's negative cases, which only
# ParseDurationAllowNegative accepts
PROMETHEUS_INVALID = ["1", "1y1m1d", "1.5d", "d", "294y", "200y10400w", "107675d", "2584200h", "", "-3s", "-1w"]


# grammar -> its parser, and what its refusals say
GRAMMARS = {"go": (parse_go_duration, "expected a duration like"),
            "prometheus": (parse_prometheus_duration, "expected a Prometheus duration")}
ACCEPTED = [("go", *case) for case in GO_VALID] + [("prometheus", *case) for case in PROMETHEUS_VALID]
REFUSED = [("go", text) for text in GO_INVALID] + [("prometheus", text) for text in PROMETHEUS_INVALID]


@pytest.mark.parametrize(("grammar", "text", "nanoseconds"), ACCEPTED)
def test_upstream_accepts(grammar: str, text: str, nanoseconds: int) -> None:
    parse, _ = GRAMMARS[grammar]
    assert parse(text) == nanoseconds / 1e9


@pytest.mark.parametrize(("grammar", "text"), REFUSED)
def test_upstream_refuses(grammar: str, text: str) -> None:
    parse, refusal = GRAMMARS[grammar]
    with pytest.raises(DurationError, match=refusal):
        parse(text)


@pytest.mark.parametrize(("text", "go", "prometheus"), [
    # Where the two grammars part, which matters where a value moves between a flag and a rules file.
    ("1\u03bcs", 1e-6, None),  # Go's units only
    ("5m1h", 3900.0, None),  # any order in Go; Prometheus wants the largest unit first
    ("1.5h", 5400.0, None),  # fractions in Go only
    ("2w", None, 14 * 86400.0),  # days, weeks and years in Prometheus only
    ("1h1h", 7200.0, None),  # a unit twice: Go adds, Prometheus refuses
])
def test_where_the_grammars_differ(text: str, go: float | None, prometheus: float | None) -> None:
    for parse, expected in ((parse_go_duration, go), (parse_prometheus_duration, prometheus)):
        if expected is None:
            with pytest.raises(DurationError):
                parse(text)
        else:
            assert parse(text) == expected
