"""The one refill rule of the rollout pipeline, shared by the synchronous trainer and the asynchronous loop.

Covers: `fill_batch`: draw tasks from the curriculum (over-provisioned by the
running share of informative groups, `fill_draw`), have them rolled out
(the caller's `rollout`: inline in the synchronous loop, a request to the
producers in the asynchronous one), hand every finished group to the
curriculum, keep the groups with signal until the batch is full, refill
until it is or the round budget is spent; the groups sampled beyond the
batch are surplus (sampled, stored, not trained on). `fill_draw` is the
over-provisioning rule itself. A `TaskScheduler` also gets each round's wall
time (its cost estimates) and the step it serves.
Does not cover: how a round is rolled out (threads, processes, Ray actors),
look-ahead or staleness (`rl/async_loop.py`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from posttrain.scheduler.curriculum import Curriculum
from posttrain.scheduler.task_scheduler import TaskScheduler
from posttrain.types import Group


@dataclass(frozen=True)
class FillRule:
    """The `train` section's knobs of the refill rule."""

    prompts_per_step: int
    max_fill_rounds: int
    drop_zero_variance: bool
    signal_from: str


def fill_rule(cfg: Any) -> FillRule:
    """The rule a run's `train` section sets (`cfg`: a `RunConfig`)."""
    t = cfg.train
    return FillRule(t.prompts_per_step, t.max_fill_rounds, t.drop_zero_variance, t.signal_from)


@dataclass
class Filled:
    kept: list[Group]
    sampled: list[Group]
    rounds: int
    silent: int
    informative_rate: float


def fill_draw(need: int, informative_rate: float) -> int:
    """How many tasks to draw for `need` more informative groups when a share `informative_rate` of groups
    has reward variance: enough that one round fills the batch about 97% of the time (the binomial's mean
    plus two standard deviations), at most 4x `need`. A round costs about the same whatever its size (decoding
    is latency-bound at these batch sizes), so drawing a few spare groups is cheaper than a refill round."""
    p = min(max(informative_rate, 0.25), 1.0)
    k = (need + 2.0 * math.sqrt(need * (1.0 - p))) / p
    return max(need, min(4 * need, math.ceil(k)))


Signal = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # scores [G, n], valid [G, n] -> [G] bool


def fill_batch(rule: FillRule, curriculum: Curriculum, rollout: Callable[[int, int], list[Group]],
               informative_rate: float, step: int, has_signal: Signal) -> Filled:
    """Fill one step's batch. `rollout(k, round)` draws k tasks (or reuses a request already in flight for round
    0) and returns their groups; the curriculum sees every finished group; `has_signal` is the learner's rule for
    a group with variance (`rl.advantages.has_signal`, passed in: scheduler/ does not import rl/)."""
    if isinstance(curriculum, TaskScheduler):
        curriculum.set_step(step)
    kept: list[Group] = []
    sampled: list[Group] = []
    rounds = silent = 0
    while len(kept) < rule.prompts_per_step and rounds < rule.max_fill_rounds:
        need = rule.prompts_per_step - len(kept)
        k = fill_draw(need, informative_rate) if rule.drop_zero_variance else need
        t0 = time.perf_counter()
        groups = rollout(k, rounds)
        rounds += 1
        if not groups:
            continue
        if isinstance(curriculum, TaskScheduler):
            curriculum.observe_round(groups, time.perf_counter() - t0)
        curriculum.update(groups)
        scores = torch.tensor([g.signal_scores(rule.signal_from) for g in groups])
        valid = torch.tensor([g.valid for g in groups])
        signal = has_signal(scores, valid).tolist()
        silent += signal.count(False)
        informative_rate = 0.9 * informative_rate + 0.1 * (sum(signal) / len(signal))
        for g, s in zip(groups, signal):
            if (s or not rule.drop_zero_variance) and len(kept) < rule.prompts_per_step:
                kept.append(g)
        sampled.extend(groups)
        if not rule.drop_zero_variance:
            break
    return Filled(kept, sampled, rounds, silent, informative_rate)
