"""Significance tests for paired comparisons of two evaluations, as pure functions (no scipy).

Covers: McNemar's exact test (a two-sided binomial test on the discordant
pairs), Fisher's exact test on a 2x2 table (two-sided as scipy defines it,
or one-sided), Benjamini-Hochberg adjusted p-values, and the paired
bootstrap interval of a difference of means over tasks.
Does not cover: reading results or deciding what counts as a regression
(see `compare.py`).

All tail sums work in log space (`math.lgamma`), so tables with thousands of
samples neither overflow nor lose the small p-values that matter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from posttrain.eval.metrics import Interval, bootstrap_indices

Alternative = Literal["two-sided", "less", "greater"]
_REL = 1 + 1e-7  # ties in probability within this factor count as "as extreme" (scipy's rule)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _sum_exp(logs: Sequence[float]) -> float:
    if not logs:
        return 0.0
    top = max(logs)
    return math.exp(top) * math.fsum(math.exp(v - top) for v in logs)


def binom_test_half(k: int, n: int) -> float:
    """Two-sided exact binomial test of k successes in n trials against p = 1/2."""
    if n == 0:
        return 1.0
    low = min(k, n - k)
    if 2 * low == n:
        return 1.0
    tail = _sum_exp([_log_comb(n, i) - n * math.log(2) for i in range(low + 1)])
    return min(1.0, 2 * tail)


def mcnemar_exact(b: int, c: int) -> float:
    """McNemar's exact p-value from the discordant counts: b = only A passed, c = only B passed."""
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar_exact needs non-negative counts (got {b}, {c})")
    return binom_test_half(b, b + c)


def fisher_exact(table: Sequence[Sequence[int]], alternative: Alternative = "two-sided") -> float:
    """Fisher's exact p-value for [[a, b], [c, d]].

    "less": the odds ratio is below 1 (row 1 has fewer column-1 counts than
    independence predicts); "greater": above 1; "two-sided": the sum over
    tables no more probable than the observed one.
    """
    (a, b), (c, d) = table
    if min(a, b, c, d) < 0:
        raise ValueError(f"fisher_exact needs non-negative counts, got {table}")
    row1, col1, total = a + b, a + c, a + b + c + d
    lo, hi = max(0, row1 + col1 - total), min(row1, col1)
    if total == 0 or row1 in (0, total) or col1 in (0, total):
        return 1.0
    denom = _log_comb(total, row1)

    def logpmf(x: int) -> float:
        return _log_comb(col1, x) + _log_comb(total - col1, row1 - x) - denom

    if alternative == "less":
        return min(1.0, _sum_exp([logpmf(x) for x in range(lo, a + 1)]))
    if alternative == "greater":
        return min(1.0, _sum_exp([logpmf(x) for x in range(a, hi + 1)]))
    if alternative != "two-sided":
        raise ValueError(f"fisher_exact: unknown alternative {alternative!r}")
    observed = logpmf(a) + math.log(_REL)
    return min(1.0, _sum_exp([lp for lp in (logpmf(x) for x in range(lo, hi + 1)) if lp <= observed]))


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in input order; reject where q <= the FDR level."""
    m = len(pvalues)
    if m == 0:
        return []
    p = np.asarray(pvalues, dtype=float)
    if np.any((p < 0) | (p > 1) | np.isnan(p)):
        raise ValueError("benjamini_hochberg: p-values must lie in [0, 1]")
    order = np.argsort(p)
    scaled = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out.tolist()


def paired_bootstrap_ci(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95, reps: int = 2000, seed: int = 0
) -> Interval:
    """Mean of b - a over paired tasks, with a percentile interval from resampling tasks (pairs kept)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired_bootstrap_ci: {len(x)} vs {len(y)} items")
    d = y - x
    d = d[~np.isnan(d)]
    if len(d) == 0:
        return Interval(math.nan, math.nan, math.nan, math.nan, 0)
    means = d[bootstrap_indices(len(d), reps, seed)].mean(axis=1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return Interval(float(d.mean()), float(lo), float(hi), float(means.std(ddof=1)), len(d))
