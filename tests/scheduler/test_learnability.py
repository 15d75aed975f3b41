"""The posterior and p(1-p) weights against hand-computed values."""

import pytest

from posttrain.scheduler.learnability import (
    beta_posterior,
    expected_learnability,
    informative_chance,
    task_weight,
)


def test_beta_posterior_counts_passes_and_failures_on_a_uniform_prior():
    post = beta_posterior(3, 10)
    assert (post.alpha, post.beta) == (4.0, 8.0)
    assert post.mean == pytest.approx(4 / 12)


@pytest.mark.parametrize("passes, attempts, expected", [
    (0, 0, 1 / 6),  # Beta(1,1): 1*1/(2*3)
    (8, 16, 81 / 342),  # Beta(9,9): 81/(18*19) = 0.2368
    (0, 16, 17 / 342),  # Beta(1,17): 17/(18*19) = 0.0497
    (16, 16, 17 / 342),  # symmetric
    (1, 3, 6 / 30),  # Beta(2,3): 6/(5*6) = 0.2
])
def test_expected_learnability_by_hand(passes, attempts, expected):
    assert expected_learnability(beta_posterior(passes, attempts)) == pytest.approx(expected)


def test_task_weight_floors_and_unseen():
    assert task_weight(0, 0) == 0.25  # unseen: the most p(1-p) can be
    assert task_weight(0, 0, unseen=0.1) == 0.1
    assert task_weight(0, 1000) == pytest.approx(0.01)  # Beta(1,1001): ~0.000996, floored at 0.01
    assert task_weight(5, 10) == pytest.approx(36 / 156)  # Beta(6,6): 36/(12*13)
    # a half-solved task outweighs a rarely solved one, which outweighs a never solved one
    assert task_weight(5, 10) > task_weight(1, 10) > task_weight(0, 10)


def test_informative_chance_by_hand():
    assert informative_chance(0.5, 2) == pytest.approx(0.5)
    assert informative_chance(0.0, 8) == 0.0 and informative_chance(1.0, 8) == 0.0
    assert informative_chance(0.2, 4) == pytest.approx(1 - 0.2**4 - 0.8**4)


def test_a_bad_count_is_refused():
    with pytest.raises(ValueError):
        beta_posterior(5, 3)
