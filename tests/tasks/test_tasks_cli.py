"""`posttrain tasks list / validate` through typer's CliRunner: output, JSON and exit codes."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from posttrain.cli import app

runner = CliRunner()


def test_list_shows_builtin_and_humaneval():
    r = runner.invoke(app, ["tasks", "list"])
    assert r.exit_code == 0 and "humaneval" in r.output and "arith:<name>" in r.output
    names = [s["name"] for s in json.loads(runner.invoke(app, ["tasks", "list", "--json"]).output)["suites"]]
    assert "humaneval" in names and "arith:<name>" in names


def test_validate_builtin_generator_json():
    r = runner.invoke(app, ["tasks", "validate", "arith:add", "--limit", "40", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert (d["suite"], d["total"], d["passed"], d["ok"]) == ("arith:add", 40, 40, True)


def test_validate_humaneval_summary():
    r = runner.invoke(app, ["tasks", "validate", "humaneval", "--limit", "3"])
    assert r.exit_code == 0, r.output
    assert "humaneval: 3/3 gold answers score full marks (100.0%)" in r.output


def test_failing_gold_prints_each_failure_and_exits_1(tmp_path):
    path = tmp_path / "s.jsonl"
    meta = {"verifier": "python_tests", "entry_point": "sq", "tests": "assert candidate(3) == 9\n"}
    path.write_text(json.dumps({"id": "bad", "prompt": "sq", "answer": "def sq(x):\n    return 0\n", "meta": meta}) + "\n"
                    + json.dumps({"id": "good", "prompt": "1+1=", "answer": "2"}) + "\n")
    r = runner.invoke(app, ["tasks", "validate", str(path)])
    assert r.exit_code == 1
    assert "FAIL bad: score 0.000 [ok]" in r.output and "s: 1/2 gold answers" in r.output
    d = json.loads(runner.invoke(app, ["tasks", "validate", str(path), "--json"]).output)
    assert [f["task_id"] for f in d["failures"]] == ["bad"] and d["passed"] == 1


def test_unknown_suite_is_a_one_line_error():
    r = runner.invoke(app, ["tasks", "validate", "no-such-suite"])
    assert r.exit_code == 2 and "unknown domain 'no-such-suite'" in r.output and "Traceback" not in r.output
