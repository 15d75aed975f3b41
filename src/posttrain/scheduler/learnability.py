"""Learnability: how much a task is worth sampling, from a Beta posterior on its pass rate.

Covers the pure math the scheduler weighs tasks and domains with: the Beta
posterior of a pass rate after `passes` of `attempts` (a uniform Beta(1, 1)
prior unless told otherwise), its mean, the expected learnability
E[p(1-p)] under it (which a group of GRPO samples turns into signal: a task
solved always or never gives zero-variance groups), the floor an unseen task
gets, and the chance that a group of n samples is informative; and the
ability model's math (a Rasch model per domain fitted by one Kalman step per
group, its predicted pass rate and expected p(1-p) on the logit scale).
Does not cover: where the counts come from (`scheduler/task_scheduler.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BetaPosterior:
    """Beta(alpha, beta) over a pass rate."""

    alpha: float
    beta: float

    @property
    def mean(self) -> float:
        return self.alpha / (self.alpha + self.beta)


def beta_posterior(passes: float, attempts: float, prior_alpha: float = 1.0, prior_beta: float = 1.0) -> BetaPosterior:
    """The posterior after `passes` successes in `attempts` trials: Beta(a0 + passes, b0 + attempts - passes)."""
    if passes < 0 or attempts < passes:
        raise ValueError(f"need 0 <= passes <= attempts, got {passes} of {attempts}")
    return BetaPosterior(prior_alpha + passes, prior_beta + attempts - passes)


def expected_learnability(post: BetaPosterior) -> float:
    """E[p(1-p)] for p ~ Beta(a, b) = a*b / ((a+b)(a+b+1)).

    Beta(1, 1) (nothing seen) gives 1/6; 8 of 16 gives 9*9/(18*19) = 0.2368; 0 of 16 gives 17/(18*19) = 0.0497.
    The maximum of p(1-p) is 1/4, approached as a half-solved task is seen more often."""
    a, b = post.alpha, post.beta
    return a * b / ((a + b) * (a + b + 1.0))


def task_weight(passes: float, attempts: float, unseen: float = 0.25, floor: float = 0.01) -> float:
    """A task's sampling weight before its domain's mixture weight: `unseen` (optimistic: the most a task can be
    worth) before any attempt, else E[p(1-p)] under the Beta(1, 1) posterior, never below `floor`."""
    if attempts <= 0:
        return unseen
    return max(floor, expected_learnability(beta_posterior(passes, attempts)))


def informative_chance(p: float, n: int) -> float:
    """P(a group of n samples at pass rate p is not all-pass or all-fail) = 1 - p^n - (1-p)^n."""
    return 1.0 - p**n - (1.0 - p) ** n


# An ability model: where a domain's tasks stand against what the model can do now. A task's pass rate is
# sigmoid(ability - difficulty) (a Rasch / Elo model): the domain's ability moves with every group of the domain,
# so evidence gathered on one task updates what is expected of all of them (the model learns a domain, not a
# task), and an unseen task starts at the domain's typical difficulty (an empirical-Bayes prior from its domain's
# pooled results, not a flat floor).
def sigmoid(x: float) -> float:
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def difficulty_variance(attempts: float, prior_var: float) -> float:
    """The variance of a task's difficulty after `attempts` samples: prior precision 1/prior_var plus 1/4 per
    sample (the Fisher information of one Bernoulli sample at a pass rate of 1/2, its most)."""
    return 1.0 / (1.0 / prior_var + 0.25 * attempts)


def predicted_pass_rate(ability: float, difficulty: float, variance: float = 0.0) -> float:
    """E[sigmoid(ability - b)] for b ~ N(difficulty, variance), by the probit approximation
    sigmoid(mu / sqrt(1 + pi * variance / 8))."""
    return sigmoid((ability - difficulty) / math.sqrt(1.0 + math.pi * variance / 8.0))


def expected_learnability_logit(ability: float, difficulty: float, variance: float = 0.0) -> float:
    """E[p(1-p)] for p = sigmoid(ability - b), b ~ N(difficulty, variance): p(1-p) is the logistic density,
    close to l * phi(l * x) with l^2 = pi/8 (the probit match), whose mean under x ~ N(mu, v) is
    l / sqrt(2 pi (1 + l^2 v)) * exp(-l^2 mu^2 / (2 (1 + l^2 v))). Certain and at 1/2 (mu = v = 0) this is 1/4;
    uncertainty lowers it (the extremes become likelier), as the Beta posterior's E[p(1-p)] does."""
    l2 = math.pi / 8.0
    spread = 1.0 + l2 * variance
    mu = ability - difficulty
    return math.sqrt(l2 / (2.0 * math.pi * spread)) * math.exp(-l2 * mu * mu / (2.0 * spread))


def ability_step(ability: float, ability_var: float, difficulty: float, difficulty_var: float, passes: int,
                 attempts: int) -> tuple[float, float, float]:
    """(ability, its variance, difficulty) after `passes` of `attempts` of one task: one Newton (Laplace) step of
    the Gaussian posterior over the pair, sigmoid(ability - difficulty) the pass rate. With p the predicted pass
    rate, g = passes - attempts * p (the surprise) and H = attempts * p(1-p) (its information), the surprise is
    shared by the two variances: S = 1 + (va + vb) H, ability + va g / S, difficulty - vb g / S, and the ability's
    variance falls to va - va^2 H / S. The caller adds the ability's drift to its variance before each step (a
    Kalman filter: the model keeps learning, so old evidence about the domain counts less)."""
    p = sigmoid(ability - difficulty)
    g = passes - attempts * p
    h = attempts * p * (1.0 - p)
    shared = 1.0 + (ability_var + difficulty_var) * h
    return (ability + ability_var * g / shared, ability_var - ability_var * ability_var * h / shared,
            difficulty - difficulty_var * g / shared)
