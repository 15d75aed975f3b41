"""Prove a suite's grader: every task's reference answer, run through the suite's own verifier, must score full marks.

Covers: `validate_suite(suite, limit)` -> `ValidationReport` (pass rate, each failure with its
verdict, infrastructure errors kept apart) and its JSON form, which `posttrain tasks validate`
prints. A suite that names a do-nothing response (`suite.meta["null_response"]`, e.g. the terminal
suites' empty script) is also checked the other way: that response must fail every task, with a
verdict that was judged (an error proves nothing); each task then gets a `TaskCheck` row. Tasks a
suite could not load (`suite.meta["load_errors"]`) are failures too.
Uses the guarded `score` call, so a crashing verifier is a reported failure, not a crash.
Does not cover: loading suites (`tasks.suites`) or sampling a model (`posttrain.eval`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from posttrain.tasks.suites import Suite
from posttrain.types import Verdict


@dataclass
class Failure:
    """A task whose gold answer did not score full marks (or could not be judged)."""

    task_id: str
    score: float
    status: str  # the verdict's status: "ok" (judged, not full marks), "error", "timeout"; "no_answer"
    details: str


@dataclass
class TaskCheck:
    """One task of a suite with a do-nothing response: how the gold and the do-nothing responses fared."""

    task_id: str
    gold_score: float
    gold_status: str  # a verdict status, or "no_answer"
    null_score: float
    null_status: str
    ok: bool  # the gold scored full marks and the do-nothing response was judged and did not
    details: str = ""  # the verdict that broke the rule, when one did
    notes: list[str] = field(default_factory=list)
    """What the suite could not apply of this task as published (`task.meta["notes"]`: skipped Dockerfile steps)."""


@dataclass
class ValidationReport:
    suite: str
    total: int
    passed: int
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    verifier: str = ""
    null_failures: list[Failure] = field(default_factory=list)
    """Tasks the do-nothing response passed, or could not be judged on."""
    rows: list[TaskCheck] = field(default_factory=list)
    """Per task, when the suite has a do-nothing response."""

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total and not self.failures and not self.null_failures

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "total": self.total, "passed": self.passed, "pass_rate": self.pass_rate,
            "ok": self.ok, "seconds": round(self.seconds, 3), "verifier": self.verifier,
            "failures": [vars(f) for f in self.failures],
            "null_failures": [vars(f) for f in self.null_failures], "rows": [vars(r) for r in self.rows],
        }


def _full_marks(v: Verdict) -> bool:
    return v.ok and v.passed and v.score >= 1.0 - 1e-9


def validate_suite(suite: Suite, limit: int | None = None, timeout: float | None = None) -> ValidationReport:
    """Run each task's reference response through `suite.verifier`; a task without one is a failure.

    The reference response is `meta["reference_response"]` when the task has one (the gold answer
    written the way the verifier expects a response, e.g. inside `<answer>` tags), else `answer`.
    """
    from posttrain.rewards import score_sync

    tasks = suite.tasks[:limit] if limit is not None else list(suite.tasks)
    start = time.perf_counter()
    with_gold = [t for t in tasks if t.answer is not None]
    responses = [str(t.meta.get("reference_response", t.answer)) for t in with_gold]
    null = suite.meta.get("null_response")
    null_tasks = tasks if null is not None else []
    # one batch: a verifier that runs tasks concurrently (sandboxes) runs both halves at once
    verdicts = score_sync(suite.verifier, with_gold + null_tasks, responses + [str(null)] * len(null_tasks),
                          timeout) if with_gold or null_tasks else []
    report = ValidationReport(suite.name, len(tasks), 0)
    by_id = {t.id: v for t, v in zip(with_gold, verdicts)}
    null_by_id = {t.id: v for t, v in zip(null_tasks, verdicts[len(with_gold):])}
    for t in tasks:
        v = by_id.get(t.id)
        broken = ""
        if v is None:
            broken = "the task has no reference answer"
            report.failures.append(Failure(t.id, 0.0, "no_answer", broken))
        elif _full_marks(v):
            report.passed += 1
        else:
            broken = v.details
            report.failures.append(Failure(t.id, v.score, v.status.value, v.details))
        if v is not None and not report.verifier:
            report.verifier = v.verifier
        nv = null_by_id.get(t.id)
        if nv is None:
            continue
        if not nv.ok or nv.passed:
            report.null_failures.append(Failure(t.id, nv.score, nv.status.value, nv.details))
            broken = broken or f"the do-nothing response {'passed' if nv.ok else 'was not judged'}: {nv.details}"
        report.rows.append(TaskCheck(t.id, v.score if v else 0.0, v.status.value if v else "no_answer", nv.score,
                                     nv.status.value, not broken, broken[:500], list(t.meta.get("notes") or [])))
    for e in suite.meta.get("load_errors") or []:
        report.failures.append(Failure(str(e["path"]), 0.0, "load_error", str(e["message"])))
    report.seconds = time.perf_counter() - start
    return report
