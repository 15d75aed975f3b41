"""Evaluation inside a training run: held-out suites every K steps, per-task series, lost-capability flags.

Covers: `evaluate_in_training` (one greedy pass of a suite with the
trainer's own engine through `run_eval`, the entry point `posttrain eval` uses,
stored in the run store: headline metrics, per-task pass rates, every
response): the one path of the trainer's held-out evaluation and of
`eval.suites`; `task_series` (each task's pass rate across the evaluated
steps); `regression_flags` (tasks that passed at an earlier evaluation and
fail at the latest one) and `new_failures` (the same, for one step, as the
trainer logs it).
Does not cover: when to evaluate (the trainer's `eval.every`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from posttrain.eval.harness import EvalSpec
from posttrain.eval.run import run_eval
from posttrain.store.run_store import EvalSampleRow, RunStore

if TYPE_CHECKING:
    from posttrain.sandbox.sandboxes import Sandboxes

PASS = 0.5  # a task "passes" at an evaluation when at least half its samples do (greedy: the one sample)


def evaluate_in_training(engine: Any, suite: Any, name: str, store: RunStore, step: int, max_tokens: int,
                         renderer: Any = None, sandboxes: Sandboxes | None = None) -> dict[str, float]:
    """Greedy pass@1 of `suite` at `step` through `run_eval` (an agent suite: one greedy episode per task, its turn
    figures stored beside pass@1 as `agent/...`), on the run's `sandboxes`, stored under eval `name` (metrics,
    per-task rates, every response); returns the stored metrics (`pass@1`, `mean_score`, `n_tasks`, `n_errors`,
    `regressed_tasks`, ...)."""
    spec = EvalSpec(model=f"step {step}", suite=name, n=1, temperature=0.0, max_tokens=max_tokens, batch=len(suite.tasks))
    # the rollouts' renderer and sandboxes: prompted and verified as in training
    run = run_eval(engine, suite, spec, renderer=renderer, sandboxes=sandboxes)
    assert run.summary is not None  # run_eval always summarizes
    extra = {f"agent/{k}": v for k, v in run.episode_metrics.items()}
    return record_evaluation(store, name, step, run.records, run.summary, extra)


def record_evaluation(store: RunStore, name: str, step: int, records: list, summary: Any,
                      extra: dict[str, float] | None = None) -> dict[str, float]:
    """Store one in-training evaluation (headline metrics plus `extra`, per-task rates, every record) and
    return its metrics, `regressed_tasks` (tasks that passed at an earlier evaluation and fail now) included."""
    per_task = {t.task_id: t.pass_rate for t in summary.tasks}
    # the run store's metric names (its `evals` rows and the report read them)
    metrics: dict[str, float] = {
        "n_tasks": summary.n_tasks, "n_errors": summary.n_errors, "pass@1": summary.pass1,
        "mean_score": summary.mean_score.value, "tokens_out": summary.tokens_out, "latency_p50": summary.latency.p50,
    }
    metrics["greedy_accuracy"] = summary.pass1  # one greedy sample per task: the two are the same number
    lost = new_failures(store, name, per_task, step)
    metrics["regressed_tasks"] = len(lost)
    metrics.update(extra or {})
    store.log_eval(step, name, metrics, per_task)
    store.log_eval_samples(step, name, [EvalSampleRow(r.task_id, r.sample, r.response, r.score, int(r.passed), r.status,
                                                      r.verifier, r.details, r.info) for r in records])
    return metrics


def task_series(store: RunStore, name: str | None = None) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """{eval name: {task id: [(step, pass rate), ...]}} across every stored evaluation."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for step, n, per_task in store.eval_per_task(name):
        for task, rate in per_task.items():
            out[n][task].append((step, rate))
    return {n: dict(v) for n, v in out.items()}


def new_failures(store: RunStore, name: str, per_task: dict[str, float], step: int) -> list[str]:
    """Tasks failing in `per_task` that passed at some evaluation of `name` before `step`."""
    passed_before = set()
    for s, _, earlier in store.eval_per_task(name):
        if s < step:
            passed_before |= {t for t, v in earlier.items() if v is not None and v >= PASS}
    return sorted(t for t, v in per_task.items() if t in passed_before and (v is None or v < PASS))


def regression_flags(store: RunStore) -> list[dict[str, Any]]:
    """Tasks whose latest evaluation fails although an earlier one passed: name, task, best step/value, step, value."""
    flags = []
    for name, tasks in task_series(store).items():
        for task, series in tasks.items():
            series = sorted(series)
            (step, value), earlier = series[-1], series[:-1]
            passing = [(s, v) for s, v in earlier if v is not None and v >= PASS]
            if passing and (value is None or value < PASS):
                best_step, best = max(passing, key=lambda sv: (sv[1], sv[0]))
                flags.append({"name": name, "task_id": task, "best_step": best_step, "best": best, "step": step, "value": value})
    return sorted(flags, key=lambda f: (f["name"], f["task_id"]))


def eval_samples(store: RunStore, limit: int = 3000) -> list[dict[str, Any]]:
    """The newest stored evaluation responses, shaped for the report's drill-down."""
    return [{**r, "where": f"{r['name']} @ step {r['step']}", "passed": bool(r["passed"])}
            for r in store.eval_samples(limit=limit)]


def rollout_samples(store: RunStore, limit: int = 500) -> list[dict[str, Any]]:
    """The newest step's training rollouts (completion and verdict), shaped like `eval_samples`."""
    rows = store.db.execute(
        "SELECT step, group_idx, sample_idx, task_id, completion, score, passed, status, verifier, details, info FROM samples "
        "WHERE step = (SELECT MAX(step) FROM samples) ORDER BY group_idx, sample_idx LIMIT ?", (limit,))
    return [{"task_id": t, "response": c, "score": sc, "passed": bool(p), "status": st, "verifier": v, "details": d,
             "info": json.loads(i), "where": f"rollout @ step {s} g{g} s{j}"} for s, g, j, t, c, sc, p, st, v, d, i in rows]

