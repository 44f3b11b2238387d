"""Interval statistics of the claim tables, in plain numpy (scipy is not a dependency).

- `wilson`: a binomial proportion's score interval; `newcombe`: the difference of two independent proportions.
- `clopper_pearson`, `binom_test`: exact binomial interval and two-sided p-value.
- `mcnemar`: paired incidence (discordant pairs b, c of n): the difference (b - c) / n with an exact interval
  conditional on the b + c discordant pairs, and the exact McNemar p-value.
- `bootstrap_mean_ci`, `bootstrap_stat_ci`, `bootstrap_two_groups`: percentile bootstrap over units (of one group
  or of two independent groups), with the caller's seeded generator.
- `slope`, `pearson`: the statistics bootstrapped for dose-response and correlation (vectorised over resamples).
- `t_quantile`, `t_mean_ci`: Student's t interval of a mean (a cell's few seeds: a percentile bootstrap of 3 values
  is far too narrow); `resample_within`: bootstrap resamples of values within their strata (a cell's seeds, the
  design kept).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
LEVEL = 0.95


def _z(level: float) -> float:
    # the claim tables use 95%; other levels by the inverse error function's Newton solve
    if abs(level - 0.95) < 1e-12:
        return Z95
    target, z = (1 + level) / 2, 1.0
    for _ in range(50):
        cdf = 0.5 * (1 + math.erf(z / math.sqrt(2)))
        z -= (cdf - target) / (math.exp(-z * z / 2) / math.sqrt(2 * math.pi))
    return z


def wilson(k: float, n: float, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n (NaN, NaN when n is 0); k may be fractional (a rate x n)."""
    if not n > 0:
        return math.nan, math.nan
    z, p = _z(level), k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(max(p * (1 - p) / n + z * z / (4 * n * n), 0.0))
    return max(centre - half, 0.0), min(centre + half, 1.0)


def newcombe(k1: float, n1: float, k2: float, n2: float, level: float = LEVEL) -> tuple[float, float, float]:
    """p1 - p2 of two independent proportions with Newcombe's hybrid score interval (from the Wilson ones)."""
    if not (n1 > 0 and n2 > 0):
        return math.nan, math.nan, math.nan
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1, level)
    l2, u2 = wilson(k2, n2, level)
    d = p1 - p2
    return d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0:
        return 1.0
    if p >= 1:
        return 0.0
    i = np.arange(k + 1)
    logs = (
        np.array([math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in i])
        + i * math.log(p)
        + (n - i) * math.log1p(-p)
    )
    return float(min(np.exp(logs).sum(), 1.0))


def _solve(f: Callable[[float], float], target: float) -> float:
    """p in [0, 1] where the decreasing f(p) crosses target (bisection: 60 halvings, far below display)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a binomial proportion k/n."""
    if n <= 0:
        return math.nan, math.nan
    a = (1 - level) / 2
    # P(X >= k | lo) = a and P(X <= k | hi) = a; both CDFs fall as p grows
    lo = 0.0 if k == 0 else _solve(lambda p: _binom_cdf(k - 1, n, p), 1 - a)
    hi = 1.0 if k == n else _solve(lambda p: _binom_cdf(k, n, p), a)
    return lo, hi


def binom_test(k: int, n: int, p: float = 0.5) -> float:
    """Exact two-sided binomial p-value: the probability of outcomes no more likely than k."""
    if n <= 0:
        return 1.0
    j = np.arange(n + 1)
    logs = (
        np.array([math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1) for x in j])
        + j * math.log(p)
        + (n - j) * math.log1p(-p)
    )
    pmf = np.exp(logs)
    return float(min(pmf[pmf <= pmf[k] * (1 + 1e-7)].sum(), 1.0))


def mcnemar(b: int, c: int, n: int, level: float = LEVEL) -> dict[str, float]:
    """Paired incidence difference: b pairs with the event in the first member only, c in the second only, n pairs.

    diff = (b - c) / n. Its interval is exact conditional on the m = b + c discordant pairs: b ~ Binomial(m, q)
    with q's Clopper-Pearson interval mapped through diff = (2q - 1) m / n. p: the exact McNemar test (q = 1/2).
    """
    m = b + c
    if n <= 0:
        return {"diff": math.nan, "lo": math.nan, "hi": math.nan, "p": math.nan}
    if m == 0:
        return {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p": 1.0}
    ql, qu = clopper_pearson(b, m, level)
    return {"diff": (b - c) / n, "lo": (2 * ql - 1) * m / n, "hi": (2 * qu - 1) * m / n, "p": binom_test(b, m)}


def _percentile(draws: np.ndarray, level: float) -> tuple[float, float]:
    draws = np.asarray(draws, dtype=float)
    draws = draws[~np.isnan(draws)]
    if not len(draws):
        return math.nan, math.nan
    a = (1 - level) / 2
    return float(np.quantile(draws, a)), float(np.quantile(draws, 1 - a))


def bootstrap_stat_ci(
    stat: Callable[[np.ndarray], np.ndarray], n_units: int, rng: np.random.Generator, n_boot: int, level: float = LEVEL
) -> tuple[float, float]:
    """Percentile interval of a statistic over `n_boot` resamples of `n_units` units (NaN with fewer than 2).

    `stat` takes an (n_boot, n_units) matrix of unit indices, one resample a row, and returns one value a row
    (vectorised: one numpy pass, not n_boot Python calls).
    """
    if n_units < 2:
        return math.nan, math.nan
    return _percentile(stat(rng.integers(0, n_units, (n_boot, n_units))), level)


def bootstrap_two_groups(
    stat: Callable[[np.ndarray, np.ndarray], np.ndarray],
    n1: int,
    n2: int,
    rng: np.random.Generator,
    n_boot: int,
    level: float = LEVEL,
) -> tuple[float, float]:
    """As `bootstrap_stat_ci` for two independent groups (e.g. Isolated and Shared runs), each resampled on its
    own: stat(indices1, indices2) with one resample a row; NaN with fewer than 2 units in either."""
    if n1 < 2 or n2 < 2:
        return math.nan, math.nan
    return _percentile(stat(rng.integers(0, n1, (n_boot, n1)), rng.integers(0, n2, (n_boot, n2))), level)


def bootstrap_mean_ci(
    values: np.ndarray, rng: np.random.Generator, n_boot: int, level: float = LEVEL
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (NaN, NaN with fewer than 2 values)."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    if len(values) < 2:
        return math.nan, math.nan
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def slope(x: np.ndarray, y: np.ndarray) -> np.ndarray | float:
    """Least-squares slope of y on x along the last axis (NaN where x does not vary)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    xc = x - x.mean(axis=-1, keepdims=True)
    sxx = (xc * xc).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(sxx > 1e-12, (xc * (y - y.mean(axis=-1, keepdims=True))).sum(axis=-1) / sxx, np.nan)
    return float(out) if out.ndim == 0 else out


def pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray | float:
    """Pearson correlation along the last axis (NaN where either does not vary, or fewer than 3 points)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    xc, yc = x - x.mean(axis=-1, keepdims=True), y - y.mean(axis=-1, keepdims=True)
    sxx, syy = (xc * xc).sum(axis=-1), (yc * yc).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(
            (sxx > 1e-12) & (syy > 1e-12) & (x.shape[-1] >= 3), (xc * yc).sum(axis=-1) / np.sqrt(sxx * syy), np.nan
        )
    return float(out) if out.ndim == 0 else out


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) (Lentz's continued fraction, Numerical Recipes 6.4)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast below this point: use the symmetry
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return front * (f - 1.0)


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (bisection on its CDF)."""
    if not 0 < p < 1 or not df > 0:
        raise ValueError(f"t_quantile: p must be in (0, 1) and df > 0, not p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1 - p, df)

    def cdf(t: float) -> float:
        return 1.0 - 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def t_mean_ci(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Student's t interval of the mean of `values` (NaN, NaN with fewer than 2; NaNs dropped)."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    n = len(values)
    if n < 2:
        return math.nan, math.nan
    half = t_quantile((1 + level) / 2, n - 1) * float(values.std(ddof=1)) / math.sqrt(n)
    mean = float(values.mean())
    return mean - half, mean + half


def resample_within(values: np.ndarray, strata: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """(n_boot, n) resamples of `values`, one a row: position j draws, with replacement, a value of j's stratum.

    Each stratum keeps its size and its positions, so a design over the positions (a cell's factor levels) holds
    for every resample: only the values within a stratum (a cell's seeds) are resampled. A drawn value's deviation
    from its stratum's mean is scaled by sqrt(m / (m - 1)) (m values in the stratum): a plain resample spreads as
    the sample's biased variance (short by (m - 1) / m, a third at 3 seeds), this one as its unbiased one.
    """
    values, strata = np.asarray(values, dtype=float), np.asarray(strata)
    out = np.empty((n_boot, len(values)))
    for s in np.unique(strata):
        rows = np.flatnonzero(strata == s)
        m = len(rows)
        mean = values[rows].mean()
        drawn = values[rows[rng.integers(0, m, (n_boot, m))]]
        out[:, rows] = mean + (drawn - mean) * (np.sqrt(m / (m - 1)) if m > 1 else 1.0)
    return out
