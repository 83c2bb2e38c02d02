"""The three duration grammars, checked with their owners' own test tables.

Go: golang/go src/time/time_test.go, ``parseDurationTests`` and ``parseDurationErrorTests`` (inputs and expected
nanoseconds). Prometheus: prometheus/common model/time_test.go, ``TestParseDuration`` (its base cases),
``TestDuration_UnmarshalJSON`` (``289y``) and ``TestParseBadDuration``. Taurus (Blazemeter/taurus
``dehumanize_time`` in bzt/utils.py) has no test table of its own: its cases are its docs' examples and the files its
users run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from clikit.durations import DurationError, parse_go_duration, parse_prometheus_duration, parse_taurus_duration

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


# Taurus: (value as a file writes it, seconds). A YAML number, None and empty text are read too.
TAURUS_VALID: list[tuple[object, float]] = [
    # The guide's file (DevSecOpsSamples/eks-gpu-autoscaling vision-api-bzt.yaml): ramp-up 1s, hold-for 10m30s.
    ("1s", 1.0), ("10m30s", 630.0),
    # site/dat/docs/ExecutionSettings.md and JMeter.md examples: 15s, 2m, 1m30s, 1s500ms, 500ms, 30s; a bare 0.75.
    ("15s", 15.0), ("2m", 120.0), ("1m30s", 90.0), ("1s500ms", 1.5), ("500ms", 0.5), (0.75, 0.75), (10, 10.0),
    # site/dat/docs/ConfigSyntax.md, "Human-Readable Time Specifications": 1s200ms, "1d 2h 3m 4s" = 93784 seconds.
    ("1s200ms", 1.2), ("1d 2h 3m 4s", 93784.0),
    # dehumanize_time: units d, h, m, s, ms in any case; spaces dropped; no unit means seconds; empty means 0.
    ("1h", 3600.0), ("1d4h33m12s103ms", 1 * 86400 + 4 * 3600 + 33 * 60 + 12 + 0.103), ("2H", 7200.0),
    ("10 m 30 s", 630.0), ("20", 20.0), ("1.5m", 90.0), ("", 0.0), (None, 0.0),
]

TAURUS_INVALID: list[object] = [
    "10x",  # dehumanize_time: "String contains unsupported unit"
    "abc", "inf", "-5s", "10m,30s", "1.2.3s", True, [1], -1,
]

# grammar -> its parser, what its refusals say, and whether its results are exact (Taurus adds floats)
GRAMMARS: dict[str, tuple[Callable[..., float], str, bool]] = {
    "go": (parse_go_duration, "expected a duration like", True),
    "prometheus": (parse_prometheus_duration, "expected a Prometheus duration", True),
    "taurus": (parse_taurus_duration, r"bad duration|expected a duration \(e\.g\.|a duration must be", False),
}
ACCEPTED = ([("go", text, ns / 1e9) for text, ns in GO_VALID]
            + [("prometheus", text, ns / 1e9) for text, ns in PROMETHEUS_VALID]
            + [("taurus", *case) for case in TAURUS_VALID])
REFUSED = ([("go", text) for text in GO_INVALID] + [("prometheus", text) for text in PROMETHEUS_INVALID]
           + [("taurus", value) for value in TAURUS_INVALID])


@pytest.mark.parametrize(("grammar", "text", "seconds"), ACCEPTED)
def test_upstream_accepts(grammar: str, text: object, seconds: float) -> None:
    parse, _, exact = GRAMMARS[grammar]
    assert parse(text) == (seconds if exact else pytest.approx(seconds))


@pytest.mark.parametrize(("grammar", "text"), REFUSED)
def test_upstream_refuses(grammar: str, text: object) -> None:
    parse, refusal, _ = GRAMMARS[grammar]
    with pytest.raises(DurationError, match=refusal) as caught:
        parse(text)
    assert "\n" not in str(caught.value)


def test_where_the_error_starts() -> None:
    with pytest.raises(DurationError, match=r"^execution\.0\.hold-for bad duration '10x'"):
        parse_taurus_duration("10x", "execution.0.hold-for")


@pytest.mark.parametrize(("text", "go", "prometheus", "taurus"), [
    # Where the grammars part, which matters where a value moves between a flag, a rules file and a Taurus file.
    ("1\u03bcs", 1e-6, None, None),  # Go's units only
    ("5m1h", 3900.0, None, 3900.0),  # any order in Go and Taurus; Prometheus wants the largest unit first
    ("1.5h", 5400.0, None, 5400.0),  # fractions in Go and Taurus only
    ("2w", None, 14 * 86400.0, None),  # weeks and years in Prometheus only
    ("2d", None, 2 * 86400.0, 2 * 86400.0),  # days in Prometheus and Taurus
    ("1h1h", 7200.0, None, 7200.0),  # a unit twice: Go and Taurus add, Prometheus refuses
    ("90", None, None, 90.0),  # a number alone is seconds in Taurus only
    ("10 m", None, None, 600.0),  # spaces in Taurus only
    ("-5s", -5.0, None, None),  # a sign in Go only
    ("5S", None, None, 5.0),  # units in any case in Taurus only
])
def test_where_the_grammars_differ(text: str, go: float | None, prometheus: float | None,
                                   taurus: float | None) -> None:
    for parse, expected in ((parse_go_duration, go), (parse_prometheus_duration, prometheus),
                            (parse_taurus_duration, taurus)):
        if expected is None:
            with pytest.raises(DurationError):
                parse(text)
        else:
            assert parse(text) == expected
