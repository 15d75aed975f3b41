"""McNemar, Fisher and Benjamini-Hochberg against scipy; the paired bootstrap's pairing and coverage."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from posttrain.eval.stats import (
    benjamini_hochberg,
    fisher_exact,
    mcnemar_exact,
    paired_bootstrap_ci,
)


@pytest.mark.slow
def test_mcnemar_exact_agrees_with_scipy_binomtest():
    rng = np.random.default_rng(0)
    pairs = [(0, 0), (0, 5), (5, 5), (1, 9), (30, 12)] + [tuple(rng.integers(0, 60, 2)) for _ in range(300)]
    for b, c in pairs:
        ref = sps.binomtest(int(b), int(b + c), 0.5).pvalue if b + c else 1.0
        assert mcnemar_exact(int(b), int(c)) == pytest.approx(ref, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
@pytest.mark.slow
def test_fisher_exact_agrees_with_scipy(alternative):
    rng = np.random.default_rng(1)
    tables = [[[0, 0], [0, 0]], [[5, 0], [0, 5]], [[20, 0], [2, 18]], [[1, 1], [1, 1]], [[0, 10], [0, 3]]]
    tables += [rng.integers(0, 25, size=(2, 2)).tolist() for _ in range(400)]
    tables += [[[int(rng.integers(0, 200)), int(rng.integers(0, 200))], [int(rng.integers(0, 200)), 3]] for _ in range(50)]
    for t in tables:
        ref = sps.fisher_exact(t, alternative=alternative).pvalue
        assert fisher_exact(t, alternative) == pytest.approx(ref, rel=1e-7, abs=1e-14), t


def test_benjamini_hochberg_agrees_with_scipy():
    rng = np.random.default_rng(2)
    for m in [1, 2, 7, 164]:
        p = np.concatenate([rng.uniform(0, 1, m - m // 4), rng.uniform(0, 1e-3, m // 4)])
        np.testing.assert_allclose(benjamini_hochberg(p.tolist()), sps.false_discovery_control(p, method="bh"), rtol=1e-12)
    assert benjamini_hochberg([]) == []
    with pytest.raises(ValueError):
        benjamini_hochberg([0.5, 1.5])


def test_paired_bootstrap_uses_the_pairing():
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 1, 200)
    b = a + 0.01  # a tiny but perfectly consistent gain: only a paired interval sees it
    iv = paired_bootstrap_ci(a.tolist(), b.tolist())
    assert iv.mean == pytest.approx(0.01) and iv.lo > 0
    same = paired_bootstrap_ci(a.tolist(), a.tolist())
    assert same.lo == same.hi == 0.0
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1.0], [1.0, 2.0])


@pytest.mark.slow
def test_paired_bootstrap_covers_95_percent():
    rng = np.random.default_rng(4)
    reps, tasks, hits = 1500, 164, 0
    p = rng.beta(2, 3, size=(reps, tasks))
    a = rng.binomial(1, p).astype(float)
    b = rng.binomial(1, np.clip(p + 0.05, 0, 1)).astype(float)
    # the true difference is E[clip(p + 0.05)] - E[p] under Beta(2, 3), computed on a large draw
    big = np.random.default_rng(99).beta(2, 3, size=4_000_000)
    truth = float(np.mean(np.clip(big + 0.05, 0, 1)) - np.mean(big))
    for r in range(reps):
        iv = paired_bootstrap_ci(a[r].tolist(), b[r].tolist(), reps=500, seed=r)
        hits += iv.lo <= truth <= iv.hi
    # 1500 replications: the standard error of the coverage is 0.0056, so the band is +-2.7 of them
    assert 0.935 <= hits / reps <= 0.965, hits / reps
