"""The `TaskSource` protocol and the train / held-out split every source shares.

Covers: how any source of tasks (a file, a generator, a public suite) hands
tasks to the training loop and to evaluation, and the hash split that keeps
held-out tasks out of training by construction.
Does not cover: which task to train on next (that is the curriculum's job).
"""

from __future__ import annotations

import abc
import hashlib
import random
from typing import Literal, Protocol, runtime_checkable

from posttrain.types import Task

Split = Literal["train", "held_out"]


def split_of(key: str, held_out_fraction: float) -> Split:
    """Deterministic split of a task by a hash of its canonical key.

    Train and held-out sets are disjoint by construction: a key has exactly
    one split, whoever asks and in whatever order.
    """
    bucket = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % 1_000_000
    return "held_out" if bucket < held_out_fraction * 1_000_000 else "train"


@runtime_checkable
class TaskSource(Protocol):
    """Where tasks come from.

    Example, a source of one-digit doubling tasks:

        class Doubling:
            name = "doubling"
            def sample(self, rng, split="train"):
                while True:
                    x = rng.randrange(10)
                    if split_of(str(x), 0.2) == split:
                        return Task(id=f"double:{x}", prompt=f"2*{x}=", answer=str(2 * x))
            def take(self, n, split="held_out", seed=0):
                ...  # n distinct tasks of `split`, the same for the same seed
    """

    @property
    def name(self) -> str:
        """The source's name (a plain attribute does; every procedural source derives it from its settings)."""
        ...

    def sample(self, rng: random.Random, split: Split = "train") -> Task:
        """One task of `split`, drawn with `rng` (the loop owns and checkpoints the rng)."""
        ...

    def take(self, n: int, split: Split = "held_out", seed: int = 0) -> list[Task]:
        """Up to n distinct tasks of `split`, identical for identical arguments."""
        ...


class GeneratedSource(abc.ABC):
    """Base for procedural sources: `sample` and `take` by rejection on the hash split.

    Subclasses provide `name`, `held_out_fraction`, `_draw(rng) -> Task` and
    `split_of(task) -> Split` (usually `split_of(task.meta["split_key"], ...)`).
    """

    held_out_fraction: float

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The source's name, from its settings: task ids and `take`'s draws start with it."""

    @abc.abstractmethod
    def _draw(self, rng: random.Random) -> Task:
        """One task of either split."""

    @abc.abstractmethod
    def split_of(self, task: Task) -> Split:
        """The task's split, from its canonical key."""

    def sample(self, rng: random.Random, split: Split = "train") -> Task:
        for _ in range(100_000):
            task = self._draw(rng)
            if self.split_of(task) == split:
                return task
        raise RuntimeError(f"{self.name}: could not draw a {split} task (is the split fraction extreme?)")

    def take(self, n: int, split: Split = "held_out", seed: int = 0) -> list[Task]:
        """n distinct problems of `split` (distinct by canonical key: `a+b` and `b+a` are one problem), fewer
        when the split holds fewer: drawing stops after `200 + 2 n` draws in a row find nothing new."""
        rng = random.Random(f"{self.name}:{split}:{seed}")
        seen: dict[str, Task] = {}
        misses = 0
        while len(seen) < n and misses < 200 + 2 * n:
            task = self.sample(rng, split)
            key = str(task.meta.get("split_key", task.id))
            if key in seen:
                misses += 1
            else:
                seen[key] = task
                misses = 0
        return list(seen.values())
