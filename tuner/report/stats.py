"""How sure a "+x%" is: a t-interval on the ratio of best to baseline, from repeated runs.

The motivating manual study reported one run per config and no intervals; a gain smaller than the
run-to-run noise is not a gain. Ratios are compared on the log scale (Welch's t on log values), so
the interval is for the ratio of geometric means and stays positive. No scipy: the t quantile comes
from the regularised incomplete beta function.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Change:
    """Best vs baseline in % of the baseline, with a 95% interval when both arms have n >= 2.

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
        if self.pct is None:
            return self.note or "-"
        if self.low is None:
            return f"{self.pct:+.1f}% ({self.note})"
        return f"{self.pct:+.1f}% [{self.low:+.1f}, {self.high:+.1f}]"


def change(base: list[float], best: list[float], level: float = 0.95) -> Change:
    """% change of ``best`` over ``base``; the interval needs two or more runs of each."""
    nb, na = len(base), len(best)
    if not base or not best:
        return Change(statistics.fmean(base) if base else None,
                      statistics.fmean(best) if best else None, None, None, None, nb, na,
                      "not measured")
    if min(base + best) <= 0:
        mb, ma = statistics.fmean(base), statistics.fmean(best)
        pct = 100.0 * (ma - mb) / mb if mb else None
        return Change(mb, ma, pct, None, None, nb, na, "a value <= 0, no interval")
    lb, la = [math.log(v) for v in base], [math.log(v) for v in best]
    mlb, mla = statistics.fmean(lb), statistics.fmean(la)
    gb, ga, diff = math.exp(mlb), math.exp(mla), mla - mlb
    pct = 100.0 * math.expm1(diff)
    if nb < 2 or na < 2:
        return Change(gb, ga, pct, None, None, nb, na, f"n={min(nb, na)}, no interval")
    vb, va = statistics.variance(lb) / nb, statistics.variance(la) / na
    se = math.sqrt(vb + va)
    if se == 0:
        return Change(gb, ga, pct, pct, pct, nb, na)
    df = (vb + va) ** 2 / (vb ** 2 / (nb - 1) + va ** 2 / (na - 1))
    half = t_quantile(0.5 + level / 2, df) * se
    return Change(gb, ga, pct, 100.0 * math.expm1(diff - half), 100.0 * math.expm1(diff + half),
                  nb, na)


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
