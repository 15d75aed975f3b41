"""Held-out accuracy of a model on a task list: greedy accuracy and sampled pass@1, through the harness.

Covers: the two numbers the quickstart and the built-in base model's band
check report, computed through `run.run_eval` (the one evaluation entry
point: the same guarded verifier call as the reward, errored
verdicts counted apart rather than scored as wrong), all tasks in one engine
call.
Does not cover: pass@k, confidence intervals, cost or comparisons (the
harness's summary has those), or storing the responses (the trainer's
held-out evaluation does, through `eval.training`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posttrain.engine.base import Engine
from posttrain.eval.harness import EvalSpec
from posttrain.eval.run import run_eval
from posttrain.rewards.base import Verifier
from posttrain.tasks.suites import Suite
from posttrain.types import Task


@dataclass
class AccuracyResult:
    accuracy: float  # fraction of OK verdicts that passed, over all samples
    n_tasks: int
    n_samples: int
    n_errors: int
    per_task: dict[str, float] = field(default_factory=dict)  # task id -> pass rate
    errored: dict[str, str] = field(default_factory=dict)  # task id -> a response whose verdict is not OK (the
    # verifier's error or timeout, e.g. a stalled sandbox on a loaded machine: not the model's failure)


def evaluate_accuracy(
    engine: Engine,
    tasks: list[Task],
    verifier: Verifier,
    max_tokens: int,
    temperature: float = 0.0,
    samples: int = 1,
    seed: int = 0,
    renderer: Any = None,
    sandboxes: Any = None,
) -> AccuracyResult:
    """Greedy accuracy with temperature 0; sampled pass@1 (mean over `samples` draws) otherwise.

    Sampled draws are seeded by the harness from `seed` (its per-chunk seed), so they do not touch the
    engine's own sampling RNG. `sandboxes`: where code verifiers execute (None: the caller's).
    """
    if not tasks:
        raise ValueError("evaluate_accuracy needs at least one task")
    n = 1 if temperature == 0 else samples
    spec = EvalSpec(model="in-process", suite="held-out", n=n, temperature=temperature, max_tokens=max_tokens,
                    seed=seed, batch=len(tasks))
    run = run_eval(engine, Suite("held-out", list(tasks), verifier), spec, renderer=renderer, sandboxes=sandboxes)
    per_task: dict[str, list[bool]] = {}
    errors = 0
    errored: dict[str, str] = {}
    for r in run.records:
        per_task.setdefault(r.task_id, []).append(r.ok and r.passed)
        errors += not r.ok
        if not r.ok:
            errored[r.task_id] = r.response
    total = len(run.records)
    return AccuracyResult(
        accuracy=sum(sum(v) for v in per_task.values()) / total,
        n_tasks=len(tasks),
        n_samples=total,
        n_errors=errors,
        per_task={t: sum(v) / len(v) for t, v in per_task.items()},
        errored=errored,
    )
