"""Per-item verifier deadlines: one slow or hanging response costs only itself."""

from __future__ import annotations

import asyncio
import time

from posttrain.rewards import score_sync
from posttrain.types import Task, Verdict, VerdictStatus


class HangsOn:
    """Hangs on responses equal to `bad`; answers the rest at once. Counts batch calls."""

    name = "hangs_on"

    def __init__(self, bad: str) -> None:
        self.bad, self.calls = bad, 0

    async def verify_batch(self, tasks, responses):
        self.calls += 1
        if self.bad in responses:
            await asyncio.sleep(30)
        return [Verdict(1.0, True) for _ in tasks]


class RaisesOn(HangsOn):
    async def verify_batch(self, tasks, responses):
        if self.bad in responses:
            raise RuntimeError("poisoned item")
        return [Verdict(1.0, True) for _ in tasks]


TASKS = [Task(str(i), "p") for i in range(6)]


def test_a_hanging_item_times_out_alone():
    verifier = HangsOn("slow")
    responses = ["a", "b", "slow", "c", "d", "e"]
    start = time.perf_counter()
    verdicts = score_sync(verifier, TASKS, responses, timeout=0.3)
    assert time.perf_counter() - start < 2.0  # at most about two deadlines, never the 30 s hang
    assert [v.status for v in verdicts] == [VerdictStatus.OK] * 2 + [VerdictStatus.TIMEOUT] + [VerdictStatus.OK] * 3
    assert all(v.passed for i, v in enumerate(verdicts) if i != 2)
    assert "deadline for this item" in verdicts[2].details
    assert verifier.calls == 1 + len(TASKS)  # the batch, then each item on its own


def test_a_raising_item_errors_alone():
    verdicts = score_sync(RaisesOn("bad"), TASKS, ["a", "bad", "b", "c", "d", "e"], timeout=5.0)
    assert [v.status for v in verdicts] == [VerdictStatus.OK, VerdictStatus.ERROR] + [VerdictStatus.OK] * 4
    assert "poisoned item" in verdicts[1].details


def test_a_fast_batch_is_one_call():
    verifier = HangsOn("never")
    verdicts = score_sync(verifier, TASKS, ["x"] * 6, timeout=5.0)
    assert verifier.calls == 1 and all(v.ok for v in verdicts)
