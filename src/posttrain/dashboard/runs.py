"""`posttrain runs`: every run under a directory with its status, progress, newest figures and alerts.

Covers: `run_rows(paths)`, one `RunRow` per run store found (`reader.find_runs`), and the status a person
needs: running (the trainer said so and its process is alive on this machine), finished, failed (an
exception ended it, or its process died while it said running), interrupted (Ctrl-C), stopped by an alert,
stopped (an early stop), or unknown (a store from before runs recorded a status).
Does not cover: printing (`cli/runs.py`).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from posttrain.dashboard.reader import RunReader, find_runs


@dataclass(frozen=True)
class RunRow:
    """One run as `posttrain runs` lists it."""

    name: str
    status: str
    steps: int
    planned_steps: int | None
    reward: float | None
    pass_rate: float | None
    held_out: float | None
    held_out_step: int | None
    alerts: int
    last_alert: str | None
    updated: float | None
    path: str
    reason: str | None  # why it stopped (the alert) or failed (the error)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def run_status(recorded: str, pid: Any) -> str:
    """The status to show: a run that says `running` but whose process is gone died without saying so."""
    if recorded == "running" and not _alive(pid):
        return "failed"
    return recorded


def run_rows(paths: list[Path]) -> list[RunRow]:
    rows = []
    for d in find_runs(paths):
        reader = RunReader(d)
        try:
            s = reader.summary()
            alerts = reader.alerts()
        except sqlite3.DatabaseError as exc:  # a damaged or foreign file: listed, not fatal
            rows.append(RunRow(d.name, "unreadable", 0, None, None, None, None, None, 0, None, None, str(d), str(exc)))
            continue
        rows.append(RunRow(s["name"], run_status(s["status"], s["pid"]), s["steps"], s["planned_steps"], s["reward"],
                           s["pass_rate"], s["held_out"], s["held_out_step"], s["alerts"],
                           alerts[-1].get("kind") if alerts else None, s["updated"], str(d),
                           s["stop_reason"] or s["error"]))
    return rows
