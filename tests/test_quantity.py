"""Quantity strings must be exactly what Go's resource.Quantity marshals, and parse back to the same value."""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, ROUND_UP, Decimal, localcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clikit.quantity import format_quantity, milli_value, parse_quantity

pytestmark = pytest.mark.unit

CANONICAL = re.compile(r"^(0|-?[1-9][0-9]*(n|u|m|k|M|G|T|P|E)?)$")
SUFFIX_EXPONENT = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0"),
        (0.0, "0"),
        (-0.0, "0"),
        (Decimal("-0.000"), "0"),
        (0.5, "500m"),
        (25, "25"),
        (1.5, "1500m"),
        (1500, "1500"),
        (2000, "2k"),
        (1_500_000, "1500k"),
        (10.5, "10500m"),
        (0.00015, "150u"),
        (-2, "-2"),
        (72.5, "72500m"),
        (0.1, "100m"),
        (0.3, "300m"),
        (1e-10, "1n"),
        (-1e-10, "-1n"),  # Go rounds the magnitude up
        (2.5e-9, "3n"),
        (1e-9, "1n"),
        (1.0000000001, "1000000001n"),
        (Decimal("0.9999999999"), "1"),
        (123456789.123, "123456789123m"),
        (0.001, "1m"),
        (12.345, "12345m"),
        (1e6, "1M"),
        (1e9, "1G"),
        (1e12, "1T"),
        (1e15, "1P"),
        (1e18, "1E"),
        (12e18, "12E"),
        (1e19, "10E"),
        (1e20, "100E"),
        (1e21, "1e21"),  # no suffix beyond E: current apimachinery falls back to an exponent
        (10**30, "1e30"),
        (Decimal("1.5E+22"), "15e21"),
        (True, "1"),
        (Decimal("123.4560"), "123456m"),
        (Decimal("-0.00015"), "-150u"),
        (2**63, "9223372036854775808"),
    ],
)
def test_format_quantity(value: float | int | Decimal, expected: str) -> None:
    assert format_quantity(value) == expected


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, Decimal("NaN"), Decimal("-Infinity"), Decimal("sNaN")]
)
def test_format_quantity_rejects_non_finite(value: float | Decimal) -> None:
    with pytest.raises(ValueError, match="finite"):
        format_quantity(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", "0"),
        ("500m", "0.5"),
        ("1500k", "1500000"),
        ("150u", "0.00015"),
        ("1n", "0.000000001"),
        ("-2", "-2"),
        ("45.67", "45.67"),
        ("4.5e1", "45"),
        ("4.5E1", "45"),
        ("45670m", "45.67"),
        ("1E", "1000000000000000000"),
        ("1e21", "1000000000000000000000"),
        ("1Ki", "1024"),
        ("1.5Gi", "1610612736"),
        (".5", "0.5"),
        ("5.", "5"),
        ("+3k", "3000"),
        ("1e-12", "0.000000001"),  # rounded up to 1n like ParseQuantity
        ("-1e-12", "-0.000000001"),
        (" 7 ", "7"),
    ],
)
def test_parse_quantity(text: str, expected: str) -> None:
    assert parse_quantity(text) == Decimal(expected)


@pytest.mark.parametrize("text", ["", "m", "1.2.3", "1 k", "1K", "1e", "1e1.5", "0x10", "--1", "1mi", "abc", "1_000"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("500m", 500),
        ("1", 1000),
        ("150u", 1),  # sub-milli precision rounds up
        ("1001u", 2),
        ("1000001u", 1001),
        ("1n", 1),
        ("0", 0),
        ("-1500u", -2),  # magnitude rounded up, as Go's int64 path does
        ("2k", 2_000_000),
        (0.00015, 1),
        (72.5, 72500),
        (0.1, 100),
        (Decimal("1e-30"), 1),
        (-3, -3000),
    ],
)
def test_milli_value(value: str | float | Decimal, expected: int) -> None:
    assert milli_value(value) == expected


def _reference_format_milli(milli: int) -> str:
    """The reference formatter of ../shared/spec/k8s-metrics-api.md §1.7, valid for values with at most 3 decimals."""
    if milli == 0:
        return "0"
    sign = "-" if milli < 0 else ""
    m = abs(milli)
    if m % 1000:
        return f"{sign}{m}m"
    n = m // 1000
    for suffix in ("", "k", "M", "G", "T", "P"):
        if n % 1000:
            return f"{sign}{n}{suffix}"
        n //= 1000
    return f"{sign}{n}E"


def _check_canonical(text: str) -> None:
    assert CANONICAL.match(text), text
    mantissa, suffix = re.fullmatch(r"(-?[0-9]+)([a-zA-Z]?)", text).groups()  # type: ignore[union-attr]
    if text != "0" and suffix != "E":
        assert int(mantissa) % 1000 != 0, f"{text}: a larger suffix would be exact"


decimals_9 = st.decimals(
    min_value=Decimal("-1e15"), max_value=Decimal("1e15"), places=9, allow_nan=False, allow_infinity=False
)


@settings(max_examples=400, deadline=None)
@given(decimals_9)
def test_round_trip_decimals(x: Decimal) -> None:
    text = format_quantity(x)
    _check_canonical(text)
    assert parse_quantity(text) == x
    assert milli_value(text) == milli_value(x)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(10**21), max_value=10**21))
def test_matches_spec_reference_for_milli_values(milli: int) -> None:
    value = Decimal(f"{milli}E-3")
    assert format_quantity(value) == _reference_format_milli(milli)
    if milli >= 0:
        assert milli_value(value) == milli


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-1e17, max_value=1e17, allow_nan=False, allow_infinity=False))
def test_floats_keep_their_repr_up_to_nano(x: float) -> None:
    text = format_quantity(x)
    _check_canonical(text)
    with localcontext() as ctx:
        ctx.prec = 100
        exact = Decimal(repr(x))
        nano = exact.quantize(Decimal("1e-9"), rounding=ROUND_UP)
        assert parse_quantity(text) == nano
        milli = exact.scaleb(3).to_integral_value(rounding=ROUND_CEILING if x >= 0 else ROUND_UP)
    assert milli_value(x) == milli_value(text) == int(milli)
