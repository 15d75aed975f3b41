"""Evaluation: pass@k with intervals, cost and latency, resumable recorded runs, paired comparison, reports.

`run_eval` (`run.py`) is the one entry point: it runs single-turn and agent suites alike.

Public names are imported lazily, so `from posttrain.eval import pass_at_k`
does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "pass_at_k": "posttrain.eval.metrics",
    "pass_hat_k": "posttrain.eval.metrics",
    "task_mean_ci": "posttrain.eval.metrics",
    "Price": "posttrain.pricing",
    "mcnemar_exact": "posttrain.eval.stats",
    "fisher_exact": "posttrain.eval.stats",
    "benjamini_hochberg": "posttrain.eval.stats",
    "paired_bootstrap_ci": "posttrain.eval.stats",
    "SampleRecord": "posttrain.eval.records",
    "EvalRun": "posttrain.eval.records",
    "load_eval": "posttrain.eval.records",
    "summarize": "posttrain.eval.summary",
    "EvalSummary": "posttrain.eval.results",
    "TaskResult": "posttrain.eval.results",
    "Estimate": "posttrain.eval.results",
    "run_eval": "posttrain.eval.run",
    "evaluate": "posttrain.eval.harness",
    "EvalSpec": "posttrain.eval.harness",
    "rescore": "posttrain.eval.harness",
    "score_responses": "posttrain.eval.responses",
    "compare": "posttrain.eval.compare",
    "Comparison": "posttrain.eval.compare",
    "write_report": "posttrain.eval.report",
    "AccuracyResult": "posttrain.eval.accuracy",
    "evaluate_accuracy": "posttrain.eval.accuracy",
}

__all__ = [
    "AccuracyResult",
    "Comparison",
    "Estimate",
    "EvalRun",
    "EvalSpec",
    "EvalSummary",
    "Price",
    "SampleRecord",
    "TaskResult",
    "benjamini_hochberg",
    "compare",
    "evaluate",
    "evaluate_accuracy",
    "fisher_exact",
    "load_eval",
    "mcnemar_exact",
    "paired_bootstrap_ci",
    "pass_at_k",
    "pass_hat_k",
    "rescore",
    "run_eval",
    "score_responses",
    "summarize",
    "task_mean_ci",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'posttrain.eval' has no attribute {name!r}")
