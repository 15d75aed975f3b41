"""The curriculum hook of the training loop: which tasks to sample, updated with their outcomes.

Covers: the `Curriculum` protocol (`sample` / `update` / state for resume)
and the default `PassRateCurriculum`, which tracks every task's pass rate
and stops drawing tasks it has seen solved always or never (they produce
zero-variance groups, which carry no signal), with a cap on rejections so a
small task set never starves.
Does not cover: multi-domain priority queues, durations and the failure
bank (the scheduler issue builds those on this protocol).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from posttrain.tasks.base import TaskSource
from posttrain.types import Group, Task


@runtime_checkable
class Curriculum(Protocol):
    """Decides what the loop trains on next.

    Example, uniform sampling that learns nothing:

        class Uniform:
            def __init__(self, source, seed=0):
                self.source, self.rng = source, random.Random(seed)
            def sample(self, k):
                return [self.source.sample(self.rng) for _ in range(k)]
            def update(self, groups): pass
            def state_dict(self): return {"rng": self.rng.getstate()}
            def load_state_dict(self, state): self.rng.setstate(state["rng"])
    """

    def sample(self, k: int) -> list[Task]: ...

    def update(self, groups: list[Group]) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class TaskStats:
    attempts: int = 0
    passes: int = 0

    @property
    def pass_rate(self) -> float:
        return self.passes / self.attempts if self.attempts else float("nan")


@dataclass
class PassRateCurriculum:
    """Uniform over the train split, minus tasks known to be always or never solved."""

    source: TaskSource
    seed: int = 0
    min_attempts: int = 16
    """Samples of a task before its pass rate is trusted enough to skip it."""
    max_rejections: int = 20
    rng: random.Random = field(init=False)
    stats: dict[str, TaskStats] = field(init=False, default_factory=dict)
    skipped: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _uninformative(self, task: Task) -> bool:
        s = self.stats.get(task.id)
        return s is not None and s.attempts >= self.min_attempts and s.passes in (0, s.attempts)

    def sample(self, k: int) -> list[Task]:
        out = []
        for _ in range(k):
            task = self.source.sample(self.rng, "train")
            for _ in range(self.max_rejections):
                if not self._uninformative(task):
                    break
                self.skipped += 1
                task = self.source.sample(self.rng, "train")
            out.append(task)
        return out

    def update(self, groups: list[Group]) -> None:
        for g in groups:
            s = self.stats.setdefault(g.task.id, TaskStats())
            for traj, ok in zip(g.trajectories, g.valid):
                if ok:
                    s.attempts += 1
                    s.passes += int(traj.verdict.passed)

    def pass_rate(self, task_id: str) -> float:
        s = self.stats.get(task_id)
        return s.pass_rate if s else float("nan")

    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": self.rng.getstate(),
            "stats": {k: (v.attempts, v.passes) for k, v in self.stats.items()},
            "skipped": self.skipped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.stats = {k: TaskStats(a, p) for k, (a, p) in state["stats"].items()}
        self.skipped = state["skipped"]
