"""Prove a suite's grader: every task's reference answer, run through the suite's own verifier, must score full marks.

Covers: `validate_suite(suite, limit)` -> `ValidationReport` (pass rate, each failure with its
verdict, infrastructure errors kept apart) and its JSON form, which `posttrain tasks validate`
prints. Uses the guarded `score` call, so a crashing verifier is a reported failure, not a crash.
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
class ValidationReport:
    suite: str
    total: int
    passed: int
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    verifier: str = ""

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "total": self.total, "passed": self.passed, "pass_rate": self.pass_rate,
            "ok": self.ok, "seconds": round(self.seconds, 3), "verifier": self.verifier,
            "failures": [vars(f) for f in self.failures],
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
    verdicts = score_sync(suite.verifier, with_gold, responses, timeout) if with_gold else []
    report = ValidationReport(suite.name, len(tasks), 0)
    by_id = {t.id: v for t, v in zip(with_gold, verdicts)}
    for t in tasks:
        v = by_id.get(t.id)
        if v is None:
            report.failures.append(Failure(t.id, 0.0, "no_answer", "the task has no reference answer"))
        elif _full_marks(v):
            report.passed += 1
        else:
            report.failures.append(Failure(t.id, v.score, v.status.value, v.details))
        if v is not None and not report.verifier:
            report.verifier = v.verifier
    report.seconds = time.perf_counter() - start
    return report
