"""Learnability: how much a task is worth sampling, from a Beta posterior on its pass rate.

Covers the pure math the scheduler weighs tasks and domains with: the Beta
posterior of a pass rate after `passes` of `attempts` (a uniform Beta(1, 1)
prior unless told otherwise), its mean, the expected learnability
E[p(1-p)] under it (which a group of GRPO samples turns into signal: a task
solved always or never gives zero-variance groups), the floor an unseen task
gets, and the chance that a group of n samples is informative.
Does not cover: where the counts come from (`scheduler/queues.py`).
"""

from __future__ import annotations

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
