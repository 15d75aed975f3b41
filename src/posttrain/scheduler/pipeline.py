"""The one refill rule of the rollout pipeline, shared by the synchronous trainer and the asynchronous loop.

Covers: `fill_batch`: draw tasks from the curriculum (over-provisioned by the
running share of informative groups, `fill_draw`), have them rolled out in
pieces (the caller's `Rollouts`: `InlineRollouts` runs a piece when it is
taken, in the synchronous loop; the asynchronous loop submits every piece
to its producers at once), take the pieces in order, hand every finished
group to the curriculum, keep the groups with signal until the batch is
full, refill until it is or the round budget is spent. Surplus work, the
pieces not yet taken when the batch is full, is cancelled (`Rollouts.cancel`;
counted in `Filled.cancelled`, and a `TaskScheduler` gets those tasks'
in-flight slots back); the groups of a taken piece beyond the batch are
surplus too (sampled, stored, not trained on). `fill_draw` is the
over-provisioning rule itself. A `TaskScheduler` also gets each piece's
wall time (its cost estimates) and the step it serves.
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
    while len(kept) < rule.prompts_per_step and rounds < rule.max_fill_rounds:
        if rounds == 0 and first:
            pieces = first
        else:
            need = rule.prompts_per_step - len(kept)
            k = fill_draw(need, informative_rate) if rule.drop_zero_variance else need
            pieces = [rollouts.start(part) for part in rollouts.split(curriculum.sample(k)) if part]
        rounds += 1
        signals: list[bool] = []
        t0 = time.perf_counter()
        for piece in pieces:
            if len(kept) >= rule.prompts_per_step:  # surplus work: the batch is full without it
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
                if (s or not rule.drop_zero_variance) and len(kept) < rule.prompts_per_step:
                    kept.append(g)
            sampled.extend(groups)
        if not signals:  # the round gave nothing: another, within the round budget
            continue
        silent += signals.count(False)  # once a round, whatever its pieces: the share that sizes the next draw
        informative_rate = 0.9 * informative_rate + 0.1 * (sum(signals) / len(signals))
        if not rule.drop_zero_variance:
            break
    return Filled(kept, sampled, rounds, silent, informative_rate, cancelled)
