"""How sure a number is: the one interval method behind every interval the tool prints.

Throughput and latency are positive and their launch-to-launch noise is multiplicative, so runs
are compared on the log scale: Student's t on the mean of the log values for one arm (an interval
for its geometric mean), Welch's t on the difference of the two arms' log means for a comparison
(an interval for the ratio of geometric means, which stays positive). Below ``MIN_RUNS`` runs on a
side no interval is given: with two runs the t quantile has one degree of freedom and the
interval says more about the quantile than about the engine. scipy is not a dependency of the
base package, so the t quantile comes from the regularised incomplete beta function.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_RUNS = 3
LEVEL = 0.95
NOT_POSITIVE = "a value <= 0, no interval"
METHOD = f"{LEVEL:.0%} interval from Welch's t on the log values (none below {MIN_RUNS} runs a side)"


@dataclass(frozen=True)
class Interval:
    """A geometric mean (one arm) or a ratio of geometric means (two arms), with its interval.

    ``low`` and ``high`` are None when there is no interval, and ``note`` says why. ``n`` is the
    number of runs per side: ``(n,)`` or ``(n, n_base)``.
    """

    value: float | None
    low: float | None
    high: float | None
    n: tuple[int, ...]
    note: str = ""


def log_t_interval(values: Sequence[float], base: Sequence[float] | None = None,
                   level: float = LEVEL) -> Interval:
    """The interval of ``values``' geometric mean, or with ``base`` of the ratio of ``values``'
    geometric mean to ``base``'s.

    A value <= 0 has no logarithm: the central value is then the arithmetic mean (or the ratio of
    arithmetic means) and there is no interval.
    """
    sides = [list(values)] if base is None else [list(values), list(base)]
    n = tuple(len(s) for s in sides)
    if not all(sides):
        return Interval(None, None, None, n, "not measured")
    if min(min(s) for s in sides) <= 0:
        means = [statistics.fmean(s) for s in sides]
        value = means[0] if base is None else (means[0] / means[1] if means[1] else None)
        return Interval(value, None, None, n, NOT_POSITIVE)
    logs = [[math.log(v) for v in s] for s in sides]
    center = statistics.fmean(logs[0]) - (statistics.fmean(logs[1]) if base is not None else 0.0)
    value = math.exp(center)
    if min(n) < MIN_RUNS:
        return Interval(value, None, None, n, f"n={min(n)}, no interval")
    var = [statistics.variance(lg) / len(lg) for lg in logs]  # squared standard error per side
    se = math.sqrt(sum(var))
    if se == 0:
        return Interval(value, value, value, n)
    # Welch-Satterthwaite degrees of freedom; n - 1 for one arm
    df = sum(var) ** 2 / sum(v ** 2 / (k - 1) for v, k in zip(var, n))
    half = t_quantile(0.5 + level / 2, df) * se
    return Interval(value, math.exp(center - half), math.exp(center + half), n)


@dataclass(frozen=True)
class Change:
    """Best vs baseline in % of the baseline, with the interval of ``log_t_interval``.

    ``base`` and ``best`` are the central values compared: geometric means (arithmetic when a
    value is <= 0), so the columns of a table agree with its % column.
    """

    base: float | None
    best: float | None
    pct: float | None
    low: float | None
    high: float | None
    n_base: int
    n_best: int
    note: str = ""

    def text(self) -> str:
        """For a table with an n column: the change and its interval, or why there is none."""
        if self.pct is None:
            return self.note or "-"
        if self.low is None:
            return f"{self.pct:+.1f}% ({self.note})"
        return f"{self.pct:+.1f}% [{self.low:+.1f}, {self.high:+.1f}]"

    @property
    def means(self) -> str:
        """What ``base`` and ``best`` are, for a label."""
        return "means" if self.note == NOT_POSITIVE else "geometric means"

    @property
    def significant(self) -> bool | None:
        """Whether the interval excludes no change; None without an interval."""
        if self.low is None or self.high is None:
            return None
        return self.low > 0 or self.high < 0

    def describe(self) -> str:
        """For a sentence: the change, its interval and the runs it rests on."""
        if self.pct is None:
            return self.note or "-"
        runs = f"n={self.n_best} vs n={self.n_base}"
        if self.low is None:
            why = "no interval" if min(self.n_best, self.n_base) < MIN_RUNS else self.note
            return f"{self.pct:+.1f}% ({runs}, {why})"
        verdict = "significant" if self.significant else "no significant change"
        return (f"{self.pct:+.1f}%, {LEVEL:.0%} CI [{self.low:+.1f}%, {self.high:+.1f}%] "
                f"({runs}): {verdict}")


def change(base: Sequence[float], best: Sequence[float], level: float = LEVEL) -> Change:
    """% change of ``best`` over ``base``, with ``log_t_interval``'s interval of the ratio."""
    ratio = log_t_interval(best, base, level)
    pct = [None if r is None else 100.0 * (r - 1.0) for r in (ratio.value, ratio.low, ratio.high)]
    logs = bool(base) and bool(best) and min(*base, *best) > 0
    return Change(_center(base, logs), _center(best, logs), *pct, len(base), len(best), ratio.note)


def _center(values: Sequence[float], geometric: bool) -> float | None:
    """The central value ``log_t_interval`` compares: geometric mean, or arithmetic where a value
    of either arm is <= 0."""
    if not values:
        return None
    return statistics.geometric_mean(values) if geometric else statistics.fmean(values)


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile for 0.5 < p < 1, by bisection on the CDF."""
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def _t_cdf(t: float, df: float) -> float:
    return 1.0 - 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) (continued fraction, modified Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast only below this point
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f / a
