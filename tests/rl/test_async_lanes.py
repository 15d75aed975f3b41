"""The asynchronous loop with fake rollouters of different durations: the long-task lane keeps long episodes from
holding short ones back (and a planted loop without the lane shows they would), surplus work is cancelled and
counted, and long-lane work that outlives its step is carried to the next one and trained on, not thrown away."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from posttrain.config import load_config
from posttrain.rl.async_loop import AsyncLoop
from posttrain.scheduler.task_scheduler import DomainSpec, TaskScheduler
from posttrain.tasks.jsonl import ListSource
from posttrain.types import DOMAIN_KEY, Completion, FinishReason, Group, Task, Trajectory, Verdict

LONG_S, SHORT_S = 0.6, 0.01


class Timed:
    """A producer runner whose rollout sleeps as long as its slowest task (ids `slow...` are long)."""

    def __init__(self, log: list, lock: threading.Lock) -> None:
        self.log, self.lock, self.version = log, lock, -1

    def load(self, board):
        self.version = board.version
        return self.version

    def run(self, request):
        t0 = time.perf_counter()
        time.sleep(max(LONG_S if t.id.startswith("slow") else SHORT_S for t in request.tasks))
        with self.lock:
            self.log.append((request.id, request.long, t0, time.perf_counter()))
        return [_group(t, self.version) for t in request.tasks]

    def sandbox_failures(self):
        return []

    def sampler_state(self):
        return None

    def load_sampler_state(self, state):
        pass

    def close(self):
        pass


def _group(task: Task, version: int) -> Group:
    def traj(passed: bool) -> Trajectory:
        completion = Completion([1, 2], "42", [0.0, 0.0], FinishReason.STOP, version)
        return Trajectory.single_turn(task, [1], completion, Verdict(float(passed), passed, verifier="v"))

    return Group(task, [traj(i < 2) for i in range(4)])  # half solved: every group informative


def _loop(producers: int, lane: int, steps: int = 3, per_step: int = 8):
    cfg = load_config(None, ["rollout.mode='async'", f"rollout.producers={producers}", "rollout.producer_kind='thread'",
                             f"rollout.long_lane_producers={lane}", "rollout.max_staleness=1",
                             f"train.prompts_per_step={per_step}", f"train.steps={steps}", "rollout.buffer_groups=256"])
    log: list = []
    lock = threading.Lock()
    loop = AsyncLoop(cfg, torch.nn.Linear(2, 2), lambda seed, board: Timed(log, lock), 0, steps)
    return loop, log


def _scheduler() -> TaskScheduler:
    specs = [DomainSpec(name, ListSource([Task(f"{name}{i}", "?", "42") for i in range(200)]))
             for name in ("fast", "quick", "slow")]
    sched = TaskScheduler(specs, seed=0)
    for name, seconds in (("fast", SHORT_S), ("quick", SHORT_S), ("slow", LONG_S)):
        sched.cost.observe(name, f"{name}-seen", seconds, 8.0)  # measured earlier: slow is 75x the median
    return sched


@pytest.mark.parametrize("lane", [1, 0])
def test_long_requests_never_hold_short_ones_back(lane):
    loop, log = _loop(producers=2, lane=lane)
    try:
        longs = [loop.submit([Task(f"slow{i}", "?", "42")], 4, 1, ahead=False, long=True) for i in range(2)]
        shorts = [loop.submit([Task(f"fast{i}", "?", "42")], 4, 1, ahead=False) for i in range(6)]
        for r in longs + shorts:
            loop.buffer.take(r, 0, 1, timeout=30)
    finally:
        loop.close()
    ran = {rid: (long, start, end) for rid, long, start, end in log}
    first_long_end = min(end for long, _, end in ran.values() if long)
    last_short_end = max(end for long, _, end in ran.values() if not long)
    if lane:  # one producer holds the long ones in turn; the other runs every short one meanwhile
        for _, s0, e0 in [v for v in ran.values() if v[0]]:
            assert sum(1 for long, s, e in ran.values() if long and s < e0 and s0 < e) == 1
        assert last_short_end < first_long_end
    else:  # planted: without the lane both producers take a long request and the short ones wait behind them
        assert last_short_end > first_long_end


def test_collect_with_the_lane_fills_from_short_work_cancels_the_surplus_and_trains_on_the_long_work_later():
    loop, log = _loop(producers=3, lane=1, per_step=4)  # drawing 16 tasks at a share of 0.25: 2 short pieces
    sched = _scheduler()
    try:
        t0 = time.perf_counter()
        got = loop.collect(1, sched, 4, informative_rate=0.25)
        first_s = time.perf_counter() - t0
        assert len(got.kept) == 4 and first_s < LONG_S  # the long piece is still running: the step did not wait
        assert all(g.task.meta[DOMAIN_KEY] != "slow" for g in got.kept)
        assert [p.handle.long for p in loop.carried] == [True]  # long work carried, not thrown away
        cancelled = loop.step_metrics()["surplus_cancelled_groups"]
        assert cancelled == got.cancelled == loop.buffer.ledger()["cancelled"] > 0  # the surplus piece, counted
        loop.publish({"weight": torch.zeros(2, 2), "bias": torch.zeros(2)}, 1)
        time.sleep(LONG_S)  # the long piece finishes
        got2 = loop.collect(2, sched, 4, informative_rate=got.informative_rate)
        assert any(g.task.meta[DOMAIN_KEY] == "slow" for g in got2.kept)  # finished long work taken first
        assert loop.buffer.ledger()["lost"] == 0
    finally:
        loop.close()


def test_collect_without_the_lane_waits_for_long_tasks():
    loop, _ = _loop(producers=3, lane=0)  # planted: no lane, long tasks mixed into every request
    try:
        t0 = time.perf_counter()
        got = loop.collect(1, _scheduler(), 4, informative_rate=0.5)
        assert len(got.kept) == 8 and time.perf_counter() - t0 >= LONG_S
    finally:
        loop.close()
