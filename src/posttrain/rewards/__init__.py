"""Verifiers: turn a response into a `Verdict`; the same code scores training and evaluation."""

from __future__ import annotations

from posttrain.rewards.base import SyncVerifier, error_verdict, score, score_sync
from posttrain.rewards.extract import extract_answer, last_boxed, last_number, tagged
from posttrain.rewards.registry import PerTask, VerifierSpec, make_verifier, register_verifier, verifier_kinds
from posttrain.rewards.verifiers import (
    ExactMatch,
    NumericMatch,
    Verifier,
    safe_verify,
    verifier_id,
    verifier_version,
)

__all__ = [
    "ExactMatch",
    "NumericMatch",
    "PerTask",
    "make_verifier",
    "register_verifier",
    "verifier_kinds",
    "SyncVerifier",
    "Verifier",
    "build_verifier",
    "error_verdict",
    "score",
    "score_sync",
    "extract_answer",
    "last_boxed",
    "last_number",
    "safe_verify",
    "tagged",
    "verifier_id",
    "verifier_version",
]


def build_verifier(kind: VerifierSpec, extract: str = "full", tolerance: float = 0.0) -> Verifier:
    """The training reward's verifier from the config's `reward` section (`exact`, `numeric`, any registered
    kind or spec, or `per_task`: each task's own `meta["verifier"]`)."""
    if kind == "exact":
        return ExactMatch(extract=extract)  # type: ignore[arg-type]
    if kind == "numeric":
        return NumericMatch(extract=extract if extract != "full" else "last_number", abs_tol=tolerance)  # type: ignore[arg-type]
    if kind == "per_task":
        return PerTask()
    return make_verifier(kind)
