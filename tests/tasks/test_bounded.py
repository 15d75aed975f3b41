"""Bounded generation: results and errors come back, a call past its time or memory limit costs the call and
the worker only, and the reasoning-gym entry that stalled the 528-domain run is skipped within its limit."""

import os
import random
import time

import pytest

from posttrain.tasks.bounded import BoundedWorker, GenerationFailed, GenerationTimeout
from posttrain.tasks.jsonl import TaskFileError


@pytest.fixture
def worker():
    w = BoundedWorker(timeout_s=5.0, memory_mb=1024)
    yield w
    w.close()


def test_results_and_errors_come_back_and_printing_does_not_break_the_channel(worker):
    assert worker.call(sum, [1, 2, 3]) == 6
    assert worker.call(print, "a generator talking on stdout") is None
    with pytest.raises(GenerationFailed, match="ValueError: invalid literal"):
        worker.call(int, "x")
    assert worker.call(divmod, 7, 2) == (3, 1) and worker.restarts == 0


def test_a_call_past_its_time_is_killed_and_the_next_call_gets_a_new_worker(worker):
    t0 = time.perf_counter()
    with pytest.raises(GenerationTimeout, match="over 0.3 s"):
        worker.call(time.sleep, 30, timeout_s=0.3)
    assert time.perf_counter() - t0 < 5.0
    assert worker.restarts == 1
    assert worker.call(sum, [4, 5]) == 9


def test_a_call_past_its_memory_limit_fails_as_a_memory_error_and_the_worker_goes_on(worker):
    with pytest.raises(GenerationFailed, match="MemoryError"):
        worker.call(bytearray, 4 << 30)  # 4 GiB under a 1 GiB address-space limit
    assert worker.call(len, bytearray(1 << 20)) == 1 << 20 and worker.restarts == 0


def test_a_worker_that_dies_is_a_failure_then_a_new_worker(worker):
    with pytest.raises(GenerationFailed, match="died"):
        worker.call(os._exit, 3)
    assert worker.call(max, 1, 2) == 2 and worker.restarts == 1


def test_an_unpicklable_result_is_a_one_line_failure(worker):
    with pytest.raises(GenerationFailed, match="could not be sent back"):
        worker.call(open, os.devnull)  # a file object
    with pytest.raises(GenerationFailed, match="could not be sent back"):
        worker.call(globals)  # the worker's module globals hold modules
    assert worker.call(abs, -1) == 1


STUCK = 665016  # rg:number_sequence level 2, entry 665016: squares into a number of millions of digits, forever


def test_the_entry_that_stalled_the_many_domain_run_is_skipped_within_its_limit(worker):
    from posttrain.tasks.reasoning_gym import RGSource

    src = RGSource("number_sequence", level=2, generate_timeout_s=1.0, worker=worker)
    assert src.task(1).prompt  # an ordinary entry
    t0 = time.perf_counter()
    with pytest.raises(TaskFileError, match=f"entry {STUCK} took over 1 s"):
        src.task(STUCK)
    assert time.perf_counter() - t0 < 10.0
    with pytest.raises(TaskFileError, match="before"):  # not asked for again
        src.task(STUCK)
    assert worker.restarts == 1

    class Pinned(random.Random):  # a draw that lands on the stuck entry first
        def __init__(self):
            super().__init__(0)
            self.first = True

        def randrange(self, n):
            if self.first:
                self.first = False
                return STUCK
            return super().randrange(n)

    assert src.sample(Pinned(), "train").id != f"{src.name}:{STUCK}"
