"""The long-task lane: which waiting rollouts start when workers free up, so long ones never hold short ones back.

Covers: `plan_starts`, the dispatch rule (long tasks may occupy at most
`long_slots` of the workers; every other free worker takes short tasks, so
short tasks always have `workers - long_slots` workers of their own, whatever
the long ones do; short tasks may use idle lane slots), and `run_lanes`, its event loop over known durations (the reference
the scheduler's tests and `benchmarks/scheduler.py` measure it with: start
and end of every task), and `pick_next`, the same rule for one free worker choosing among queued work (what a
producer of the asynchronous loop starts next, `rl/async_loop.py`).
Does not cover: which tasks are long (`scheduler/cost.py`), running rollouts.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Starts:
    short: int
    long: int


def plan_starts(free: int, long_running: int, short_waiting: int, long_waiting: int, long_slots: int) -> Starts:
    """How many short and long tasks to start on `free` workers. Long tasks take lane slots not in use; short
    tasks take the rest (idle lane slots included); a short task never waits while a worker is free that no long
    task can claim."""
    long_room = max(0, min(free, long_slots - long_running, long_waiting))
    return Starts(min(free - long_room, short_waiting), long_room)


def pick_next(queued_long: list[bool], long_running: int, long_slots: int) -> int | None:
    """Which queued item (oldest first; True: long) one free worker starts under `plan_starts`: the oldest long
    one while the lane has room, else the oldest short one; None when only long work waits and the lane is full
    (the worker stays free for short work). No lane (`long_slots` 0): the oldest item, whatever it is."""
    if not queued_long:
        return None
    if long_slots == 0:
        return 0
    long_waiting = sum(queued_long)
    plan = plan_starts(1, long_running, len(queued_long) - long_waiting, long_waiting, long_slots)
    if plan.long:
        return queued_long.index(True)
    if plan.short:
        return queued_long.index(False)
    return None


@dataclass(frozen=True, slots=True)
class Ran:
    index: int
    start: float
    end: float
    long: bool


def run_lanes(tasks: list[tuple[float, bool]], workers: int, long_slots: int) -> list[Ran]:
    """Every task (duration, is_long), all queued at time 0 in order, on `workers` workers under `plan_starts`."""
    if not 0 <= long_slots <= workers or workers < 1:
        raise ValueError(f"need 0 <= long_slots <= workers, workers >= 1; got {long_slots}, {workers}")
    short_q = deque(i for i, (_, lg) in enumerate(tasks) if not lg)
    long_q = deque(i for i, (_, lg) in enumerate(tasks) if lg)
    if long_slots == 0 and long_q:  # no lane: long tasks queue with the short ones, in order
        short_q, long_q = deque(range(len(tasks))), deque()
    running: list[tuple[float, int]] = []  # (end, index)
    out: list[Ran] = []
    now, long_running = 0.0, 0
    while short_q or long_q or running:
        plan = plan_starts(workers - len(running), long_running, len(short_q), len(long_q), long_slots)
        for q, k in ((short_q, plan.short), (long_q, plan.long)):
            for _ in range(k):
                i = q.popleft()
                heapq.heappush(running, (now + tasks[i][0], i))
                is_long = tasks[i][1] and long_slots > 0
                long_running += is_long
                out.append(Ran(i, now, now + tasks[i][0], is_long))
        if not running:
            break
        now, i = heapq.heappop(running)
        long_running -= tasks[i][1] and long_slots > 0
    return sorted(out, key=lambda r: r.index)
