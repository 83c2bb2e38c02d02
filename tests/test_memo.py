"""adapter/memo.py: short request texts are remembered, long ones and errors never are."""

from __future__ import annotations

import pytest

from adapter.memo import SHORT, remember_short

pytestmark = pytest.mark.unit


def test_short_texts_are_remembered_long_ones_and_errors_are_not() -> None:
    calls: list[str] = []

    @remember_short(maxsize=8)
    def parse(text: str, what: str) -> str:
        calls.append(text)
        if text == "bad":
            raise ValueError(f"invalid {what}")
        return text.upper()

    long = "x" * (SHORT + 1)
    for _ in range(3):
        assert parse("app=a", "labelSelector") == "APP=A"
        assert parse(long, "labelSelector") == long.upper()
        with pytest.raises(ValueError, match="invalid labelSelector"):
            parse("bad", "labelSelector")
    assert calls.count("app=a") == 1  # remembered
    assert calls.count(long) == 3 and calls.count("bad") == 3  # worked out each time
    assert parse.cache_info().currsize == 1  # type: ignore[attr-defined]
    assert parse("x" * SHORT, "labelSelector") and parse.cache_info().currsize == 2  # type: ignore[attr-defined]
