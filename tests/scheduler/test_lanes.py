"""The long-task lane never starves short tasks (a property test) and cuts the tail."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posttrain.scheduler.lanes import Starts, plan_starts, run_lanes

tasks_st = st.lists(st.tuples(st.floats(0.01, 1.0), st.booleans()), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(tasks=tasks_st, workers=st.integers(2, 8), long_factor=st.floats(30.0, 1000.0), data=st.data())
def test_short_tasks_never_wait_behind_long_ones(tasks, workers, long_factor, data):
    long_slots = data.draw(st.integers(1, workers - 1))
    jobs = [(d * long_factor if lg else d, lg) for d, lg in tasks]
    ran = run_lanes(jobs, workers, long_slots)
    assert sorted(r.index for r in ran) == list(range(len(jobs)))  # everything runs, once
    # at every moment at most long_slots long tasks run
    for r in ran:
        assert sum(1 for o in ran if o.long and o.start <= r.start < o.end) <= long_slots
    # every short task starts no later than if only the short tasks queued ahead of it ran on the workers
    # outside the long lane, each for the longest short duration: a bound long durations do not enter
    shorts = [r for r in ran if not r.long]
    longest_short = max((d for d, lg in jobs if not lg), default=0.0)
    free = workers - long_slots
    for rank, r in enumerate(sorted(shorts, key=lambda r: r.index)):
        assert r.start <= (rank // free) * longest_short + 1e-9


def test_plan_starts_reserves_the_lane_and_lends_it_to_short_tasks():
    assert plan_starts(free=4, long_running=0, short_waiting=10, long_waiting=10, long_slots=1) == Starts(3, 1)
    assert plan_starts(4, 1, 10, 10, 1).long == 0  # the lane is full: long tasks wait
    assert plan_starts(4, 1, 10, 10, 1).short == 4
    assert plan_starts(4, 0, 10, 0, 1).short == 4  # no long task waiting: shorts use the lane's slot


def test_without_a_lane_long_tasks_block_short_ones():
    jobs = [(100.0, True)] * 4 + [(1.0, False)] * 8
    no_lane, lane = run_lanes(jobs, 4, 0), run_lanes(jobs, 4, 1)
    last_short = lambda ran: max(r.end for r in ran if not jobs[r.index][1])  # noqa: E731
    assert last_short(no_lane) >= 101.0  # the shorts waited for the first long ones
    assert last_short(lane) <= 3.0 + 1e-9


def _dispatch(jobs, workers, long_slots):
    """Every job (duration, is_long) queued at time 0, each free worker taking what `pick_next` (the async loop's
    rule, `rl/async_loop.py: lane_pick`) chooses: [(index, start, end, long)]."""
    import heapq

    from posttrain.scheduler.lanes import pick_next

    queue, running, out, now = list(range(len(jobs))), [], [], 0.0
    while queue or running:
        while len(running) < workers:
            i = pick_next([jobs[j][1] for j in queue], sum(jobs[j][1] for _, j in running), long_slots)
            if i is None:
                break
            j = queue.pop(i)
            heapq.heappush(running, (now + jobs[j][0], j))
            out.append((j, now, now + jobs[j][0], jobs[j][1]))
        now, _ = heapq.heappop(running)
    return out


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(tasks=tasks_st, workers=st.integers(2, 8), long_factor=st.floats(30.0, 1000.0), data=st.data())
def test_the_async_loops_pick_never_lets_long_work_hold_short_work_back(tasks, workers, long_factor, data):
    long_slots = data.draw(st.integers(1, workers - 1))
    jobs = [(d * long_factor if lg else d, lg) for d, lg in tasks]
    ran = _dispatch(jobs, workers, long_slots)
    assert sorted(j for j, *_ in ran) == list(range(len(jobs)))  # everything runs, once
    for _, s0, _, _ in ran:  # at every start, at most long_slots long jobs run
        assert sum(1 for _, s, e, lg in ran if lg and s <= s0 < e) <= long_slots
    longest_short = max((d for d, lg in jobs if not lg), default=0.0)
    free = workers - long_slots
    shorts = sorted((j, s) for j, s, _, lg in ran if not lg)
    for rank, (_, start) in enumerate(shorts):  # the bound of run_lanes' property: long durations do not enter it
        assert start <= (rank // free) * longest_short + 1e-9


def test_pick_next_by_hand():
    from posttrain.scheduler.lanes import pick_next

    assert pick_next([False, True, False], long_running=0, long_slots=1) == 1  # the lane has room: the long one
    assert pick_next([True, False, True], long_running=1, long_slots=1) == 1  # the lane is full: the oldest short
    assert pick_next([True, True], long_running=1, long_slots=1) is None  # only long work waits: stay free
    assert pick_next([True, False], long_running=5, long_slots=0) == 0  # no lane: in order
    assert pick_next([], 0, 1) is None
