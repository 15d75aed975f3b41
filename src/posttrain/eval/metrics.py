"""Evaluation metrics as pure functions: pass@k, pass^k, intervals over tasks, percentiles, cost.

Covers: the unbiased pass@k estimator of Chen et al. (2021),
1 - C(n-c, k) / C(n, k), computed as a stable running product (NaN when
n < k); pass^k, the chance that k draws all succeed, C(c, k) / C(n, k);
the Wilson interval of a proportion; means over tasks with a confidence interval that treats each task as a
cluster of its samples (a t interval on the task-level estimates, or a
percentile bootstrap over tasks); a paired difference between two training arms pooled over seeds and
domains, with its bootstrap interval (`pooled_paired_diff`); Student-t quantiles without scipy;
percentiles for latency. `Price` and `price_for` are re-exported from
`posttrain.pricing`, where the one price record lives.
Does not cover: significance tests between two results (see `stats.py`) or
assembling a summary from records (see `summary.py`).

Why intervals over tasks: samples of one task are correlated (an easy task
passes every time), so a binomial interval over all samples is too narrow.
The task-level estimates are independent draws from the task population;
their spread gives the clustered standard error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

from posttrain.pricing import Price as Price  # re-exported: callers import it from here too
from posttrain.pricing import price_for as price_for
from posttrain.rewards.hygiene import linear_percentile

if TYPE_CHECKING:
    import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with `c` successes among `n` samples; NaN when n < k.

    >>> round(pass_at_k(10, 3, 2), 4)
    0.5333
    """
    if n < 0 or c < 0 or k < 1:
        raise ValueError(f"pass_at_k needs n >= 0, c >= 0, k >= 1 (got n={n}, c={c}, k={k})")
    if c > n:
        raise ValueError(f"pass_at_k: {c} successes out of {n} samples")
    if n < k:
        return math.nan
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k/i): no factorials, no overflow, exact at c = 0.
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all of k draws without replacement succeed): C(c, k) / C(n, k); NaN when n < k."""
    if n < 0 or c < 0 or k < 1 or c > n:
        raise ValueError(f"pass_hat_k needs 0 <= c <= n and k >= 1 (got n={n}, c={c}, k={k})")
    if n < k:
        return math.nan
    prod = 1.0
    for i in range(k):
        prod *= (c - i) / (n - i)
        if prod <= 0.0:
            return 0.0
    return prod


def pass_at_k_table(n: int, k: int) -> "np.ndarray":
    """pass@k for every c in 0..n (shape [n+1]): a lookup table for simulations over many tasks."""
    import numpy as np

    return np.array([pass_at_k(n, c, k) for c in range(n + 1)])


def t_cdf(x: float, df: int) -> float:
    """Student's t distribution function for integer df (the closed forms of Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(abs(x) / math.sqrt(df))
    cos2, sin = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for i in range(1, (df - 1) // 2):
            term *= cos2 * (2 * i) / (2 * i + 1)
            total += term
        inside = 2 / math.pi * (theta + sin * math.cos(theta) * total)
    else:  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        term, total = 1.0, 1.0
        for i in range(1, df // 2):
            term *= cos2 * (2 * i - 1) / (2 * i)
            total += term
        inside = sin * total
    return 0.5 + math.copysign(0.5 * inside, x)


def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t with integer df: a Cornish-Fisher start refined by Newton steps on `t_cdf`."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be in (0, 1), got {p}")
    if df < 1 or int(df) != df:
        raise ValueError(f"t_quantile: df must be a positive integer, got {df}")
    df = int(df)
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    t = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    if df > 2000:  # the expansion is already exact to ~1e-10 and the series below would be long
        return t
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(30):
        pdf = math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))
        step = (t_cdf(t, df) - p) / pdf
        t -= step
        if abs(step) < 1e-12 * max(1.0, abs(t)):
            break
    return t


@dataclass(frozen=True)
class Interval:
    """A mean over tasks with its standard error and a two-sided confidence interval."""

    mean: float
    lo: float
    hi: float
    se: float
    n: int  # tasks that entered the mean (NaN estimates are left out)

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "se": self.se, "n": self.n}


def _finite_floats(values: Sequence[float]) -> list[float]:
    """The values that are numbers (None and NaN left out); a numpy array works too (pass `.tolist()` for speed)."""
    out = []
    for v in values:
        if v is not None:
            f = float(v)
            if not math.isnan(f):
                out.append(f)
    return out


def task_mean_ci(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean of per-task estimates with a skewness-corrected t interval (the clustered standard error).

    Each task is one cluster: its estimate (pass@k, mean score) already
    averages its samples, so the interval accounts for within-task
    correlation. Per-task pass@k piles up at 0 and 1, so the interval's ends
    are moved by the one-term Edgeworth correction for the sample skewness
    (Hall 1992); a plain t interval covers ~94% at 164 tasks and k = 5, this
    one ~95% (tests/eval/test_metrics.py). NaN entries (tasks with fewer than
    k samples) are skipped.
    """
    arr = _finite_floats(values)
    m = len(arr)
    if m == 0:
        return Interval(math.nan, math.nan, math.nan, math.nan, 0)
    mean = math.fsum(arr) / m
    if m == 1:
        return Interval(mean, math.nan, math.nan, math.nan, 1)
    dev = [x - mean for x in arr]
    ss = math.fsum(d * d for d in dev)
    sd = math.sqrt(ss / (m - 1))
    se = sd / math.sqrt(m)
    t = t_quantile(0.5 + confidence / 2, m - 1)
    pop_sd = math.sqrt(ss / m)
    skew = math.fsum(d * d * d for d in dev) / m / pop_sd**3 if pop_sd > 0 else 0.0
    shift = skew * (2 * t * t + 1) / (6 * math.sqrt(m))
    return Interval(mean, mean - se * (t - shift), mean + se * (t + shift), se, m)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """The Wilson score interval of a binomial proportion (one sample per task: greedy pass rates), which stays
    inside [0, 1] and is not empty at 0 or n successes, unlike the normal interval.

    >>> i = wilson_interval(30, 100)
    >>> round(i.lo, 4), round(i.hi, 4)
    (0.2189, 0.3958)
    """
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n and n > 0, got {successes} of {n}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return Interval(p, max(0.0, mid - half), min(1.0, mid + half), math.sqrt(p * (1 - p) / n), n)


def bootstrap_indices(n_items: int, reps: int, seed: int) -> "np.ndarray":
    """[reps, n_items] indices drawn with replacement (seeded): shared by paired resamples."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, n_items, size=(reps, n_items))


def pooled_paired_diff(per_seed: Sequence[Sequence[Sequence[float]]], reps: int = 2000, seed: int = 0,
                       confidence: float = 0.95) -> tuple[float, float, float]:
    """(point, low, high) of a difference between two arms, paired by task: `per_seed[i][j]` holds, for seed i and
    group j (a domain), each task's difference (arm A's gain on it minus arm B's). Tasks are resampled within
    each seed and group; a seed's figure is the mean over its groups, the pooled one the mean over seeds."""
    import numpy as np

    points, draws = [], []
    for i, groups in enumerate(per_seed):
        g_points, g_draws = [], []
        for j, diffs in enumerate(groups):
            d = np.asarray(diffs, dtype=float)
            g_points.append(d.mean())
            g_draws.append(d[bootstrap_indices(len(d), reps, seed + 1000 * i + j)].mean(axis=1))
        points.append(np.mean(g_points))
        draws.append(np.mean(g_draws, axis=0))
    pooled = np.mean(draws, axis=0)
    lo, hi = np.quantile(pooled, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(np.mean(points)), float(lo), float(hi)


def bootstrap_ci(values: Sequence[float], confidence: float = 0.95, reps: int = 2000, seed: int = 0) -> Interval:
    """Mean of per-task estimates with a percentile-bootstrap interval, resampling whole tasks."""
    import numpy as np  # only resampling needs it: a plain summary stays numpy-free (CLI start-up)

    arr = np.asarray(_finite_floats(values), dtype=float)
    m = len(arr)
    if m == 0:
        return Interval(math.nan, math.nan, math.nan, math.nan, 0)
    means = arr[bootstrap_indices(m, reps, seed)].mean(axis=1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return Interval(float(arr.mean()), float(lo), float(hi), float(means.std(ddof=1)), m)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100, linear interpolation) of the finite values; NaN when there are none."""
    arr = sorted(_finite_floats(values))
    return linear_percentile(arr, q / 100) if arr else math.nan


def safe_ratio(num: float, den: float) -> float:
    """num / den, NaN when den is 0 (a free model has no 'solved per dollar')."""
    return num / den if den else math.nan

