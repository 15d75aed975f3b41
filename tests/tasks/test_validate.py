"""`validate_suite`: gold answers through each suite's own verifier; failures are listed, never hidden."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from posttrain.rewards import SyncVerifier
from posttrain.tasks import TaskFileError
from posttrain.tasks.domains import load_domain
from posttrain.tasks.suites import Suite
from posttrain.tasks.validate import validate_suite
from posttrain.types import Task, Verdict


@pytest.mark.parametrize("family", ["add", "sub", "addsub", "mul", "chain"])
def test_builtin_generators_validate(family):
    report = validate_suite(load_domain(f"arith:{family}", limit=100).suite())
    assert report.ok and (report.passed, report.total) == (100, 100) and report.failures == []


@dataclass
class Evaluates(SyncVerifier):
    """Judges by the prompt itself (so a wrong gold answer fails), like a unit test would."""

    name: str = "evaluates"

    def verify(self, task, response):
        ok = response.strip() == str(eval(task.prompt.rstrip("=")))
        return Verdict(float(ok), ok)


def test_failures_and_missing_answers_are_listed():
    tasks = [Task("a", "1+1=", "2"), Task("b", "2+2=", "5"), Task("c", "3+3=")]
    report = validate_suite(Suite("s", tasks, Evaluates()))
    assert (report.passed, report.total, report.ok) == (1, 3, False)
    assert [(f.task_id, f.status) for f in report.failures] == [("b", "ok"), ("c", "no_answer")]
    d = report.to_dict()
    assert d["pass_rate"] == pytest.approx(1 / 3) and json.dumps(d)


def test_limit_takes_the_first_tasks():
    report = validate_suite(load_domain("arith:add", limit=50).suite(), limit=10)
    assert report.total == 10


def write_code_suite(tmp_path, gold_for_file: str = "def sq(x):\n    return x * x\n"):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sq.py").write_text("from solution import sq\n\ndef test_pos():\n    assert sq(3) == 9\n\n"
                                                  "def test_neg():\n    assert sq(-3) == 9\n")
    lines = [
        {"id": "inline", "prompt": "Write sq(x).", "answer": "def sq(x):\n    return x ** 2\n",
         "meta": {"verifier": "python_tests", "entry_point": "sq", "tests": "assert candidate(4) == 16\n"}},
        {"id": "file", "prompt": "Write sq(x).", "answer": gold_for_file,
         "meta": {"verifier": "python_tests", "tests_file": "tests/test_sq.py"}},
        {"id": "expr", "prompt": "sq as an expression in x", "answer": "x * x",
         "meta": {"verifier": "python_tests", "entry_point": "sq", "tests": "assert candidate(5) == 25\n",
                  "solution_template": "def sq(x):\n    return {response}\n"}},
        {"id": "num", "prompt": "2+2=", "answer": "4", "meta": {"verifier": "numeric"}},
    ]
    path = tmp_path / "code.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_jsonl_code_suite_with_inline_and_file_tests(tmp_path):
    report = validate_suite(load_domain(str(write_code_suite(tmp_path))).suite())
    assert report.ok and report.total == 4, [vars(f) for f in report.failures]


def test_jsonl_code_suite_with_a_wrong_gold_reports_partial_score(tmp_path):
    path = write_code_suite(tmp_path, gold_for_file="def sq(x):\n    return 9 if x == 3 else 0\n")
    report = validate_suite(load_domain(str(path)).suite())
    (fail,) = report.failures
    assert fail.task_id == "file" and fail.score == 0.5 and "test_neg" in fail.details


def test_missing_tests_file_is_a_load_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "p", "meta": {"tests_file": "nope.py"}}) + "\n")
    with pytest.raises(TaskFileError, match=r"bad.jsonl:1: tests_file 'nope.py'"):
        load_domain(str(path)).suite()
