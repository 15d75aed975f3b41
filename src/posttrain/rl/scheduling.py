"""What the multi-domain scheduler reports each step: to the run store, TensorBoard and the step's metrics.

Covers: `record_scheduler`, called by the trainer after every step when
`train.curriculum = "scheduler"`: per-domain figures (pass rate, difficulty,
share of samples, informative fraction, expected seconds and tokens, failure
counts, retired) into the store's `domains` table and, for the figures a
person scans, TensorBoard (`domain/<name>/<figure>`); every categorised
failure into `failures` (and each failed task's meta and verifier spec into
`failure_tasks`, so `posttrain failures --export` writes a suite that
`posttrain eval` runs as it is); the compact figures (`scheduler/...`) into
the step's metrics, which the live progress line shows.
Does not cover: the decisions themselves (`scheduler/task_scheduler.py`).
"""

from __future__ import annotations

import json
from typing import Any

from posttrain.rewards.registry import spec_of
from posttrain.scheduler.task_scheduler import TaskScheduler
from posttrain.store.run_store import DomainRow, FailureRow, FailureTask, RunStore
from posttrain.types import Task

# the figures worth a TensorBoard curve per domain (the store keeps them all)
_TB = ("pass_rate", "difficulty", "share", "informative_frac")


def _json_meta(task: Task) -> dict[str, Any]:
    """The task's meta entries that survive JSON (a terminal task's record object does not, and is left out)."""
    out = {}
    for k, v in task.meta.items():
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            continue
        out[k] = v
    return out


def record_scheduler(scheduler: TaskScheduler, store: RunStore, writer: Any, step: int, metrics: dict[str, float],
                     verifiers: dict[str, Any], tasks: dict[str, Task]) -> None:
    """Store and report one step of the scheduler (`tasks`: the step's sampled tasks by id, for their meta)."""
    per_domain = scheduler.domain_metrics()
    store.log_domains(step, [DomainRow(name, m) for name, m in per_domain.items()])
    failures = scheduler.drain_failures()
    rows = [(s, FailureRow(f.domain, f.task_id, f.category.value, f.detail, f.response, f.prompt, f.answer))
            for s, f in failures]
    specs: dict[str, Any] = {}
    kept: dict[str, FailureTask] = {}
    for _, f in failures:
        if f.task_id in kept or f.task_id not in tasks:
            continue
        if f.domain not in specs:
            specs[f.domain] = spec_of(verifiers[f.domain]) if f.domain in verifiers else None
        kept[f.task_id] = FailureTask(f.task_id, f.domain, _json_meta(tasks[f.task_id]), specs[f.domain])
    store.log_failures(rows, kept.values())
    metrics.update(scheduler.summary())
    metrics["scheduler/failures"] = float(len(rows))
    if writer is not None:
        for name, m in per_domain.items():
            for key in _TB:
                if m[key] == m[key]:  # not NaN (a domain with nothing sampled this step)
                    writer.add_scalar(f"domain/{name}/{key}", m[key], step)
