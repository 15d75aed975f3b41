"""Verifiers: turn a response into a `Verdict`; the same code scores training and evaluation."""

from __future__ import annotations

from posttrain.rewards.base import SyncVerifier, error_verdict, score, score_sync
from posttrain.rewards.extract import extract_answer, last_boxed, last_number, tagged
from posttrain.rewards.hygiene import LengthCapped, verifier_latency_metrics
from posttrain.rewards.registry import PerTask, VerifierSpec, make_verifier, register_verifier, verifier_kinds
from posttrain.rewards.rubric import Rubric, RubricPart
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
    "LengthCapped",
    "Rubric",
    "RubricPart",
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
    "verifier_latency_metrics",
    "verifier_version",
]


def build_verifier(
    kind: VerifierSpec,
    extract: str = "full",
    tolerance: float = 0.0,
    max_response_chars: int | None = None,
    over_length_score: float = 0.0,
) -> Verifier:
    """The training reward's verifier from the config's `reward` section (`exact`, `numeric`, any registered
    kind or spec, or `per_task`: each task's own `meta["verifier"]`), behind the output-length cap if set."""
    verifier: Verifier
    if kind == "exact":
        verifier = ExactMatch(extract=extract)  # type: ignore[arg-type]
    elif kind == "numeric":
        verifier = NumericMatch(extract=extract if extract != "full" else "last_number", abs_tol=tolerance)  # type: ignore[arg-type]
    elif kind == "per_task":
        verifier = PerTask()
    else:
        verifier = make_verifier(kind)
    if max_response_chars is not None:
        verifier = LengthCapped(verifier, max_response_chars, over_length_score)
    return verifier
