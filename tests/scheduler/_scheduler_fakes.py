"""Fakes for the scheduler's tests: tasks, groups with chosen outcomes, and a finite source."""

from __future__ import annotations

from posttrain.types import (
    DOMAIN_KEY,
    Completion,
    FinishReason,
    Group,
    RolloutStatus,
    Task,
    Trajectory,
    Verdict,
    VerdictStatus,
)


def traj(task: Task, passed: bool, text: str = "42", *, status=RolloutStatus.OK, vstatus=VerdictStatus.OK,
         details: str = "", info: dict | None = None, finish=FinishReason.STOP, tokens: int = 3) -> Trajectory:
    completion = Completion(list(range(tokens)), text, [0.0] * tokens, finish, 0)
    verdict = Verdict(float(passed), passed, vstatus, "v", details, info=info or {})
    t = Trajectory.single_turn(task, [1], completion, verdict)
    t.status = status
    return t


def group(task: Task, passes: int, n: int = 4) -> Group:
    return Group(task, [traj(task, i < passes) for i in range(n)])


def tagged(task_id: str, domain: str) -> Task:
    return Task(task_id, f"{task_id}?", "42", {DOMAIN_KEY: domain})


class Numbered:
    """A curriculum of tasks t0, t1, ... of domain `d`, in order; `seen`: the task ids it was updated with."""

    def __init__(self):
        self.next, self.seen = 0, []

    def sample(self, k):
        out = [tagged(f"t{self.next + i}", "d") for i in range(k)]
        self.next += k
        return out

    def update(self, groups):
        self.seen.extend(g.task.id for g in groups)
