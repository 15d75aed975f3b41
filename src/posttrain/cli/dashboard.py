"""`posttrain dashboard [RUN_DIR...]` and `posttrain runs [DIR]`: watch runs live, list them.

Covers: the commands' options and the checks a user can act on first (the `serve` extra, a busy port, a path
with no run), each one line with exit code 2; the table or JSON of `runs`.
Does not cover: the app (`dashboard/app.py`), what is read (`dashboard/reader.py`), run status (`dashboard/runs.py`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from posttrain.cli.common import err, fmt, friendly, out
from posttrain.errors import UserError

STATUS_STYLE = {"running": "cyan", "finished": "green", "failed": "red", "interrupted": "yellow",
                "stopped_by_alert": "magenta", "stopped": "yellow"}


def dashboard(
    run_dirs: Annotated[Optional[list[Path]],
                        typer.Argument(help="Run directories, or directories of runs (default: runs).")] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8050,
    poll_ms: Annotated[int, typer.Option(help="How often the page asks for new steps, in milliseconds.")] = 1000,
) -> None:
    """A live web page of training runs: curves, alerts, domains, failures, groups, samples, episodes, staleness."""
    with friendly():
        from posttrain.dashboard.app import create_dashboard_app, require_dashboard_extra
        from posttrain.dashboard.reader import find_runs

        require_dashboard_extra()
        paths = run_dirs or [Path("runs")]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise UserError(f"no such directory: {', '.join(missing)}")
        if poll_ms < 100:
            raise UserError(f"--poll-ms must be >= 100, got {poll_ms}")
        import socket

        import uvicorn

        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError as exc:
                raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        found = find_runs(paths)
        note = f"{len(found)} run(s)" if found else "no runs yet (new ones appear when they start)"
        err.print(f"dashboard of {escape(', '.join(map(str, paths)))}: {note} at http://{host}:{port}/ ; Ctrl-C stops",
                  highlight=False, soft_wrap=True)
        uvicorn.run(create_dashboard_app(paths, poll_ms), host=host, port=port, log_level="warning")


def runs(
    directory: Annotated[Path, typer.Argument(help="A directory of runs (or one run directory).")] = Path("runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON list instead of a table.")] = False,
) -> None:
    """List runs: status (running, finished, failed, stopped by an alert), steps, newest reward and held-out, alerts."""
    with friendly():
        from posttrain.dashboard.runs import run_rows

        if not directory.exists():
            raise UserError(f"no such directory: {directory}")
        rows = run_rows([directory])
        if as_json:
            print(json.dumps([r.to_dict() for r in rows]))
            return
        if not rows:
            err.print(f"no runs under {escape(str(directory))}", highlight=False)
            return
        table = Table(title=f"runs under {directory}")
        for col, justify in (("run", "left"), ("status", "left"), ("steps", "right"), ("reward", "right"),
                             ("held-out", "right"), ("alerts", "right"), ("updated", "right"), ("stored in", "left")):
            table.add_column(col, justify=justify, no_wrap=col in ("status", "steps"))  # type: ignore[arg-type]
        now = time.time()
        for r in rows:
            style = STATUS_STYLE.get(r.status, "white")
            steps = f"{r.steps}/{r.planned_steps}" if r.planned_steps else str(r.steps)
            held = f"{fmt(r.held_out)} @{r.held_out_step}" if r.held_out is not None else "-"
            alerts = f"{r.alerts} ({r.last_alert})" if r.alerts else "0"
            ago = f"{(now - r.updated) / 60:.0f} min ago" if r.updated else "-"
            table.add_row(escape(r.name), f"[{style}]{r.status}[/]", steps, fmt(r.reward), held, escape(alerts), ago,
                          escape(r.path))
        out.print(table)
