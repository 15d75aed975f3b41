"""The one refill rule of the rollout pipeline, shared by the synchronous trainer and the asynchronous loop.

Covers: `fill_batch`: draw tasks from the curriculum (over-provisioned by the
running share of informative groups, `fill_draw`), have them rolled out in
pieces (the caller's `Rollouts`: `InlineRollouts` runs a piece when it is
taken, in the synchronous loop; the asynchronous loop submits every piece
to its producers at once), take the pieces in order, hand every finished
group to the curriculum, keep the groups with signal (with `drop_zero_variance`
off, every group with a trainable trajectory) until the batch is full,
refill until it is or the round budget is spent. Surplus work, the
pieces not yet taken when the batch is full, is cancelled (`Rollouts.cancel`;
counted in `Filled.cancelled`, and a `TaskScheduler` gets those tasks'
in-flight slots back); the groups of a taken piece beyond the batch are
surplus too (sampled, stored, not trained on). `fill_draw` is the
over-provisioning rule itself. A `TaskScheduler` also gets each piece's
wall time (its cost estimates) and the step it serves.
A batch is closed by count (`train.prompts_per_step` kept groups, the
default) or, with `rollout.step_tokens` set, by a token budget: the kept
groups' sampled tokens reach the budget (the group that crosses it is kept),
between `step_min_groups` and `step_max_groups` groups (`FillRule.full`,
`FillRule.need`).
Does not cover: how a piece is rolled out (threads, processes, Ray actors),
look-ahead or staleness (`rl/async_loop.py`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from posttrain.scheduler.curriculum import Curriculum
from posttrain.scheduler.task_scheduler import TaskScheduler
from posttrain.types import Group, Task


@dataclass(frozen=True)
class FillRule:
    """The refill rule's knobs: the `train` section's, and the `rollout` section's token budget."""

    prompts_per_step: int
    max_fill_rounds: int
    drop_zero_variance: bool
    signal_from: str
    step_tokens: int | None = None
    """None: the batch is `prompts_per_step` kept groups. Set: it closes when the kept groups' sampled tokens reach
    this, with at least `min_groups` and at most `max_groups` groups; a step's first round still draws for
    `prompts_per_step` groups, refills for the tokens still missing at the step's mean tokens per group."""
    min_groups: int = 1
    max_groups: int = 64

    def full(self, groups: int, tokens: int) -> bool:
        """Whether a batch of `groups` kept groups holding `tokens` sampled tokens is closed."""
        if self.step_tokens is None:
            return groups >= self.prompts_per_step
        return groups >= self.max_groups or (tokens >= self.step_tokens and groups >= self.min_groups)

    def need(self, groups: int, tokens: int, tokens_per_group: float | None) -> int:
        """Informative groups still wanted by an open batch (`tokens_per_group`: the step's mean so far, None before
        its first group)."""
        if self.step_tokens is None:
            return self.prompts_per_step - groups
        room = self.max_groups - groups
        if tokens_per_group is None:
            return max(1, min(room, max(self.min_groups, self.prompts_per_step) - groups))
        missing = math.ceil((self.step_tokens - tokens) / max(tokens_per_group, 1.0))
        return max(1, min(room, max(missing, self.min_groups - groups)))


def fill_rule(cfg: Any) -> FillRule:
    """The rule a run's `train` and `rollout` sections set (`cfg`: a `RunConfig`)."""
    t, r = cfg.train, cfg.rollout
    return FillRule(t.prompts_per_step, t.max_fill_rounds, t.drop_zero_variance, t.signal_from,
                    r.step_tokens, r.step_min_groups, r.step_max_groups)


def group_tokens(group: Group) -> int:
    """The tokens a group's trajectories sampled (what a token budget counts)."""
    return sum(t.sampled_tokens for t in group.trajectories)


@dataclass
class Filled:
    kept: list[Group]
    sampled: list[Group]
    rounds: int
    silent: int
    informative_rate: float
    cancelled: int = 0  # groups of surplus pieces withdrawn before they were taken


@dataclass
class Piece:
    """Tasks of one round handed to the rollouts together (`handle`: the caller's, e.g. a producer request)."""

    tasks: list[Task]
    handle: Any = None


class Rollouts(Protocol):
    """How the rounds of one step are rolled out."""

    def split(self, tasks: list[Task]) -> list[list[Task]]:
        """A round's tasks as the pieces to start, in the order they are taken."""
        ...

    def start(self, tasks: list[Task]) -> Piece: ...

    def take(self, piece: Piece) -> list[Group]:
        """The piece's groups (waiting for them)."""
        ...

    def cancel(self, piece: Piece) -> int:
        """Withdraw a piece not needed; the groups withdrawn (0: it goes on, e.g. it is kept for a later step)."""
        ...


@dataclass
class InlineRollouts:
    """The synchronous loop's rollouts: one piece a round, run when it is taken (nothing runs ahead, so nothing is
    ever surplus work)."""

    run: Callable[[list[Task]], list[Group]]

    def split(self, tasks: list[Task]) -> list[list[Task]]:
        return [tasks]

    def start(self, tasks: list[Task]) -> Piece:
        return Piece(tasks)

    def take(self, piece: Piece) -> list[Group]:
        return self.run(piece.tasks)

    def cancel(self, piece: Piece) -> int:
        return len(piece.tasks)  # never started: withdrawn whole


def fill_draw(need: int, informative_rate: float) -> int:
    """How many tasks to draw for `need` more informative groups when a share `informative_rate` of groups
    has reward variance: enough that one round fills the batch about 97% of the time (the binomial's mean
    plus two standard deviations), at most 4x `need`. A round costs about the same whatever its size (decoding
    is latency-bound at these batch sizes), so drawing a few spare groups is cheaper than a refill round."""
    p = min(max(informative_rate, 0.25), 1.0)
    k = (need + 2.0 * math.sqrt(need * (1.0 - p))) / p
    return max(need, min(4 * need, math.ceil(k)))


Signal = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # scores [G, n], valid [G, n] -> [G] bool


def fill_batch(rule: FillRule, curriculum: Curriculum, rollouts: Rollouts, informative_rate: float, step: int,
               has_signal: Signal, first: list[Piece] | None = None) -> Filled:
    """Fill one step's batch. Each round draws tasks (round 0 may instead be `first`, pieces already in flight),
    starts all its pieces, then takes them in order; the curriculum sees every finished group; a piece not yet taken
    when the batch is full is cancelled. `has_signal` is the learner's rule for a group with variance
    (`rl.advantages.has_signal`, passed in: scheduler/ does not import rl/)."""
    scheduler = curriculum if isinstance(curriculum, TaskScheduler) else None
    if scheduler is not None:
        scheduler.set_step(step)
    kept: list[Group] = []
    sampled: list[Group] = []
    rounds = silent = cancelled = 0
    kept_tokens = sampled_tokens = 0  # counted for a token budget only (`rule.step_tokens`)
    budget = rule.step_tokens is not None
    while not rule.full(len(kept), kept_tokens) and rounds < rule.max_fill_rounds:
        if rounds == 0 and first:
            pieces = first
        else:
            need = rule.need(len(kept), kept_tokens, sampled_tokens / len(sampled) if sampled else None)
            k = fill_draw(need, informative_rate) if rule.drop_zero_variance else need
            pieces = [rollouts.start(part) for part in rollouts.split(curriculum.sample(k)) if part]
        rounds += 1
        signals: list[bool] = []
        t0 = time.perf_counter()
        for piece in pieces:
            if rule.full(len(kept), kept_tokens):  # surplus work: the batch is full without it
                withdrawn = rollouts.cancel(piece)
                cancelled += withdrawn
                if withdrawn and scheduler is not None:
                    scheduler.release(piece.tasks)
                continue
            groups = rollouts.take(piece)
            if not groups:
                continue
            if scheduler is not None:
                t1 = time.perf_counter()
                scheduler.observe_round(groups, t1 - t0)
                t0 = t1
            curriculum.update(groups)
            scores = torch.tensor([g.signal_scores(rule.signal_from) for g in groups])
            valid = torch.tensor([g.valid for g in groups])
            signal = has_signal(scores, valid).tolist()
            signals.extend(signal)
            for g, s in zip(groups, signal):
                # a group none of whose trajectories is trainable (all overlong, say) carries no loss, and packing its
                # contexts can cost the learner far more memory than the step (a 10k-token prompt's attention)
                if (s or not rule.drop_zero_variance) and any(g.valid) and not rule.full(len(kept), kept_tokens):
                    kept.append(g)
                    if budget:
                        kept_tokens += group_tokens(g)
            sampled.extend(groups)
            if budget:
                sampled_tokens += sum(group_tokens(g) for g in groups)
        if not signals:  # the round gave nothing: another, within the round budget
            continue
        silent += signals.count(False)  # once a round, whatever its pieces: the share that sizes the next draw
        informative_rate = 0.9 * informative_rate + 0.1 * (sum(signals) / len(signals))
        if not rule.drop_zero_variance and not budget:  # a count is met by one round (a budget may need more)
            break
    return Filled(kept, sampled, rounds, silent, informative_rate, cancelled)
