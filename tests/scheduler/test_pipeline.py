"""The one refill rule: over-provisioning by the informative share, refills, and surplus work cancelled and counted
(a planted surplus), with a TaskScheduler getting the cancelled tasks' in-flight slots back."""

from __future__ import annotations

from _scheduler_fakes import Numbered, group

from posttrain.rl.advantages import has_signal
from posttrain.scheduler.pipeline import FillRule, InlineRollouts, Piece, fill_batch, fill_draw
from posttrain.scheduler.task_scheduler import DomainSpec, TaskScheduler
from posttrain.tasks.jsonl import ListSource
from posttrain.types import Task


class Counting(Numbered):
    """A curriculum of numbered tasks of domain `d`; `passes(task)` decides each group's outcome (of 4)."""

    def __init__(self, passes):
        super().__init__()
        self.passes = passes


class Pieces:
    """Rollouts in `ways` pieces a round, all started at once; records what was taken and cancelled."""

    def __init__(self, ways, passes):
        self.ways, self.passes = ways, passes
        self.started, self.taken, self.cancelled = [], [], []

    def split(self, tasks):
        size = -(-len(tasks) // self.ways)
        return [tasks[i:i + size] for i in range(0, len(tasks), size)]

    def start(self, tasks):
        self.started.append([t.id for t in tasks])
        return Piece(tasks, len(self.started) - 1)

    def take(self, piece):
        self.taken.append(piece.handle)
        return [group(t, self.passes(t)) for t in piece.tasks]

    def cancel(self, piece):
        self.cancelled.append(piece.handle)
        return len(piece.tasks)


RULE = FillRule(prompts_per_step=4, max_fill_rounds=4, drop_zero_variance=True, signal_from="outcome")


def test_surplus_pieces_are_cancelled_and_counted_once_the_batch_is_full():
    # a low running share asks for 4x the need: 16 tasks in 4 pieces; the first piece alone is all informative
    assert fill_draw(4, 0.25) == 16
    rollouts = Pieces(4, lambda t: 2)  # every group half solved: informative
    got = fill_batch(RULE, Counting(None), rollouts, 0.25, 1, has_signal)
    assert len(got.kept) == 4 and got.rounds == 1
    assert rollouts.taken == [0] and rollouts.cancelled == [1, 2, 3]
    assert got.cancelled == 12 and len(got.sampled) == 4  # the planted surplus, counted; never sampled


def test_pieces_are_taken_until_the_batch_fills_and_nothing_needed_is_cancelled():
    # only odd tasks carry signal: two pieces of 4 give the 4 informative groups, the other two are surplus
    rollouts = Pieces(4, lambda t: 2 if int(t.id[1:]) % 2 else 0)
    got = fill_batch(RULE, Counting(None), rollouts, 0.25, 1, has_signal)
    assert len(got.kept) == 4 and all(int(g.task.id[1:]) % 2 for g in got.kept)
    assert rollouts.taken == [0, 1] and rollouts.cancelled == [2, 3] and got.cancelled == 8
    assert got.silent == 4 and got.informative_rate == 0.9 * 0.25 + 0.1 * 0.5  # updated once for the round


def test_the_synchronous_rollouts_are_one_piece_a_round_and_never_cancel():
    ran = []

    def run(tasks):
        ran.append(len(tasks))
        return [group(t, 2 if int(t.id[1:]) >= 8 else 4) for t in tasks]  # the first 8 tasks are all solved

    got = fill_batch(RULE, Counting(None), InlineRollouts(run), 1.0, 1, has_signal)
    assert ran[:2] == [4, fill_draw(4, 0.9)] and got.cancelled == 0  # each round one call, sized by the running share
    assert len(got.kept) == 4 and got.rounds == len(ran) >= 2


def test_a_task_scheduler_gets_the_slots_of_cancelled_tasks_back():
    source = ListSource([Task(f"x{i}", "?", "42") for i in range(100)])
    sched = TaskScheduler([DomainSpec("d", source)], seed=0)
    rollouts = Pieces(4, lambda t: 2)
    got = fill_batch(RULE, sched, rollouts, 0.25, 1, has_signal)
    assert got.cancelled == 12
    assert sched.domains["d"].inflight == 0  # 4 taken and counted, 12 released: none left hanging


def test_a_planted_leak_shows_when_cancelled_tasks_are_not_released():
    class Leaky(Pieces):
        def cancel(self, piece):  # withdraws nothing: the tasks stay in flight
            return 0

    sched = TaskScheduler([DomainSpec("d", ListSource([Task(f"x{i}", "?", "42") for i in range(100)]))], seed=0)
    got = fill_batch(RULE, sched, Leaky(4, lambda t: 2), 0.25, 1, has_signal)
    assert got.cancelled == 0 and sched.domains["d"].inflight == 12



def test_without_the_filter_a_group_with_no_trainable_trajectory_is_sampled_but_never_trained_on():
    """Uniform sampling with `drop_zero_variance = false` keeps zero-variance groups, but not one whose every
    trajectory is masked (an overlong prompt): it has no loss, and its context could cost the learner gigabytes
    (a planted 528-domain run asked for 35 GB of attention for such a group)."""
    from _scheduler_fakes import traj

    from posttrain.types import Group, RolloutStatus

    def run(tasks):
        return [Group(t, [traj(t, False, status=RolloutStatus.OVERLONG, tokens=0) for _ in range(4)])
                if int(t.id[1:]) % 2 else group(t, 0) for t in tasks]

    rule = FillRule(prompts_per_step=4, max_fill_rounds=4, drop_zero_variance=False, signal_from="outcome")
    got = fill_batch(rule, Counting(lambda t: 0), InlineRollouts(run), 1.0, 1, has_signal)
    assert [g.task.id for g in got.sampled] == ["t0", "t1", "t2", "t3"]
    assert [g.task.id for g in got.kept] == ["t0", "t2"] and got.rounds == 1
