"""Run monitors: pure checks over a run's step series (`checks.py`) and the per-run `Watch` that raises alerts."""

from posttrain.monitor.checks import Finding, MonitorKind
from posttrain.monitor.watch import Alert, MonitorAlert, Watch, stored_scores

__all__ = ["Alert", "Finding", "MonitorAlert", "MonitorKind", "Watch", "stored_scores"]
