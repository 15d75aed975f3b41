"""`posttrain runs` and `posttrain dashboard` from the command line: statuses, JSON, one-line errors; and the
train commands' one-line console form of a monitor alert."""

from __future__ import annotations

import json
import os
import warnings

from dashboard_runs import make_run
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.monitor import MonitorAlert

runner = CliRunner()


def test_runs_lists_every_status(tmp_path):
    runs = tmp_path / "runs"
    live = make_run(runs / "live", 5, "live", domains=False)
    live.set_info(status="running", pid=os.getpid())
    dead = make_run(runs / "dead", 3, "dead", domains=False)  # said running, its process (pid 0: none) is gone
    done = make_run(runs / "done", 8, "done", domains=False)
    done.set_info(status="finished")
    done.log_eval(12, "held_out", {"pass@1": 0.55}, {})
    stopped = make_run(runs / "stopped", 4, "stopped", domains=False)
    stopped.set_info(status="stopped_by_alert", stop_reason="entropy_collapse: step 4: entropy 0.001")
    for s in (live, dead, done, stopped):
        s.close()
    res = runner.invoke(app, ["runs", str(runs), "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert {n: r["status"] for n, r in rows.items()} == {"live": "running", "dead": "failed", "done": "finished",
                                                         "stopped": "stopped_by_alert"}
    assert rows["done"]["steps"] == 8 and rows["done"]["held_out"] == 0.55 and rows["done"]["held_out_step"] == 12
    assert rows["done"]["reward"] == 0.18 and rows["live"]["alerts"] == 1 and rows["live"]["last_alert"] == "grad_norm_spike"
    assert rows["stopped"]["reason"].startswith("entropy_collapse") and rows["done"]["path"] == str(runs / "done")
    table = runner.invoke(app, ["runs", str(runs)], env={"COLUMNS": "80"})
    assert table.exit_code == 0 and "stopped_by_alert" in table.output and "running" in table.output


def test_one_line_errors(tmp_path):
    for args in (["runs", str(tmp_path / "none")], ["dashboard", str(tmp_path / "none")],
                 ["dashboard", str(tmp_path), "--poll-ms", "5"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and res.output.startswith("error:") and "Traceback" not in res.output, res.output


def test_train_commands_show_an_alert_as_one_line(capsys):
    from posttrain.cli.train import alerts_shown_by_the_cli

    with alerts_shown_by_the_cli():
        warnings.warn("step 9: entropy 0.001 is below 0.1", MonitorAlert, stacklevel=1)
    err = capsys.readouterr().err
    assert "alert: step 9: entropy 0.001 is below 0.1" in err and "MonitorAlert" not in err
