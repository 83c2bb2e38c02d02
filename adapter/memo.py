"""Remembered answers for short request texts (paths, selectors): HPAs send the same few over and over.

Only texts up to ``SHORT`` characters are remembered; longer ones are worked out each time, so that a client sending
long texts cannot make the remembered answers hold megabytes. Errors are raised again each time, never kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

SHORT = 1024
"""Characters: a namespace, a resource, a 253-character object name and a metric fit, and any selector an HPA sends."""

P = ParamSpec("P")
T = TypeVar("T")


def remember_short(
        maxsize: int = 1024) -> Callable[[Callable[Concatenate[str, P], T]], Callable[Concatenate[str, P], T]]:
    """Like ``functools.lru_cache(maxsize)`` for a function whose first argument is a request text, but only for
    texts of at most ``SHORT`` characters. The wrapper keeps ``cache_info`` and ``cache_clear``."""

    def wrap(function: Callable[Concatenate[str, P], T]) -> Callable[Concatenate[str, P], T]:
        remembered = functools.lru_cache(maxsize)(function)

        @functools.wraps(function)
        def call(text: str, *args: P.args, **kwargs: P.kwargs) -> T:
            if len(text) <= SHORT:
                return remembered(text, *args, **kwargs)
            return function(text, *args, **kwargs)

        call.cache_info = remembered.cache_info  # type: ignore[attr-defined]
        call.cache_clear = remembered.cache_clear  # type: ignore[attr-defined]
        return call

    return wrap
