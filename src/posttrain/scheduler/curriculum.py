"""The curriculum hook of the training loop: which tasks to sample, updated with their outcomes.

Covers: the `Curriculum` protocol (`sample` / `update` / state for resume)
and the default `PassRateCurriculum`, which tracks every task's pass rate
and stops drawing tasks it has seen solved always or never (they produce
zero-variance groups, which carry no signal), with a cap on rejections so a
small task set never starves. Generated sources rarely repeat a task, so it
also pools by difficulty level (`meta["difficulty"]`, e.g. a lookup's hops):
it tracks the recent share of each level's groups with reward variance and
draws a level less often the fewer informative groups it gives, down to a
floor, so the levels above and below the model's learnable band stop eating
rollouts without being dropped (their share comes back as the model moves). `UniformCurriculum` draws uniformly from the
train split and learns nothing (`train.curriculum = "uniform"`: the recipe
off, for ablations and like-for-like baselines).
`DomainMixture` shares each step's tasks out among several domains by weight (one
curriculum of either kind per domain).
Does not cover: multi-domain priority queues, durations and the failure
bank (`scheduler/task_scheduler.py` builds those on this protocol).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from posttrain.tasks.base import TaskSource
from posttrain.types import DOMAIN_KEY, Group, Task


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
class LevelStats:
    groups: int = 0
    informative: float = 0.0
    """Recent share of the level's groups whose valid rewards differ (an exponential moving average)."""


def _level(task: Task) -> str | None:
    level = task.meta.get("difficulty")
    return None if level is None else str(level)


@dataclass
class PassRateCurriculum:
    """Uniform over the train split, minus tasks known to be always or never solved."""

    source: TaskSource
    seed: int = 0
    min_attempts: int = 16
    """Samples of a task before its pass rate is trusted enough to skip it."""
    max_rejections: int = 20

    level_floor: float = 0.1
    """The least a difficulty level is drawn, relative to the most informative level."""
    level_min_groups: int = 8
    """Groups of a level before its informative share is trusted."""
    level_decay: float = 0.05
    """Weight of each new group in a level's informative share (an exponential moving average)."""
    signal_from: str = "outcome"
    """Which scores make a group informative: "outcome" (`Group.outcomes`) or "reward" (`train.signal_from`)."""
    rng: random.Random = field(init=False)
    stats: dict[str, TaskStats] = field(init=False, default_factory=dict)
    levels: dict[str, LevelStats] = field(init=False, default_factory=dict)
    skipped: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _uninformative(self, task: Task) -> bool:
        s = self.stats.get(task.id)
        return s is not None and s.attempts >= self.min_attempts and s.passes in (0, s.attempts)

    def level_weights(self) -> dict[str, float]:
        """Each trusted level's draw probability (1 for the most informative; unknown levels are always drawn);
        empty until two levels are trusted."""
        trusted = {lv: s.informative for lv, s in self.levels.items() if s.groups >= self.level_min_groups}
        best = max(trusted.values(), default=0.0)
        if len(trusted) < 2 or best <= 0.0:
            return {}
        return {lv: max(self.level_floor, share / best) for lv, share in trusted.items()}

    def _rejected(self, task: Task, weights: dict[str, float]) -> bool:
        if self._uninformative(task):
            return True
        w = weights.get(_level(task), 1.0)
        return w < 1.0 and self.rng.random() >= w  # the RNG is drawn only when a level is down-weighted

    def sample(self, k: int) -> list[Task]:
        out = []
        weights = self.level_weights()
        for _ in range(k):
            task = self.source.sample(self.rng, "train")
            for _ in range(self.max_rejections):
                if not self._rejected(task, weights):
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
            level = _level(g.task)
            valid = [r for r, ok in zip(g.signal_scores(self.signal_from), g.valid) if ok]
            if level is None or not valid:
                continue
            lv = self.levels.setdefault(level, LevelStats())
            signal = float(max(valid) > min(valid))
            # the first groups set the share as a plain mean, later ones move it by level_decay
            rate = max(self.level_decay, 1.0 / (lv.groups + 1))
            lv.informative += rate * (signal - lv.informative)
            lv.groups += 1

    def pass_rate(self, task_id: str) -> float:
        s = self.stats.get(task_id)
        return s.pass_rate if s else float("nan")

    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": self.rng.getstate(),
            "stats": {k: (v.attempts, v.passes) for k, v in self.stats.items()},
            "levels": {k: (v.groups, v.informative) for k, v in self.levels.items()},
            "skipped": self.skipped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.stats = {k: TaskStats(a, p) for k, (a, p) in state["stats"].items()}
        self.levels = {k: LevelStats(g, i) for k, (g, i) in state.get("levels", {}).items()}  # older runs: none
        self.skipped = state["skipped"]


@dataclass
class UniformCurriculum:
    """Uniform over the train split, whatever the outcomes: the same draws as a `PassRateCurriculum` with
    the same seed before it has skipped anything."""

    source: TaskSource
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def sample(self, k: int) -> list[Task]:
        return [self.source.sample(self.rng, "train") for _ in range(k)]

    def update(self, groups: list[Group]) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])


@dataclass
class DomainMixture:
    """Several domains in one run: each step's tasks shared out by weight, one pass-rate curriculum each.

    Counts per call follow the weights by largest remainder with the deficit
    carried over from earlier calls, so even k = 1 honours the weights over
    time. Every task is tagged with its domain (`meta["domain"]`), which the
    rollouter uses to pick the domain's verifier and `update` to route groups.
    """

    curricula: dict[str, Curriculum]
    weights: dict[str, float]
    credit: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        if set(self.curricula) != set(self.weights) or not self.curricula:
            raise ValueError("DomainMixture needs one weight per domain")
        self.credit = {name: 0.0 for name in self.curricula}

    def _counts(self, k: int) -> dict[str, int]:
        total = sum(self.weights.values())
        for name, w in self.weights.items():
            self.credit[name] += k * w / total
        counts = {name: int(c) for name, c in self.credit.items()}
        left = k - sum(counts.values())
        for name in sorted(self.credit, key=lambda n: self.credit[n] - counts[n], reverse=True)[:left]:
            counts[name] += 1
        for name, c in counts.items():
            self.credit[name] -= c
        return counts

    def sample(self, k: int) -> list[Task]:
        out: list[Task] = []
        for name, count in self._counts(k).items():
            for task in self.curricula[name].sample(count):
                out.append(replace(task, meta={**task.meta, DOMAIN_KEY: name}))
        return out

    def update(self, groups: list[Group]) -> None:
        for name, curriculum in self.curricula.items():
            curriculum.update([g for g in groups if g.task.meta.get(DOMAIN_KEY) == name])

    def state_dict(self) -> dict[str, Any]:
        return {"credit": dict(self.credit), "domains": {n: c.state_dict() for n, c in self.curricula.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.credit = dict(state["credit"])
        for name, sub in state["domains"].items():
            self.curricula[name].load_state_dict(sub)


def level_metrics(curriculum: Curriculum) -> dict[str, float]:
    """The draw weight of every trusted difficulty level, for the step's metrics: `curriculum/level_<lv>`
    (`curriculum/<domain>/level_<lv>` in a mixture); empty when no level is down-weighted yet."""
    if isinstance(curriculum, DomainMixture):
        return {f"curriculum/{name}/{k.split('/', 1)[1]}": v for name, sub in curriculum.curricula.items()
                for k, v in level_metrics(sub).items()}
    weights = curriculum.level_weights() if isinstance(curriculum, PassRateCurriculum) else {}
    return {f"curriculum/level_{lv}": w for lv, w in sorted(weights.items())}
