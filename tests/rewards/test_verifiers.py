import math

import pytest

from posttrain.rewards import ExactMatch, NumericMatch, SyncVerifier, extract_answer, safe_verify, verifier_id
from posttrain.types import Task, Verdict, VerdictStatus

T = Task(id="t", prompt="2+2=", answer="4")


def test_exact_match():
    v = ExactMatch()
    assert safe_verify(v, T, " 4 ").passed
    bad = safe_verify(v, T, "5")
    assert not bad.passed and bad.score == 0.0 and bad.status is VerdictStatus.OK
    assert "expected '4'" in bad.details


@pytest.mark.parametrize(
    "text,mode,expected",
    [
        ("so the answer is 1,234.5 apples", "last_number", "1234.5"),
        ("no digits", "last_number", None),
        (r"thus \boxed{\frac{1}{2}} done", "boxed", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{2}", "boxed", "2"),
        (r"\boxed{unclosed", "boxed", None),
        ("<think>x</think><answer> 42 </answer>", "tag", "42"),
        ("  spaced  ", "full", "spaced"),
    ],
)
def test_extraction(text, mode, expected):
    assert extract_answer(text, mode) == expected


def test_numeric_with_tolerance():
    v = NumericMatch(abs_tol=0.01)
    task = Task(id="pi", prompt="pi?", answer="3.14159")
    assert safe_verify(v, task, "about 3.14").passed  # |3.14159 - 3.14| = 0.0016 <= 0.01
    assert not safe_verify(NumericMatch(abs_tol=0.001), task, "about 3.14").passed
    assert not safe_verify(NumericMatch(), task, "3.2").passed
    assert safe_verify(NumericMatch(rel_tol=0.1), task, "3.3").passed
    per_task = Task(id="x", prompt="", answer="10", meta={"tolerance": 1.5})
    assert safe_verify(NumericMatch(), per_task, "11").passed


def test_numeric_garbage_is_a_wrong_answer_not_an_error():
    v = safe_verify(NumericMatch(), T, "\x00\ufffd<<garbage>> nan inf")
    assert v.status is VerdictStatus.OK and not v.passed


def test_raising_verifier_becomes_errored_verdict():
    class Broken(SyncVerifier):
        name = "broken"

        def verify(self, task, response):
            raise RuntimeError("boom")

    v = safe_verify(Broken(), T, "4")
    assert v.status is VerdictStatus.ERROR and not v.ok
    assert "RuntimeError: boom" in v.details
    assert v.verifier.startswith("broken@")


def test_verifier_returning_junk_is_errored():
    class Junk(SyncVerifier):
        name = "junk"

        def verify(self, task, response):
            return 1.0

    class NaN(SyncVerifier):
        name = "nan"

        def verify(self, task, response):
            return Verdict(score=math.nan, passed=False)

    assert safe_verify(Junk(), T, "x").status is VerdictStatus.ERROR
    assert safe_verify(NaN(), T, "x").status is VerdictStatus.ERROR


def test_missing_gold_answer_is_errored():
    v = safe_verify(ExactMatch(), Task(id="q", prompt="?"), "x")
    assert v.status is VerdictStatus.ERROR and "no gold answer" in v.details


def test_version_hash_tracks_parameters():
    assert verifier_id(ExactMatch()) == verifier_id(ExactMatch())
    assert verifier_id(ExactMatch()) != verifier_id(ExactMatch(case_sensitive=False))
    assert safe_verify(ExactMatch(), T, "4").verifier == verifier_id(ExactMatch())


def test_digit_match_gives_partial_credit_aligned_at_the_last_digit():
    from posttrain.rewards.verifiers import DigitMatch

    v, t = DigitMatch(), Task("m", "12*34=", "408")
    cases = {"408": (1.0, True), "418": (2 / 3, False), "48": (1 / 3, False), "4080": (0.0, False),
             "1408": (0.75, False), "the answer is 409": (2 / 3, False), "none": (0.0, False)}
    for response, (score, passed) in cases.items():
        verdict = v.verify(t, response)
        assert verdict.score == pytest.approx(score) and verdict.passed is passed, response
    assert verifier_id(DigitMatch()) != verifier_id(DigitMatch(extract="full"))


def test_digit_match_as_a_rubric_process_part_passes_only_exact_answers():
    from posttrain.rewards import build_verifier
    from posttrain.rewards.base import score_sync

    v = build_verifier({"type": "rubric", "parts": [{"verifier": "exact"},
                                                    {"verifier": "digits", "weight": 0.5, "role": "process"}]})
    right, near = score_sync(v, [Task("m", "12*34=", "408")] * 2, ["408", "418"])
    assert (right.score, right.passed) == (1.0, True)
    assert near.score == pytest.approx(0.5 * (2 / 3) / 1.5) and near.passed is False
