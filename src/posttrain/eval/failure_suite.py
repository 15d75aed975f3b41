"""A run's mined failures: the top categories with examples, and an evaluation suite made of them.

Covers: `summarise_failures` (counts per category and per domain, the
latest examples of each category) and `export_failure_suite`: one JSONL
line per failed task (the newest failure of each task id), in the format
`posttrain eval --suite FILE.jsonl` reads as it is (`tasks/jsonl.py`):
prompt, gold answer, the task's own meta (a reasoning-gym entry's recipe,
say) and `meta.verifier`, the spec of the domain's verifier (`rewards.spec_of`),
so the suite is judged exactly as training judged it; `meta.failure` says
where it came from. Beside it, `<FILE>.responses.jsonl` holds the failing
responses (`posttrain eval --responses` re-grades them: the evaluate ->
regress -> re-evaluate loop starts from them). Infrastructure failures
(verifier and environment errors) are left out unless asked for by category:
they are not the policy's.
Does not cover: categorising (`scheduler/failures.py`) or storing (`store/run_store.py`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.store.run_store import FailureRow, RunStore

INFRASTRUCTURE = ("verifier_error", "environment_error")


@dataclass
class FailureSummary:
    total: int
    by_category: dict[str, int]
    by_domain: dict[str, dict[str, int]]
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "by_category": self.by_category, "by_domain": self.by_domain,
                "examples": self.examples}


def summarise_failures(rows: list[tuple[int, FailureRow]], examples: int = 3) -> FailureSummary:
    """Counts per category (most common first) and per domain, and the newest `examples` of each category."""
    by_cat = Counter(r.category for _, r in rows)
    by_domain: dict[str, Counter] = {}
    shown: dict[str, list[dict[str, Any]]] = {}
    for step, r in reversed(rows):
        by_domain.setdefault(r.domain, Counter())[r.category] += 1
        ex = shown.setdefault(r.category, [])
        if len(ex) < examples:
            ex.append({"step": step, "domain": r.domain, "task_id": r.task_id, "prompt": r.prompt[:200],
                       "answer": r.answer[:100], "response": r.response[:200], "detail": r.detail[:200]})
    return FailureSummary(len(rows), dict(by_cat.most_common()),
                          {d: dict(c.most_common()) for d, c in sorted(by_domain.items())},
                          {c: shown[c] for c in by_cat})


@dataclass
class Exported:
    path: Path
    responses: Path
    tasks: int
    without_verifier: int  # tasks whose domain's verifier has no spec: judged by exact match


def export_failure_suite(store: RunStore, path: Path, domain: str | None = None, category: str | None = None,
                         since: int | None = None, min_fail_rate: float = 0.0) -> Exported:
    """Write the failed tasks (newest failure per task) as a JSONL suite, and their failing responses beside it.
    `since`: only failures from that training step on (what the policy of the run's late steps still fails);
    `min_fail_rate`: only tasks failed in at least that share of their sampled trajectories over the same steps
    (what the policy usually fails, not a sampling slip of a task it mostly solves)."""
    rows = [(s, r) for s, r in store.failures(domain, category, since)
            if category is not None or r.category not in INFRASTRUCTURE]
    if min_fail_rate > 0.0:
        tried = store.attempts(since)
        failed = Counter(r.task_id for _, r in rows)
        rows = [(s, r) for s, r in rows if failed[r.task_id] >= min_fail_rate * tried.get(r.task_id, 0)]
    tasks = store.failure_tasks()
    newest: dict[str, tuple[int, FailureRow]] = {}
    for step, r in rows:
        newest[r.task_id] = (step, r)
    path.parent.mkdir(parents=True, exist_ok=True)
    responses = path.with_name(path.stem + ".responses.jsonl")
    bare = 0
    with path.open("w") as fh, responses.open("w") as rh:
        for task_id, (step, r) in newest.items():
            known = tasks.get(task_id)
            meta = dict(known.meta) if known is not None else {}
            if known is not None and known.verifier is not None:
                meta["verifier"] = known.verifier
            else:
                bare += 1
            meta["failure"] = {"run_step": step, "domain": r.domain, "category": r.category}
            fh.write(json.dumps({"id": task_id, "prompt": r.prompt, "answer": r.answer, "meta": meta}) + "\n")
            rh.write(json.dumps({"task_id": task_id, "response": r.response}) + "\n")
    return Exported(path, responses, len(newest), bare)
