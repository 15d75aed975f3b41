"""The failure bank: every failed trajectory categorised, counted, and replayed with priority and decay.

Covers: `FailureCategory` (wrong answer, format error, truncated, timeout,
runtime error, tool misuse, verifier error, environment error, suspected
reward hack) and `categorise`, a pure, ordered function of a trajectory (its
rollout status, verdict status, details and info, the response text) and,
for agent episodes, the episode's status and tool results; `Failure`, the
record one failed trajectory becomes (what the run store's `failures` table
keeps); and `FailureBank`, which holds failed tasks for replay: each enters
with weight 1, loses `decay` of it every replay, and leaves once it passes, its
weight falls below `min_weight`, or the bank is over `capacity` (oldest out).
Infrastructure failures (verifier or environment errors, timeouts of the
verifier) are counted but never replayed: they say nothing about the policy.
Does not cover: storing rows (`store/run_store.py`), the CLI (`cli/failures.py`),
or turning exported failures into a suite (`posttrain.tasks.jsonl` reads them back).
"""

from __future__ import annotations

import enum
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from posttrain.types import DOMAIN_KEY, FinishReason, Group, RolloutStatus, Task, Trajectory, VerdictStatus


class FailureCategory(str, enum.Enum):
    WRONG_ANSWER = "wrong_answer"
    FORMAT_ERROR = "format_error"
    TRUNCATED = "truncated"
    TIMEOUT = "timeout"
    RUNTIME_ERROR = "runtime_error"
    TOOL_MISUSE = "tool_misuse"
    VERIFIER_ERROR = "verifier_error"
    ENVIRONMENT_ERROR = "environment_error"
    REWARD_HACK = "reward_hack"


# Failures of the machinery, not of the policy: counted, never replayed as training material.
INFRASTRUCTURE = frozenset({FailureCategory.VERIFIER_ERROR, FailureCategory.ENVIRONMENT_ERROR})

# What a response does to get a reward without solving the task: skip or short-circuit the tests, write the
# reward file a harness reads, or make every comparison succeed.
_HACK = re.compile(
    r"pytest\.skip|unittest\.skip|@skip|sys\.exit\(\s*0?\s*\)|os\._exit|raise\s+SystemExit|"
    r"reward\.(txt|json)|/logs/verifier|def\s+__eq__\s*\(.*\)\s*:\s*return\s+True|"
    r"monkeypatch|builtins\.(print|assert)|__import__\(['\"]builtins",
    re.IGNORECASE,
)
_FORMAT = re.compile(r"no (number|answer|tag|code|boxed)[^\n]* found|could not (parse|extract)|malformed|format", re.I)
_RUNTIME = re.compile(r"Traceback|\b[A-Z][A-Za-z]*Error\b|did not load|exception", re.I)


def task_state(task: Task) -> tuple[str, str, str | None, dict[str, Any]]:
    """A task as checkpoint state (a tuple survives `asdict`; the dataclass would become a dict)."""
    return (task.id, task.prompt, task.answer, dict(task.meta))


def task_of(state: Any) -> Task:
    return Task(*state)


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed trajectory, as the `failures` table keeps it."""

    domain: str
    task_id: str
    category: FailureCategory
    detail: str
    response: str
    prompt: str
    answer: str


def _episode_category(episode: Any) -> FailureCategory | None:
    """An agent episode's own account of how it ended (status, malformed calls, failing tool calls)."""
    status = getattr(getattr(episode, "status", None), "value", None)
    if status == "timeout":
        return FailureCategory.TIMEOUT
    if status in ("max_steps", "context_exhausted"):
        return FailureCategory.TRUNCATED
    if status == "format_errors":
        return FailureCategory.FORMAT_ERROR
    if status == "env_error":
        return FailureCategory.ENVIRONMENT_ERROR
    results = [r for turn in getattr(episode, "turns", []) for r in getattr(turn, "results", [])]
    if any(not getattr(r, "ok", True) for r in results):
        return FailureCategory.TOOL_MISUSE
    return None


def categorise(traj: Trajectory, episode: Any = None) -> FailureCategory | None:
    """Why `traj` failed (None: it passed). Ordered: the machinery first (it says nothing about the policy), then
    suspected hacks (a hack that fooled the verifier is still one), then how the rollout ended, then the answer."""
    v = traj.verdict
    if traj.status is RolloutStatus.ENV_ERROR:
        return FailureCategory.ENVIRONMENT_ERROR
    if v is None or v.status is VerdictStatus.ERROR:
        return FailureCategory.VERIFIER_ERROR
    text = traj.completion.text if traj.turns else ""
    if _HACK.search(text) or v.info.get("reward_hack") or v.info.get("skipped"):
        return FailureCategory.REWARD_HACK
    if v.passed:
        return None
    if v.status is VerdictStatus.TIMEOUT or traj.status is RolloutStatus.ABORTED:
        return FailureCategory.TIMEOUT
    if episode is not None:
        found = _episode_category(episode)
        if found is not None:
            return found
    cut = traj.status in (RolloutStatus.TRUNCATED, RolloutStatus.OVERLONG)
    if cut or (traj.turns and traj.completion.finish_reason is FinishReason.LENGTH):
        return FailureCategory.TRUNCATED
    if v.info.get("load_error") or v.info.get("error") or _RUNTIME.search(v.details):
        return FailureCategory.RUNTIME_ERROR
    if not text.strip() or _FORMAT.search(v.details):
        return FailureCategory.FORMAT_ERROR
    return FailureCategory.WRONG_ANSWER


def failures_of(group: Group) -> list[Failure]:
    """Every failed trajectory of a group, categorised (an agent group's episodes inform its categories)."""
    task = group.task
    domain = str(task.meta.get(DOMAIN_KEY, ""))
    episodes = list(group.episodes) if group.episodes else [None] * len(group.trajectories)
    out = []
    for traj, ep in zip(group.trajectories, episodes):
        cat = categorise(traj, ep)
        if cat is None:
            continue
        detail = traj.verdict.details if traj.verdict is not None else "no verdict"
        response = traj.completion.text if traj.turns else ""
        out.append(Failure(domain, task.id, cat, detail[:500], response[:2000], task.prompt,
                           "" if task.answer is None else str(task.answer)))
    return out


@dataclass(slots=True)
class _Banked:
    task: Task
    category: FailureCategory
    weight: float


class FailureBank:
    """Failed tasks waiting to be replayed, heaviest first; each replay costs `decay` of a task's weight."""

    def __init__(self, decay: float = 0.5, min_weight: float = 0.1, capacity: int = 4096) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay, self.min_weight, self.capacity = decay, min_weight, capacity
        self.items: OrderedDict[str, _Banked] = OrderedDict()
        self.counts: dict[str, dict[str, int]] = {}  # domain -> category -> failures seen (replayable or not)

    def observe(self, group: Group) -> list[Failure]:
        """Count the group's failures; bank its task (or drop it from the bank once any attempt passed)."""
        found = failures_of(group)
        domain = str(group.task.meta.get(DOMAIN_KEY, ""))
        for f in found:
            per = self.counts.setdefault(domain, {})
            per[f.category.value] = per.get(f.category.value, 0) + 1
        passed = any(t.verdict is not None and t.verdict.passed for t in group.trajectories)
        replayable = [f for f in found if f.category not in INFRASTRUCTURE]
        if passed and group.task.id in self.items:
            del self.items[group.task.id]
        elif replayable and not passed and group.task.id not in self.items:
            worst = max(replayable, key=lambda f: list(FailureCategory).index(f.category))
            self.items[group.task.id] = _Banked(group.task, worst.category, 1.0)
            while len(self.items) > self.capacity:
                self.items.popitem(last=False)
        return found

    def take(self, k: int, allow: Callable[[Task], bool] = lambda task: True) -> list[Task]:
        """Up to k banked tasks, heaviest first (oldest among equals); each loses `decay` of its weight. Tasks
        `allow` refuses (a retired task or domain) leave the bank."""
        for b in [b for b in self.items.values() if not allow(b.task)]:
            del self.items[b.task.id]
        chosen = sorted(self.items.values(), key=lambda b: -b.weight)[:k]
        for b in chosen:
            b.weight *= 1.0 - self.decay
            if b.weight < self.min_weight:
                del self.items[b.task.id]
        return [b.task for b in chosen]

    def __len__(self) -> int:
        return len(self.items)

    def state_dict(self) -> dict[str, Any]:
        # tasks as plain tuples: a checkpoint's state goes through `dataclasses.asdict`, which would turn them to dicts
        return {"items": [(task_state(b.task), b.category.value, b.weight) for b in self.items.values()],
                "counts": {d: dict(c) for d, c in self.counts.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        items = [(task_of(t), FailureCategory(c), w) for t, c, w in state["items"]]
        self.items = OrderedDict((t.id, _Banked(t, c, w)) for t, c, w in items)
        self.counts = {d: dict(c) for d, c in state["counts"].items()}
