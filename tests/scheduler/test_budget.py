"""Batches by a token budget (`rollout.step_tokens`): hand-built groups of known sizes close the batch exactly where
the budget says, a long group cannot push the batch past its group bounds, and the count mode is the rule as it was
(a property test against a frozen copy of the pre-budget rule)."""

from __future__ import annotations

import math
import time

import pytest
import torch
from _scheduler_fakes import Numbered, traj
from hypothesis import given, settings
from hypothesis import strategies as st

from posttrain.config import ConfigError, build_config
from posttrain.rl.advantages import has_signal
from posttrain.scheduler.pipeline import (
    Filled,
    FillRule,
    InlineRollouts,
    Piece,
    fill_batch,
    fill_draw,
    fill_rule,
    group_tokens,
)
from posttrain.scheduler.task_scheduler import TaskScheduler
from posttrain.types import Group


def sized(tokens, passes=lambda i: 2, n=4):
    """Rollouts whose group for task t<i> has n trajectories of `tokens(i)` tokens each, `passes(i)` of them passing."""
    def run(tasks):
        out = []
        for t in tasks:
            i = int(t.id[1:])
            out.append(Group(t, [traj(t, j < passes(i), tokens=tokens(i)) for j in range(n)]))
        return out
    return run


def budget(step_tokens, lo=1, hi=64, per_step=4, rounds=4, drop=True):
    return FillRule(per_step, rounds, drop, "outcome", step_tokens, lo, hi)


def test_the_batch_closes_at_the_group_that_reaches_the_budget():
    # groups of 4 x 10 = 40 tokens: 100 tokens are reached by the third (120); the fourth drawn is surplus
    got = fill_batch(budget(100), Numbered(), InlineRollouts(sized(lambda i: 10)), 1.0, 1, has_signal)
    assert [g.task.id for g in got.kept] == ["t0", "t1", "t2"] and sum(map(group_tokens, got.kept)) == 120
    assert got.rounds == 1 and len(got.sampled) == 4
    # exactly on the budget closes it too: 80 tokens are two groups
    got = fill_batch(budget(80), Numbered(), InlineRollouts(sized(lambda i: 10)), 1.0, 1, has_signal)
    assert [g.task.id for g in got.kept] == ["t0", "t1"]


def test_groups_of_mixed_sizes_close_where_their_running_sum_crosses():
    sizes = [1, 2, 30, 1, 1, 1]  # tokens per trajectory; groups of 4: 4, 8, 120, 4, ...
    got = fill_batch(budget(130, per_step=6), Numbered(), InlineRollouts(sized(lambda i: sizes[i])), 1.0, 1, has_signal)
    assert [g.task.id for g in got.kept] == ["t0", "t1", "t2"]  # 4 + 8 + 120 = 132 >= 130
    got = fill_batch(budget(140, per_step=6), Numbered(), InlineRollouts(sized(lambda i: sizes[i])), 1.0, 1, has_signal)
    assert [g.task.id for g in got.kept] == ["t0", "t1", "t2", "t3", "t4"]  # 132 + 4 + 4 = 140


def test_silent_groups_count_no_tokens_and_refills_are_sized_by_the_tokens_missing():
    # even tasks are all solved (no signal, dropped); odd ones informative; 4 x 5 = 20 tokens a group
    calls = []

    def run(tasks):
        calls.append(len(tasks))
        return sized(lambda i: 5, passes=lambda i: 2 if i % 2 else 4)(tasks)

    got = fill_batch(budget(100, per_step=2), Numbered(), InlineRollouts(run), 1.0, 1, has_signal)
    assert sum(map(group_tokens, got.kept)) == 100 and len(got.kept) == 5
    assert all(int(g.task.id[1:]) % 2 for g in got.kept)
    # round 1 draws for prompts_per_step = 2; round 2 for (100 - 20) / 20 = 4 more, over-provisioned by the share
    assert calls[0] == 2 and calls[1] == fill_draw(4, 0.9 * 1.0 + 0.1 * 0.5)


def test_a_long_group_never_pushes_the_batch_past_its_bounds():
    # tiny groups: the budget is never reached, the batch closes at step_max_groups
    got = fill_batch(budget(10_000, hi=5, per_step=8), Numbered(), InlineRollouts(sized(lambda i: 1)), 1.0, 1,
                     has_signal)
    assert len(got.kept) == 5 and got.rounds == 1
    # one long group alone crosses the budget: kept, and the batch closes there (the rest is surplus)
    got = fill_batch(budget(100, per_step=4), Numbered(), InlineRollouts(sized(lambda i: 1000 if i == 0 else 1)),
                     1.0, 1, has_signal)
    assert [g.task.id for g in got.kept] == ["t0"] and len(got.sampled) == 4
    # with step_min_groups = 3 the learner still gets three groups, the long one first
    got = fill_batch(budget(100, lo=3, per_step=4), Numbered(),
                     InlineRollouts(sized(lambda i: 1000 if i == 0 else 1)), 1.0, 1, has_signal)
    assert [g.task.id for g in got.kept] == ["t0", "t1", "t2"]
    # a long group in the middle of a batch at its last slot: kept, never a group past step_max_groups
    got = fill_batch(budget(10_000, hi=3, per_step=6), Numbered(),
                     InlineRollouts(sized(lambda i: 1000 if i == 2 else 1)), 1.0, 1, has_signal)
    assert [g.task.id for g in got.kept] == ["t0", "t1", "t2"]


def test_surplus_pieces_of_a_budgeted_batch_are_cancelled_and_a_scheduler_gets_their_slots_back():
    from _scheduler_fakes import group

    from posttrain.scheduler.task_scheduler import DomainSpec
    from posttrain.tasks.jsonl import ListSource
    from posttrain.types import Task

    class Pieces:
        def __init__(self):
            self.taken, self.cancelled = [], []

        def split(self, tasks):
            return [tasks[i:i + 2] for i in range(0, len(tasks), 2)]

        def start(self, tasks):
            return Piece(tasks, len(tasks))

        def take(self, piece):
            self.taken.append(piece)
            return [group(t, 2) for t in piece.tasks]  # 4 x 3 = 12 tokens a group

        def cancel(self, piece):
            self.cancelled.append(piece)
            return len(piece.tasks)

    sched = TaskScheduler([DomainSpec("d", ListSource([Task(f"x{i}", "?", "42") for i in range(100)]))], seed=0)
    rollouts = Pieces()
    got = fill_batch(budget(24, per_step=4), sched, rollouts, 0.25, 1, has_signal)  # 16 drawn in 8 pieces
    assert len(got.kept) == 2 and len(rollouts.taken) == 1 and len(rollouts.cancelled) == 7 and got.cancelled == 14
    assert sched.domains["d"].inflight == 0


def test_the_budget_comes_from_the_rollout_section_and_its_bounds_are_checked():
    cfg = build_config({"rollout": {"step_tokens": 4096, "step_min_groups": 2, "step_max_groups": 32}})
    rule = fill_rule(cfg)
    assert (rule.step_tokens, rule.min_groups, rule.max_groups) == (4096, 2, 32)
    assert fill_rule(build_config({})).step_tokens is None  # the count, by default
    with pytest.raises(ConfigError, match="step_min_groups"):
        build_config({"rollout": {"step_tokens": 10, "step_min_groups": 9, "step_max_groups": 8}})


# the count mode is the rule as it was -------------------------------------------------------------------------------

def fill_batch_before_budgets(rule, curriculum, rollouts, informative_rate, step, has_signal, first=None) -> Filled:
    """`scheduler/pipeline.py: fill_batch` as it was before token budgets (commit 13bb639), frozen as the oracle."""
    scheduler = curriculum if isinstance(curriculum, TaskScheduler) else None
    if scheduler is not None:
        scheduler.set_step(step)
    kept, sampled = [], []
    rounds = silent = cancelled = 0
    while len(kept) < rule.prompts_per_step and rounds < rule.max_fill_rounds:
        if rounds == 0 and first:
            pieces = first
        else:
            need = rule.prompts_per_step - len(kept)
            k = fill_draw(need, informative_rate) if rule.drop_zero_variance else need
            pieces = [rollouts.start(part) for part in rollouts.split(curriculum.sample(k)) if part]
        rounds += 1
        signals = []
        t0 = time.perf_counter()
        for piece in pieces:
            if len(kept) >= rule.prompts_per_step:
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
        if not signals:
            continue
        silent += signals.count(False)
        informative_rate = 0.9 * informative_rate + 0.1 * (sum(signals) / len(signals))
        if not rule.drop_zero_variance:
            break
    return Filled(kept, sampled, rounds, silent, informative_rate, cancelled)


class Recorded:
    """Rollouts in `ways` pieces a round, each group's passes (of 4) and tokens drawn from `plan` by task number;
    a piece may come back empty (`empty`). Records every call."""

    def __init__(self, ways, plan, empty):
        self.ways, self.plan, self.empty, self.log = ways, plan, empty, []

    def split(self, tasks):
        size = max(1, math.ceil(len(tasks) / self.ways))
        return [tasks[i:i + size] for i in range(0, len(tasks), size)]

    def start(self, tasks):
        self.log.append(("start", [t.id for t in tasks]))
        return Piece(tasks, len(self.log))

    def take(self, piece):
        self.log.append(("take", piece.handle))
        if piece.handle in self.empty:
            return []
        out = []
        for t in piece.tasks:
            passes, tokens = self.plan[int(t.id[1:]) % len(self.plan)]
            out.append(Group(t, [traj(t, j < passes, tokens=tokens) for j in range(4)]))
        return out

    def cancel(self, piece):
        self.log.append(("cancel", piece.handle))
        return len(piece.tasks)


@settings(max_examples=150, deadline=None)
@given(plan=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 50)), min_size=1, max_size=12),
       per_step=st.integers(1, 12), rounds=st.integers(1, 5), drop=st.booleans(), ways=st.integers(1, 4),
       rate=st.floats(0.0, 1.0), empty=st.sets(st.integers(1, 30), max_size=3))
def test_the_count_mode_is_the_rule_before_budgets(plan, per_step, rounds, drop, ways, rate, empty):
    count = FillRule(per_step, rounds, drop, "outcome")
    # a budget no batch reaches, bounded at exactly prompts_per_step groups, is the count too (a count that is not
    # met stops after one round without drop_zero_variance, where a budget refills: compared with drop only)
    unreachable = FillRule(per_step, rounds, drop, "outcome", 10**9, per_step, per_step)
    runs = []
    for fill, rule in [(fill_batch, count), (fill_batch_before_budgets, count)] + [(fill_batch, unreachable)] * drop:
        rollouts, curriculum = Recorded(ways, plan, empty), Numbered()
        got = fill(rule, curriculum, rollouts, rate, 3, has_signal)
        runs.append(([g.task.id for g in got.kept], [g.task.id for g in got.sampled], got.rounds, got.silent,
                     got.informative_rate, got.cancelled, rollouts.log, curriculum.seen))
    assert all(run == runs[0] for run in runs)


@pytest.mark.slow
def test_a_budgeted_run_async_at_staleness_zero_is_the_synchronous_run(tiny_config):
    """The token budget in a real (tiny) run: every batch within its group bounds, and the asynchronous loop at
    staleness 0 closes each batch where the synchronous loop does (same weights, same figures)."""
    from posttrain.rl.trainer import Trainer
    from posttrain.store import RunStore

    timing = {"rollout_s", "learn_s", "step_s", "verifier_latency_p50", "verifier_latency_p95", "verifier_latency_max"}
    base = tiny_config.model_copy(update={
        "reward": tiny_config.reward.model_copy(update={"verifier": "numeric", "tolerance": 4.0}),
        "train": tiny_config.train.model_copy(update={"eval_every": 0})})
    runs = []
    for name, extra in [("sync", {}), ("async", {"mode": "async", "max_staleness": 0, "producer_kind": "thread"})]:
        rollout = base.rollout.model_copy(update={"step_tokens": 40, "step_min_groups": 2, "step_max_groups": 6,
                                                  **extra})
        cfg = base.model_copy(update={"name": name, "rollout": rollout})
        trainer = Trainer(cfg)
        trainer.run()
        trainer.close()
        with RunStore(cfg.path / "run.sqlite") as store:
            steps = [(s, {k: v for k, v in m.items() if k not in timing and not k.startswith(("staleness", "buffer"))
                          and k in {"reward", "groups_kept", "groups_sampled", "fill_rounds", "completion_tokens"}})
                     for s, m in store.steps()]
        runs.append((trainer.model.state_dict(), steps))
    (w1, s1), (w2, s2) = runs
    assert s1 == s2 and len(s1) == tiny_config.train.steps
    # 4 completions of at most 4 tokens a group: 40 tokens take at least 3 groups, fewer than prompts_per_step = 4
    assert all(3 <= m["groups_kept"] <= 6 for _, m in s1) and any(m["groups_kept"] == 3 for _, m in s1)
    for k in w1:
        assert torch.equal(w1[k], w2[k]), k
