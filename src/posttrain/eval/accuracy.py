"""Held-out accuracy of a model on a task list: greedy accuracy and sampled pass@1.

Covers: the two numbers the quickstart and training loop report, computed
with the same verifier code as the reward, with errored verdicts counted
apart rather than scored as wrong.
Does not cover: pass@k, confidence intervals, cost or comparisons (the
evaluation harness builds those on top).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from posttrain.engine.local import LocalEngine
from posttrain.rewards.base import Verifier, score_sync
from posttrain.types import SamplingParams, Task


@dataclass
class AccuracyResult:
    accuracy: float  # fraction of OK verdicts that passed, over all samples
    n_tasks: int
    n_samples: int
    n_errors: int
    per_task: dict[str, float] = field(default_factory=dict)  # task id -> pass rate


def evaluate_accuracy(
    engine: LocalEngine,
    tasks: list[Task],
    verifier: Verifier,
    max_tokens: int,
    temperature: float = 0.0,
    samples: int = 1,
    seed: int | None = None,
) -> AccuracyResult:
    """Greedy accuracy with temperature 0; sampled pass@1 (mean over `samples` draws) otherwise."""
    if not tasks:
        raise ValueError("evaluate_accuracy needs at least one task")
    n = 1 if temperature == 0 else samples
    params = SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, seed=seed)
    groups = engine.generate([t.prompt for t in tasks], params)
    per_task: dict[str, float] = {}
    passed = total = errors = 0
    flat = score_sync(verifier, [t for t, g in zip(tasks, groups) for _ in g], [c.text for g in groups for c in g])
    offset = 0
    for task, group in zip(tasks, groups):
        verdicts, offset = flat[offset : offset + len(group)], offset + len(group)
        ok = [v for v in verdicts if v.ok]
        errors += len(verdicts) - len(ok)
        hits = sum(v.passed for v in ok)
        passed += hits
        total += len(verdicts)
        per_task[task.id] = hits / len(verdicts)
    return AccuracyResult(
        accuracy=passed / total, n_tasks=len(tasks), n_samples=total, n_errors=errors, per_task=per_task
    )
