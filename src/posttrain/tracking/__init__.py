"""Experiment trackers: one logger interface over TensorBoard (the default), Weights & Biases, MLflow and trackio."""

from posttrain.tracking.trackers import Tracker, Trackers, build_trackers, mlflow_name

__all__ = ["Tracker", "Trackers", "build_trackers", "mlflow_name"]
