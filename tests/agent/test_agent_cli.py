"""`posttrain agent run` and `posttrain agent show`: JSON per task, stored episodes, one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.store.run_store import RunStore

runner = CliRunner()
KEYS = {"task_id", "passed", "reward", "steps", "status", "tokens_in", "tokens_out", "seconds"}


@pytest.mark.slow
def test_run_oracle_and_noop_then_show(tmp_path):
    res = runner.invoke(app, ["agent", "run", "--model", "oracle", "--suite", "demo", "--json", "-q",
                              "--out", str(tmp_path / "oracle")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3 and all(KEYS <= set(r) for r in rows) and all(r["passed"] for r in rows)
    res = runner.invoke(app, ["agent", "run", "--model", "noop", "--suite", "demo", "--json",
                              "--out", str(tmp_path / "noop")])
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert res.exit_code == 0 and not any(r["passed"] for r in rows) and all(r["status"] == "failed" for r in rows)
    with RunStore(tmp_path / "oracle" / "run.sqlite") as store:
        assert store.count("episodes") == 3 and store.info()["kind"] == "agent"
    res = runner.invoke(app, ["agent", "show", str(tmp_path / "oracle")])
    assert res.exit_code == 0 and "demo/fix-add" in res.stdout
    res = runner.invoke(app, ["agent", "show", str(tmp_path / "oracle"), "demo/fix-add"])
    assert res.exit_code == 0 and "tests passed" in res.stdout and "submit" in res.stdout
    res = runner.invoke(app, ["agent", "show", str(tmp_path / "oracle"), "0", "--json"])
    assert json.loads(res.stdout)["status"] == "solved"


def test_one_line_errors(tmp_path):
    res = runner.invoke(app, ["agent", "run", "--model", "noop"])
    assert res.exit_code == 2 and "exactly one of --task DIR or --suite" in res.output
    res = runner.invoke(app, ["agent", "run", "--model", "noop", "--suite", "demo", "--context", "magic"])
    assert res.exit_code == 2 and "unknown context policy" in res.output
    res = runner.invoke(app, ["agent", "show", str(tmp_path)])
    assert res.exit_code == 2 and "no run store" in res.output
    res = runner.invoke(app, ["agent", "run", "--model", str(tmp_path / "nothing"), "--suite", "demo"])
    assert res.exit_code == 2 and "Traceback" not in res.output


def harbor_task(d, toml="[verifier]\ntimeout_sec = 30\n[agent]\ntimeout_sec = 30\n"):
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Write hello world to /app/hello.txt.\n")
    (d / "task.toml").write_text(toml)
    (d / "tests" / "test.sh").write_text("grep -qx 'hello world' /app/hello.txt && echo 1 > /logs/verifier/reward.txt"
                                         " || echo 0 > /logs/verifier/reward.txt\n")
    (d / "solution" / "solve.sh").write_text("echo 'hello world' > /app/hello.txt\n")
    return d


@pytest.mark.slow
def test_a_bad_task_is_one_line_and_the_rest_of_the_suite_runs(tmp_path):
    harbor_task(tmp_path / "suite" / "good")
    harbor_task(tmp_path / "suite" / "bad", toml="[verifier\n")
    res = runner.invoke(app, ["agent", "run", "--model", "oracle", "--suite", str(tmp_path / "suite"), "--json", "-q",
                              "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert [(r["task_id"], r["passed"]) for r in rows] == [("good", True)]
    assert "malformed TOML" in res.output
    res = runner.invoke(app, ["agent", "run", "--model", "noop", "--task", str(tmp_path / "suite" / "bad")])
    assert res.exit_code == 2 and "malformed TOML" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["agent", "run", "--model", "noop", "--task", str(tmp_path / "suite" / "good"), "--json",
                              "--out", str(tmp_path / "run2")])
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert res.exit_code == 0 and rows[0]["status"] == "failed" and rows[0]["reward"] == 0.0


@pytest.mark.slow
def test_eval_episodes_reports_pass_at_k_over_episodes(tmp_path):
    from posttrain.models import char_tokenizer, save_model
    from tiny_models import agent_model

    save_model(agent_model(layers=1), char_tokenizer(), tmp_path / "m")
    out = tmp_path / "ev"
    res = runner.invoke(app, ["eval", "--model", str(tmp_path / "m"), "--suite", "agent:lookup",
                              "--limit", "3", "-n", "2", "-k", "1,2", "-t", "1.0", "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["n_tasks"] == 3 and summary["n_samples"] == 6 and "pass@2" in summary
    assert summary["episode_metrics"]["turns_per_episode"] >= 1
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 6 and json.loads(lines[0])["turns"]
