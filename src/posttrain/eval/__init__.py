"""Evaluation: held-out accuracy now; pass@k, comparison and reports build on it."""

from posttrain.eval.accuracy import AccuracyResult, evaluate_accuracy

__all__ = ["AccuracyResult", "evaluate_accuracy"]
