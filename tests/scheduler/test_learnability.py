"""The posterior and p(1-p) weights against hand-computed values."""

import math

import pytest

from posttrain.scheduler.learnability import (
    ability_step,
    beta_posterior,
    difficulty_variance,
    expected_learnability,
    expected_learnability_logit,
    informative_chance,
    predicted_pass_rate,
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


def test_ability_step_by_hand():
    """Ability 0 (variance 1), a new task at difficulty 0 (variance 4), 8 of 8 passed: p = 1/2, g = 8 - 4 = 4,
    H = 8 / 4 = 2, S = 1 + (1 + 4) * 2 = 11; ability 4/11, its variance 1 - 2/11 = 9/11, difficulty -16/11."""
    ability, var, difficulty = ability_step(0.0, 1.0, 0.0, 4.0, 8, 8)
    assert ability == pytest.approx(4 / 11)
    assert var == pytest.approx(9 / 11)
    assert difficulty == pytest.approx(-16 / 11)
    # as expected (4 of 8 at 1/2): nothing moves but the ability's variance
    assert ability_step(0.5, 1.0, 0.5, 4.0, 4, 8) == pytest.approx((0.5, 9 / 11, 0.5))


def test_difficulty_variance_and_predicted_pass_rate_by_hand():
    assert difficulty_variance(0, 4.0) == 4.0
    assert difficulty_variance(8, 4.0) == pytest.approx(1 / (1 / 4 + 2))  # 8 samples, 1/4 each
    assert predicted_pass_rate(0.0, 0.0) == 0.5
    assert predicted_pass_rate(1.0, 0.0) == pytest.approx(1 / (1 + math.exp(-1)))
    # uncertainty pulls the prediction toward 1/2: logit 1 / sqrt(1 + pi * 8 / 8) = 1 / sqrt(1 + pi)
    assert predicted_pass_rate(1.0, 0.0, 8.0) == pytest.approx(1 / (1 + math.exp(-1 / math.sqrt(1 + math.pi))))


def test_expected_learnability_on_the_logit_scale_by_hand():
    # certain and at 1/2: sqrt(l2 / 2pi) with l2 = pi/8 is exactly 1/4
    assert expected_learnability_logit(0.0, 0.0) == pytest.approx(0.25)
    # difficulty unknown (variance 4): 1/4 / sqrt(1 + pi/2) = 0.1559, near Beta(1,1)'s 1/6
    assert expected_learnability_logit(0.0, 0.0, 4.0) == pytest.approx(0.25 / math.sqrt(1 + math.pi / 2))
    # off centre by 2 logits, certain: 1/4 * exp(-pi/8 * 4 / 2) = 0.1140 (p(1-p) itself is 0.1050)
    assert expected_learnability_logit(2.0, 0.0) == pytest.approx(0.25 * math.exp(-math.pi / 4))
    assert expected_learnability_logit(2.0, 0.0) == pytest.approx(0.1050, abs=0.01)
    # symmetric in the sign of ability - difficulty
    assert expected_learnability_logit(0.0, 2.0) == expected_learnability_logit(2.0, 0.0)
