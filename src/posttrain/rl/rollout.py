"""Rollout: sample a group of completions per task and score each with the verifier.

Covers: the synchronous rollout used by the training loop: one batched
`generate` for all tasks (prefix shared within each group), then one verdict
per completion through `safe_verify`, so a failing verifier is data.
Does not cover: multi-turn agent rollouts or asynchronous producers.
"""

from __future__ import annotations

from posttrain.engine.local import LocalEngine
from posttrain.rewards.verifiers import Verifier, safe_verify
from posttrain.types import Group, SamplingParams, Task, Trajectory


def rollout(engine: LocalEngine, tasks: list[Task], params: SamplingParams, verifier: Verifier) -> list[Group]:
    prompt_ids = engine.encode([t.prompt for t in tasks])
    completions = engine.generate(prompt_ids, params)
    return [
        Group(task, [Trajectory(task, ids, c, safe_verify(verifier, task, c.text)) for c in group])
        for task, ids, group in zip(tasks, prompt_ids, completions)
    ]
