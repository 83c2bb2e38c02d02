"""Taurus' think times, read as Taurus and the JMeter it drives read them (pure). Durations, which a think time is
made of, are Taurus' grammar in ``clikit.durations`` (``parse_taurus_duration``).

Think time (``bzt/utils.py`` ``parse_think_time``; docs: site/dat/docs/JMeter.md, "Global Settings") is a duration
or ``uniform(MEAN, DEV)``, ``gaussian(MEAN, DEV)`` or ``poisson(MEAN, DEV)``. Taurus writes them as JMeter timers
in whole milliseconds (``ProtocolHandler.safe_time`` in ``bzt/jmx/tools.py``), each timer's parameters as
``_get_timer`` there sets them, and JMeter's timers draw their delays so:

* constant: the delay (``ConstantTimer``);
* ``uniform(m, d)``: ``UniformRandomTimer`` with offset ``m - d`` and range ``2d``: uniform in ``[m - d, m + d]``;
* ``gaussian(m, d)``: ``GaussianRandomTimer`` with offset ``m`` and range ``d``: ``|N(0, 1) * d + m|``;
* ``poisson(m, d)``: ``PoissonRandomTimer`` with offset ``d`` and lambda ``m - d`` (in ms): ``|Poisson(m - d) + d|``
  (JMeter's ``randomPoisson``: Knuth's product method up to lambda 30, above it the rejection method of Atkinson
  that its comment credits to John D. Cook).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

from clikit.durations import DurationError, parse_taurus_duration

__all__ = ["TaurusValueError", "ThinkTime", "parse_think_time"]

_DISTRIBUTION = re.compile(r"^(uniform|gaussian|poisson)\(([\w.]+)[,\s]+([\w.]+)\)$", re.IGNORECASE)


class TaurusValueError(ValueError):
    """A value Taurus' grammar refuses; the message says what was expected (the caller names the key)."""


def _whole_ms(seconds: float) -> float:
    """What ``safe_time`` hands JMeter: whole milliseconds (truncated), back in seconds."""
    return int(seconds * 1000) / 1000.0


@dataclass(frozen=True)
class ThinkTime:
    """A think time as a JMeter timer draws it; ``kind`` is ``constant``, ``uniform``, ``gaussian`` or ``poisson``;
    ``mean_s``/``dev_s`` are the two arguments (``dev_s`` 0 for a constant)."""

    kind: str
    mean_s: float
    dev_s: float = 0.0

    def text(self) -> str:
        if self.kind == "constant":
            return f"{self.mean_s:g}s"
        return f"{self.kind}({self.mean_s:g}s, {self.dev_s:g}s)"

    def sample(self, rng: random.Random) -> float:
        """One delay in seconds, whole milliseconds as JMeter's timers return them."""
        if self.kind == "constant":
            return self.mean_s
        if self.kind == "uniform":
            offset, spread = self.mean_s - self.dev_s, 2 * self.dev_s
            return _whole_ms(offset + rng.random() * spread)
        if self.kind == "gaussian":
            return _whole_ms(abs(rng.gauss(0.0, 1.0) * self.dev_s + self.mean_s))
        lam_ms = round((self.mean_s - self.dev_s) * 1000)
        return abs(_poisson(lam_ms, rng) + round(self.dev_s * 1000)) / 1000.0


def parse_think_time(value: object) -> ThinkTime:
    """A think time: a duration, or ``uniform|gaussian|poisson(MEAN, DEV)`` (any case) with durations inside."""
    match = _DISTRIBUTION.match(str(value)) if isinstance(value, str) else None
    if match is None:
        try:
            return ThinkTime("constant", _whole_ms(parse_taurus_duration(value)))
        except DurationError as exc:
            raise TaurusValueError(f"{exc}; or uniform(MEAN, DEV), gaussian(MEAN, DEV), poisson(MEAN, DEV)") from None
    kind = match.group(1).lower()
    try:
        mean, dev = (_whole_ms(parse_taurus_duration(match.group(i))) for i in (2, 3))
    except DurationError as exc:
        raise TaurusValueError(f"{value!r}: {exc}") from None
    if kind in ("uniform", "poisson") and dev > mean:
        raise TaurusValueError(f"{value!r}: {kind}'s second argument cannot exceed its mean (the delay would go "
                               "below 0)")
    return ThinkTime(kind, mean, dev)


def _poisson(lam: int, rng: random.Random) -> int:
    """A Poisson variate as JMeter's ``PoissonRandomTimer.randomPoisson`` draws one (lambda in ms)."""
    if lam <= 30:
        limit, k, p = math.exp(-lam), 0, 1.0
        while True:
            k += 1
            p *= rng.random()
            if p <= limit:
                return k - 1
    c = 0.767 - 3.36 / lam
    beta = math.pi / math.sqrt(3.0 * lam)
    alpha = beta * lam
    k_const = math.log(c) - lam - math.log(beta)
    while True:
        u = rng.random()
        if u <= 0.0:
            continue
        x = (alpha - math.log((1.0 - u) / u)) / beta
        n = math.floor(x + 0.5)
        if n < 0:
            continue
        v = rng.random()
        if v <= 0.0:
            continue
        y = alpha - beta * x
        lhs = y + math.log(v / (1.0 + math.exp(y)) ** 2)
        rhs = k_const + n * math.log(lam) - math.lgamma(n + 1)
        if lhs <= rhs:
            return n
