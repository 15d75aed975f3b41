"""`python_tests`: positive and negative cases, partial credit, test styles, programs, and infrastructure errors."""

from __future__ import annotations

import json

import pytest

from posttrain.rewards import PerTask, make_verifier, safe_verify, score_sync
from posttrain.rewards.code import PythonTests, build_program, parse_reports, strip_fences
from posttrain.sandbox import ExecResult, ExecStatus
from posttrain.types import Task, VerdictStatus

FAST = PythonTests(call_timeout_s=1.0, timeout_s=4.0)

ASSERTS = "assert candidate(3) == 9\nassert candidate(-2) == 4\nassert candidate(0) == 0\n"
SQ = Task("sq", "Write sq(x).", meta={"tests": ASSERTS, "entry_point": "sq"})


def test_correct_solution_scores_full_marks():
    v = safe_verify(FAST, SQ, "def sq(x):\n    return x * x\n")
    assert (v.status, v.score, v.passed) == (VerdictStatus.OK, 1.0, True)
    assert v.info["total"] == 3


def test_partial_credit_is_the_fraction_of_asserts_passed():
    v = safe_verify(FAST, SQ, "def sq(x):\n    return x * x if x > 0 else 4\n")
    assert v.ok and v.score == pytest.approx(2 / 3) and not v.passed
    assert [f["name"] for f in v.info["failures"]] == ["line 3"]


def test_wrong_and_broken_solutions_score_zero():
    for bad in ("def sq(x):\n    return x + 1\n", "def sq(x) return", "x = 1\n", ""):
        v = safe_verify(FAST, SQ, bad)
        assert v.ok and v.score == 0.0 and not v.passed, bad


def test_syntax_error_is_reported_as_load_error():
    v = safe_verify(FAST, SQ, "def sq(x)\n    return x")
    assert v.ok and v.score == 0.0
    assert "SyntaxError" in v.info["load_error"]


def test_setup_statements_run_in_order_and_a_broken_setup_fails_the_rest():
    tests = "xs = [candidate(i) for i in range(3)]\nassert xs == [0, 1, 4]\nassert candidate(5) == 25\n"
    task = Task("t", "p", meta={"tests": tests, "entry_point": "sq"})
    assert safe_verify(FAST, task, "def sq(x):\n    return x * x\n").score == 1.0
    v = safe_verify(FAST, task, "def sq(x):\n    raise ValueError('no')\n")
    assert v.ok and v.score == 0.0 and "set-up at line 1 failed" in v.info["failures"][0]["error"]


def test_humaneval_check_style_counts_as_one_test():
    tests = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n"
    task = Task("t", "p", meta={"tests": tests, "entry_point": "sq"})
    good = safe_verify(FAST, task, "def sq(x):\n    return x * x\n")
    half = safe_verify(FAST, task, "def sq(x):\n    return 4\n")
    assert (good.score, good.info["total"]) == (1.0, 1)
    assert (half.score, half.info["total"]) == (0.0, 1)


PYTEST_TESTS = """
import pytest
from solution import div, pair

def test_div():
    assert div(6, 3) == 2

def test_div_by_zero_raises():
    with pytest.raises(ZeroDivisionError):
        div(1, 0)

@pytest.mark.parametrize("a,b,expected", [(1, 2, (1, 2)), (3, 4, (3, 4))])
def test_pair(a, b, expected):
    assert pair(a, b) == expected

def test_approx():
    assert div(1, 3) == pytest.approx(0.3333333)

def helper():
    raise AssertionError("not a test")
"""


@pytest.mark.slow
def test_pytest_style_functions_parametrize_and_raises():
    task = Task("t", "p", meta={"tests": PYTEST_TESTS})
    good = "def div(a, b):\n    return a / b\n\ndef pair(a, b):\n    return (a, b)\n"
    v = safe_verify(FAST, task, good)
    assert v.score == 1.0 and v.info["total"] == 5
    # a list is not a tuple, and a swallowed exception is not a raise
    bad = "def div(a, b):\n    return a / b if b else 0\n\ndef pair(a, b):\n    return [a, b]\n"
    v = safe_verify(FAST, task, bad)
    assert v.score == pytest.approx(2 / 5)
    assert {f["name"] for f in v.info["failures"]} == {"test_div_by_zero_raises", "test_pair[0]", "test_pair[1]"}


def test_keyword_arguments_and_plain_data_types_cross_the_boundary():
    tests = ("assert candidate(b=2, a=1) == {'a': 1, 'b': (2,), 's': {3}, 'f': frozenset([4]), 'x': b'\\x00', 'c': 1j}\n"
             "assert type(candidate(a=1, b=2)['b']) is tuple\n")
    task = Task("t", "p", meta={"tests": tests, "entry_point": "f"})
    prog = "def f(a, b):\n    return {'a': a, 'b': (b,), 's': {3}, 'f': frozenset([4]), 'x': b'\\x00', 'c': 1j}\n"
    assert safe_verify(FAST, task, prog).score == 1.0


def test_solution_template_wraps_a_short_answer():
    task = Task("t", "p", meta={"tests": ASSERTS, "entry_point": "sq",
                                "solution_template": "def sq(x):\n    return {response}\n"})
    assert safe_verify(FAST, task, "x * x").score == 1.0
    assert safe_verify(FAST, task, "x + 1").score == 0.0


def test_completion_and_full_program_both_continue_a_prefix():
    prefix = ('from typing import List\n\n\ndef helper(x):\n    return x\n\n\n'
              'def sq(xs: List[int]) -> List[int]:\n    """Squares."""\n')
    task = Task("t", prefix, meta={"tests": "assert candidate([2, 3]) == [4, 9]\n", "entry_point": "sq",
                                   "program_prefix": prefix})
    completion = "    return [helper(x) * x for x in xs]\n"
    full = "```python\ndef sq(xs: List[int]) -> List[int]:\n    return [helper(x) ** 2 for x in xs]\n```\nDone."
    assert safe_verify(FAST, task, completion).score == 1.0
    assert safe_verify(FAST, task, full).score == 1.0
    assert build_program(task, completion) == prefix + completion


def test_prefix_without_body_gets_a_stub_before_a_full_program():
    prefix = "def sq(x):\n"
    task = Task("t", prefix, meta={"tests": ASSERTS, "entry_point": "sq", "program_prefix": prefix})
    assert safe_verify(FAST, task, "def sq(x):\n    return x * x\n").score == 1.0
    assert safe_verify(FAST, task, "    return x * x\n").score == 1.0


def test_strip_fences_prefers_the_block_with_the_entry_point():
    text = "Here:\n```\npip install x\n```\nand\n```python\ndef f():\n    return 1\n```\n"
    assert strip_fences(text, "def f") == "def f():\n    return 1\n"
    assert strip_fences("no fences", "def f") == "no fences"
    assert strip_fences("```py\ncut off") == "cut off"


def test_batch_keeps_order_and_mixes_kinds_of_tasks():
    tasks = [SQ, SQ, Task("t", "p", meta={"tests": "assert candidate('a') == 'A'", "entry_point": "up"})] * 3
    responses = ["def sq(x):\n    return x * x\n", "def sq(x):\n    return 0\n", "def up(s):\n    return s.upper()\n"] * 3
    verdicts = score_sync(PythonTests(batch_size=4, max_concurrency=2), tasks, responses)
    assert [v.passed for v in verdicts] == [True, False, True] * 3
    assert all(v.verifier.startswith("python_tests@") for v in verdicts)


def test_registered_kind_and_per_task_dispatch():
    v = make_verifier({"type": "python_tests", "call_timeout_s": 2.0})
    assert isinstance(v, PythonTests) and v.call_timeout_s == 2.0
    task = Task("t", "p", meta={"verifier": "python_tests", "tests": ASSERTS, "entry_point": "sq"})
    assert safe_verify(PerTask(), task, "def sq(x):\n    return x * x\n").score == 1.0


def test_broken_or_missing_tests_are_errors_not_zero():
    bad_tests = Task("t", "p", meta={"tests": "assert candidate(1) ==", "entry_point": "sq"})
    no_tests = Task("t", "p", meta={"entry_point": "sq"})
    no_asserts = Task("t", "p", meta={"tests": "x = 1\n", "entry_point": "sq"})
    for task in (bad_tests, no_tests, no_asserts):
        v = safe_verify(FAST, task, "def sq(x):\n    return x * x\n")
        assert v.status is VerdictStatus.ERROR, task


class _FailingSandbox:
    async def arun(self, *args, **kwargs):
        return ExecResult(ExecStatus.SANDBOX_ERROR, error="server crashed")


def test_sandbox_failure_is_an_error_verdict_never_a_zero():
    from posttrain.sandbox.sandboxes import LazySandbox, current_sandboxes, use_sandboxes

    with use_sandboxes(current_sandboxes().with_executor(_FailingSandbox())):
        verdicts = score_sync(FAST, [SQ, SQ], ["def sq(x):\n    return x * x\n"] * 2)
    assert all(v.status is VerdictStatus.ERROR and "server crashed" in v.details for v in verdicts)

    class Unavailable(LazySandbox):
        @property
        def sandbox(self):
            raise RuntimeError("no namespaces")

    with use_sandboxes(current_sandboxes().with_executor(Unavailable())):
        v = safe_verify(FAST, SQ, "def sq(x):\n    return x * x\n")
    assert v.status is VerdictStatus.ERROR and "sandbox unavailable" in v.details


def test_reports_without_the_nonce_are_ignored():
    out = 'PASS\nabc {"id": "0", "tests": [["t", true, ""]]}\nNONCE {"id": "1", "tests": []}\nNONCE DONE\n'
    assert list(parse_reports(out, "NONCE")) == ["1"]


def test_version_changes_with_the_harness(monkeypatch, tmp_path):
    import posttrain.rewards.code as code
    from posttrain.rewards import verifier_version

    before = verifier_version(FAST)
    fake = tmp_path / "h.py"
    fake.write_text("changed")
    monkeypatch.setattr(code, "HARNESS_PATH", fake)
    assert verifier_version(FAST) != before


def test_split_check_counts_each_assert_statement():
    tests = ("def check(candidate):\n    x = 3\n    assert candidate(x) == 9\n    for i in range(3):\n"
             "        assert candidate(i) == i * i\n    assert candidate(-2) == 4\n")
    task = Task("t", "p", meta={"tests": tests, "entry_point": "sq", "split_check": True})
    assert safe_verify(FAST, task, "def sq(x):\n    return x * x\n").score == 1.0
    v = safe_verify(FAST, task, "def sq(x):\n    return x * x if x >= 0 else 0\n")
    assert v.score == pytest.approx(2 / 3) and v.info["total"] == 3
    assert [f["name"] for f in v.info["failures"]] == ["check line 6"]
    # set-up inside check that fails takes the tests after it down, and only those
    tests = "def check(candidate):\n    assert candidate(1) == 1\n    y = candidate(0) + 'x'\n    assert candidate(2) == 4\n"
    task = Task("t", "p", meta={"tests": tests, "entry_point": "sq", "split_check": True})
    v = safe_verify(FAST, task, "def sq(x):\n    return x * x\n")
    assert v.score == 0.5 and "not reached: TypeError" in v.info["failures"][0]["error"]


def test_identical_responses_are_judged_once_and_share_the_verdict():
    from posttrain.sandbox.sandboxes import current_sandboxes, use_sandboxes

    runs = []
    real = current_sandboxes().executor

    class Counting:
        async def arun(self, *args, **kwargs):
            runs.append(json.loads(kwargs["stdin"])["items"])
            return await real.arun(*args, **kwargs)

    good, bad = "def sq(x):\n    return x * x\n", "def sq(x):\n    return -1\n"
    with use_sandboxes(current_sandboxes().with_executor(Counting())):
        verdicts = score_sync(FAST, [SQ] * 6, [good, bad, good, good, bad, good])
    assert [v.score for v in verdicts] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert sum(len(items) for items in runs) == 2
    assert verdicts[0] is not verdicts[2]


def test_a_large_module_level_table_does_not_break_loading():
    prog = "TABLE = list(range(2_000_000))\nSMALL = (1, 2)\ndef sq(x):\n    return TABLE[x] * TABLE[x] if x >= 0 else x * x\n"
    task = Task("t", "p", meta={"tests": ASSERTS + "assert SMALL == (1, 2)\n", "entry_point": "sq"})
    assert safe_verify(FAST, task, prog).score == 1.0


def test_a_batch_is_one_sandbox_execution_when_nothing_goes_wrong(sandbox_runs):
    """Guards the fast path: the harness cleans up between responses instead of falling back to one run each."""
    runs = sandbox_runs
    responses = [f"def sq(x):\n    return x * x + {i} * 0\n" for i in range(6)]
    verdicts = score_sync(PythonTests(max_concurrency=1), [SQ] * 6, responses)
    assert [v.score for v in verdicts] == [1.0] * 6 and runs == [6]


def test_details_are_a_short_text_and_info_the_structured_findings():
    v = safe_verify(FAST, SQ, "def sq(x):\n    return x * x if x > 0 else 4\n")
    assert v.details.startswith("2/3 tests passed; line 3: ") and "{" not in v.details
    assert v.info["passed"] == 2 and v.info["total"] == 3 and v.info["failures"][0]["error"]
    broken = safe_verify(FAST, SQ, "def sq(x)\n    return x")
    assert broken.details.startswith("0/3 tests passed; the program did not load: SyntaxError")
    assert "line 1:" not in broken.details and len(broken.info["failures"]) == 3  # said once; info keeps each
    tests = "".join(f"assert candidate({i}) == {i * i}\n" for i in range(1, 7))
    many = Task("m", "p", meta={"tests": tests, "entry_point": "sq"})
    v = safe_verify(FAST, many, "def sq(x):\n    return 0\n")
    assert v.details.startswith("0/6 tests passed;") and v.details.endswith("; 3 more failed")
    assert len(v.info["failures"]) == 6


def test_tests_text_without_a_total():
    from posttrain.rewards.code import tests_text

    assert tests_text({"passed": 0, "total": None, "failures": [], "error": "the harness ended"}) == \
        "0 tests passed; the harness ended"
