"""Verifiers: turn a response into a `Verdict`; the same code scores training and evaluation."""

from __future__ import annotations

from posttrain.rewards.extract import extract_answer, last_boxed, last_number, tagged
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
    "Verifier",
    "build_verifier",
    "extract_answer",
    "last_boxed",
    "last_number",
    "safe_verify",
    "tagged",
    "verifier_id",
    "verifier_version",
]


def build_verifier(kind: str, extract: str = "full", tolerance: float = 0.0) -> Verifier:
    if kind == "exact":
        return ExactMatch(extract=extract)  # type: ignore[arg-type]
    if kind == "numeric":
        return NumericMatch(extract=extract if extract != "full" else "last_number", abs_tol=tolerance)  # type: ignore[arg-type]
    raise ValueError(f"unknown verifier {kind!r}: use 'exact' or 'numeric'")
