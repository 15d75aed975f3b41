"""Outcome verifiers for answers, and the guard that turns a failing verifier into data.

Covers: exact match, numeric (absolute/relative tolerance) and digit-match (partial credit: the share of
the gold answer's characters right, aligned at the last digit) verifiers with answer extraction, on the
`SyncVerifier` base (see `base.py` for the protocol, the guard and the version hash).
Does not cover: code execution, format, constraint or judge verifiers (their
own modules, on the same protocol).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from posttrain.rewards.base import SyncVerifier, Verifier, safe_verify, verifier_id, verifier_version
from posttrain.rewards.extract import ExtractMode, extract_answer
from posttrain.rewards.registry import register_verifier
from posttrain.types import Task, Verdict

__all__ = ["DigitMatch", "ExactMatch", "NumericMatch", "Verifier", "safe_verify", "verifier_id", "verifier_version"]


def _require_answer(task: Task) -> str:
    if task.answer is None:
        raise ValueError(f"task {task.id!r} has no gold answer")
    return task.answer


@dataclass
class ExactMatch(SyncVerifier):
    """1.0 when the extracted answer equals the gold answer (whitespace-stripped, optionally case-folded)."""

    extract: ExtractMode = "full"
    case_sensitive: bool = True
    name: str = "exact"

    def verify(self, task: Task, response: str) -> Verdict:
        gold = _require_answer(task).strip()
        got = extract_answer(response, self.extract)
        if got is None:
            return Verdict(score=0.0, passed=False, details="no answer found")
        if not self.case_sensitive:
            gold, got = gold.casefold(), got.casefold()
        hit = got == gold
        return Verdict(score=float(hit), passed=hit, details="" if hit else f"expected {gold!r}, got {got[:80]!r}")


def _to_float(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


@dataclass
class NumericMatch(SyncVerifier):
    """1.0 when |answer - gold| <= max(abs_tol, rel_tol * |gold|); a task's meta["tolerance"] overrides abs_tol."""

    extract: ExtractMode = "last_number"
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    name: str = "numeric"

    def verify(self, task: Task, response: str) -> Verdict:
        gold = _to_float(_require_answer(task))
        if gold is None:
            raise ValueError(f"task {task.id!r}: gold answer {task.answer!r} is not a number")
        got_text = extract_answer(response, self.extract)
        got = _to_float(got_text) if got_text is not None else None
        if got is None or not math.isfinite(got):
            return Verdict(score=0.0, passed=False, details="no number found")
        tol = max(float(task.meta.get("tolerance", self.abs_tol)), self.rel_tol * abs(gold))
        hit = abs(got - gold) <= tol
        return Verdict(score=float(hit), passed=hit, details="" if hit else f"expected {gold}, got {got}")


@dataclass
class DigitMatch(SyncVerifier):
    """Partial credit for a numeric answer: the share of positions, aligned at the last character, where the
    answer and the gold answer agree, over the longer of the two (a missing or extra digit costs its
    position). passed only on an exact match. Meant as a rubric's process part beside `exact` (a dense signal
    for long answers the policy rarely gets whole, docs/recipe.md), not as an acceptance criterion."""

    extract: ExtractMode = "last_number"
    name: str = "digits"

    def verify(self, task: Task, response: str) -> Verdict:
        gold = _require_answer(task).strip()
        if not gold:
            raise ValueError(f"task {task.id!r}: empty gold answer")
        got = extract_answer(response, self.extract)
        if got is None:
            return Verdict(score=0.0, passed=False, details="no answer found")
        got = got.strip()
        right = sum(a == b for a, b in zip(reversed(gold), reversed(got)))
        share = right / max(len(gold), len(got))
        hit = got == gold
        details = "" if hit else f"{right} of {len(gold)} characters of {gold!r} in {got[:80]!r}"
        return Verdict(score=share, passed=hit, details=details)


@register_verifier("exact")
def _exact(**params) -> ExactMatch:
    return ExactMatch(**params)


@register_verifier("numeric")
def _numeric(**params) -> NumericMatch:
    return NumericMatch(**params)


@register_verifier("digits")
def _digits(**params) -> DigitMatch:
    return DigitMatch(**params)
