"""Kubernetes ``resource.Quantity`` strings: the canonical DecimalSI form Go emits, and the parse the HPA does.

Everything works on exact integers (mantissa, base-10 exponent); ``Decimal`` arithmetic is avoided because its
context would round to 28 significant digits.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["format_quantity", "milli_value", "parse_quantity"]

# Base-10 exponent -> DecimalSI suffix.
_SUFFIX_BY_EXPONENT = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_EXPONENT_BY_SUFFIX = {suffix: exp for exp, suffix in _SUFFIX_BY_EXPONENT.items()}
_BINARY_SHIFT = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_NANO = -9

# <sign><number><suffix>, number one of "1", "1.5", "1.", ".5"; an exponent suffix wins over the "E" (exa) suffix.
_QUANTITY = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE]))?"
)


def _increment(digits: str) -> str:
    """``digits`` + 1 on the decimal string, so huge mantissas never go through ``int``/``str`` conversions."""
    head = digits.rstrip("9")
    carried = len(digits) - len(head)
    if not head:
        return "1" + "0" * carried
    return head[:-1] + str(int(head[-1]) + 1) + "0" * carried


def _decompose(value: float | int | Decimal) -> tuple[bool, str, int]:
    """``(negative, digits, exponent)`` with no trailing zeros in ``digits`` ("" means zero)."""
    if isinstance(value, float):
        dec = Decimal(repr(value))  # the shortest repr, so 0.1 stays 0.1 instead of 0.1000000000000000055...
    elif isinstance(value, Decimal):
        dec = value
    else:
        dec = Decimal(value)
    if not dec.is_finite():
        raise ValueError(f"a Quantity must be finite, got {value!r}")
    sign, digit_tuple, exponent = dec.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    stripped = digits.rstrip("0")
    return bool(sign), stripped, exponent + len(digits) - len(stripped)


def _round_to_nano(digits: str, exponent: int) -> tuple[str, int]:
    """Round the magnitude up to a multiple of 1n, as ``ParseQuantity`` does (away from zero for negatives)."""
    if not digits or exponent >= _NANO:
        return digits, exponent
    drop = _NANO - exponent  # all dropped digits together are non-zero: trailing zeros were stripped
    kept = digits[:-drop] if drop < len(digits) else ""
    rounded = _increment(kept) if kept else "1"
    stripped = rounded.rstrip("0")
    return stripped, _NANO + len(rounded) - len(stripped)


def format_quantity(value: float | int | Decimal) -> str:
    """The canonical DecimalSI string Go's ``Quantity.MarshalJSON`` emits, e.g. ``0.5 -> "500m"``.

    Floats keep the value of their shortest ``repr``; anything finer than 1n is rounded up to the next nano.
    Beyond ``E`` (10^18) Go has no suffix; like current apimachinery we fall back to an exponent (``"1e21"``).
    NaN and infinities raise ``ValueError``.
    """
    negative, digits, exponent = _decompose(value)
    digits, exponent = _round_to_nano(digits, exponent)
    if not digits:
        return "0"
    lower = exponent % 3  # lower the exponent to a multiple of 3 by growing the mantissa
    digits, exponent = digits + "0" * lower, exponent - lower
    suffix = _SUFFIX_BY_EXPONENT.get(exponent, f"e{exponent}")
    return f"{'-' if negative else ''}{digits}{suffix}"


def parse_quantity(text: str) -> Decimal:
    """The exact value of a Quantity string (canonical, plain decimal, exponent or binary suffix).

    Like Go's ``ParseQuantity`` the magnitude is rounded up to a whole number of nano units.
    Raises ``ValueError`` for anything that is not a Quantity.
    """
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"invalid Quantity {text!r}")
    sign, number, exp_text, binary, decimal_suffix = match.groups()
    whole, _, fraction = number.partition(".")
    mantissa = int(whole + fraction or "0")
    exponent = -len(fraction)
    if exp_text is not None:
        exponent += int(exp_text)
    elif decimal_suffix is not None:
        exponent += _EXPONENT_BY_SUFFIX[decimal_suffix]
    elif binary is not None:
        mantissa <<= _BINARY_SHIFT[binary]
    _, digits, exponent = _decompose(Decimal(f"{mantissa}E{exponent}"))
    digits, exponent = _round_to_nano(digits, exponent)
    if not digits:
        return Decimal(0)
    return Decimal(f"{'-' if sign == '-' else ''}{digits}E{exponent}")


def milli_value(value: str | float | int | Decimal) -> int:
    """What the HPA sees: ``Quantity.MilliValue()``, i.e. value x 1000 rounded up to an integer.

    Strings are parsed as Quantities, numbers are taken as ``format_quantity`` would serialise them.
    Go rounds the magnitude up, so negative values round away from zero (``-1.5m -> -2``).
    """
    if isinstance(value, str):
        negative, digits, exponent = _decompose(parse_quantity(value))
    else:
        negative, digits, exponent = _decompose(value)
    if not digits:
        return 0
    exponent += 3
    if exponent >= 0:
        magnitude = int(digits) * 10**exponent
    elif -exponent >= len(digits):
        magnitude = 1  # a non-zero value below one milli-unit
    else:
        magnitude = int(digits[:exponent]) + 1  # the dropped digits are non-zero: no trailing zeros
    return -magnitude if negative else magnitude
