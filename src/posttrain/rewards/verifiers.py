"""Outcome verifiers for answers, and the guard that turns a failing verifier into data.

Covers: exact match and numeric (absolute/relative tolerance) verifiers with
answer extraction; a version hash per verifier (its source code and
parameters), stamped on every verdict; `safe_verify`, which turns an
exception in any verifier into an ERROR verdict instead of a crash.
Does not cover: code execution, format, constraint or judge verifiers (the
rewards issue adds them on the same `Verifier` protocol).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import traceback
from dataclasses import dataclass, fields
from typing import Protocol, runtime_checkable

from posttrain.rewards.extract import ExtractMode, extract_answer
from posttrain.types import Task, Verdict, VerdictStatus


@runtime_checkable
class Verifier(Protocol):
    """Judges one response to one task.

    Example, a verifier that accepts any response containing the gold answer:

        @dataclass
        class Contains:
            name = "contains"
            def verify(self, task, response):
                hit = task.answer in response
                return Verdict(score=float(hit), passed=hit)
    """

    name: str

    def verify(self, task: Task, response: str) -> Verdict: ...


@functools.cache
def _class_source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return cls.__qualname__


def verifier_version(verifier: object) -> str:
    """A short hash of the verifier's class source and parameters: which checking code produced a result."""
    params = ""
    if hasattr(verifier, "__dataclass_fields__"):
        params = repr(sorted((f.name, repr(getattr(verifier, f.name))) for f in fields(verifier)))
    return hashlib.sha256((_class_source(type(verifier)) + params).encode()).hexdigest()[:12]


def verifier_id(verifier: Verifier) -> str:
    return f"{verifier.name}@{verifier_version(verifier)}"


def safe_verify(verifier: Verifier, task: Task, response: str) -> Verdict:
    """Run a verifier; an exception becomes an ERROR verdict (stored, counted, excluded from advantages)."""
    vid = verifier_id(verifier)
    try:
        verdict = verifier.verify(task, response)
        if not isinstance(verdict, Verdict):
            raise TypeError(f"verify() returned {type(verdict).__name__}, not Verdict")
        if verdict.status is VerdictStatus.OK and not math.isfinite(verdict.score):
            raise ValueError(f"verify() returned a non-finite score {verdict.score}")
    except Exception as exc:  # noqa: BLE001 - a failing verifier is data, not a crash
        last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" at {last.filename}:{last.lineno}" if last else ""
        return Verdict(
            score=0.0, passed=False, status=VerdictStatus.ERROR, verifier=vid, details=f"{type(exc).__name__}: {exc}{where}"
        )
    verdict.verifier = verdict.verifier or vid
    return verdict


def _require_answer(task: Task) -> str:
    if task.answer is None:
        raise ValueError(f"task {task.id!r} has no gold answer")
    return task.answer


@dataclass
class ExactMatch:
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
class NumericMatch:
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
