"""Rollout: sample a group of completions per task and score each with the verifier.

Covers: the synchronous rollout used by the training loop: one batched
`generate` for all tasks (prefix shared within each group), then one verdict
per completion from one batched, guarded `score_sync` call, so a failing
verifier is data; `timeout` (the config's `reward.timeout_s`) bounds that
call, and a batch past it is all TIMEOUT verdicts, excluded from advantages.
Does not cover: multi-turn agent rollouts or asynchronous producers.
"""

from __future__ import annotations

from posttrain.engine.local import LocalEngine
from posttrain.rewards.base import Verifier, score_sync
from posttrain.types import Group, SamplingParams, Task, Trajectory


def rollout(
    engine: LocalEngine, tasks: list[Task], params: SamplingParams, verifier: Verifier, timeout: float | None = None
) -> list[Group]:
    prompt_ids = engine.encode([t.prompt for t in tasks])
    completions = engine.generate(prompt_ids, params)
    flat_tasks = [task for task, group in zip(tasks, completions) for _ in group]
    verdicts = iter(score_sync(verifier, flat_tasks, [c.text for group in completions for c in group], timeout))
    return [
        Group(task, [Trajectory(task, ids, c, next(verdicts)) for c in group])
        for task, ids, group in zip(tasks, prompt_ids, completions)
    ]
