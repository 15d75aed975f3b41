"""Rubric: weighted scores, pass rule, gates, error policy, concurrency, spec form and version hash."""

import asyncio
import time
from dataclasses import dataclass

import pytest

from posttrain.rewards import ExactMatch, Rubric, RubricPart, SyncVerifier, make_verifier, safe_verify, score_sync, verifier_id
from posttrain.types import Task, Verdict, VerdictStatus

T = Task(id="t", prompt="1/2 as a decimal?", answer="0.5")


@dataclass
class Fixed(SyncVerifier):
    value: float = 1.0
    passed: bool = True
    name: str = "fixed"

    def verify(self, task, response):
        return Verdict(self.value, self.passed, details="" if self.passed else "fixed failure")


class Raises(SyncVerifier):
    name = "raises"

    def verify(self, task, response):
        raise RuntimeError("judge down")


@dataclass
class Sleeps:
    seconds: float
    name: str = "sleeps"

    async def verify_batch(self, tasks, responses):
        await asyncio.sleep(self.seconds)
        return [Verdict(1.0, True) for _ in tasks]


def test_weighted_mean_and_breakdown():
    r = Rubric([RubricPart(Fixed(1.0), weight=3.0, name="answer"),
                RubricPart(Fixed(0.0, False), weight=1.0, role="process", name="fmt")])
    v = safe_verify(r, T, "x")
    assert v.ok and v.score == pytest.approx(0.75)
    assert v.breakdown == {"answer": 1.0, "fmt": 0.0}
    assert v.passed  # only outcome parts decide `passed`
    assert "fmt: fixed failure" in v.details


def test_failed_outcome_part_fails_the_verdict_and_threshold_applies():
    r = Rubric([RubricPart(Fixed(0.0, False)), RubricPart(Fixed(1.0), role="process")])
    assert not safe_verify(r, T, "x").passed
    strict = Rubric([RubricPart(Fixed(1.0)), RubricPart(Fixed(0.0, False), role="process")], pass_threshold=0.9)
    v = safe_verify(strict, T, "x")
    assert v.score == pytest.approx(0.5) and not v.passed


def test_gate_zeroes_the_score():
    r = Rubric([RubricPart(Fixed(1.0), weight=1.0),
                RubricPart(Fixed(0.0, False), weight=0.0, role="process", gate=True, name="tags")])
    v = safe_verify(r, T, "x")
    assert v.ok and v.score == 0.0 and not v.passed and "gate failed" in v.details


def test_required_part_error_makes_the_whole_verdict_an_error():
    r = Rubric([RubricPart(Fixed(1.0)), RubricPart(Raises())])
    v = safe_verify(r, T, "x")
    assert v.status is VerdictStatus.ERROR and v.score == 0.0 and not v.passed
    assert "judge down" in v.details and v.breakdown == {"fixed": 1.0}


def test_optional_part_error_is_left_out_and_weights_renormalise():
    r = Rubric([RubricPart(Fixed(0.5, True), weight=1.0), RubricPart(Raises(), weight=9.0, optional=True)])
    v = safe_verify(r, T, "x")
    assert v.ok and v.score == pytest.approx(0.5) and "optional, left out" in v.details


def test_all_optional_parts_failing_is_an_error():
    v = safe_verify(Rubric([RubricPart(Raises(), optional=True)]), T, "x")
    assert v.status is VerdictStatus.ERROR
    only_gate_left = Rubric([RubricPart(Raises(), optional=True), RubricPart(Fixed(1.0), weight=0.0, gate=True)])
    v = safe_verify(only_gate_left, T, "x")
    assert v.status is VerdictStatus.ERROR and "no weighted rubric part ran" in v.details


def test_part_timeout_is_a_timeout_verdict():
    r = Rubric([RubricPart(Fixed(1.0)), RubricPart(Sleeps(5.0))], part_timeout_s=0.05)
    v = safe_verify(r, T, "x")
    assert v.status is VerdictStatus.TIMEOUT


def test_parts_run_concurrently():
    r = Rubric([RubricPart(Sleeps(0.3), name="a"), RubricPart(Sleeps(0.3), name="b"), RubricPart(Sleeps(0.3), name="c")])
    start = time.perf_counter()
    verdicts = score_sync(r, [T] * 4, ["x"] * 4)
    assert time.perf_counter() - start < 0.8  # three 0.3 s parts, not 0.9 s in sequence
    assert all(v.ok and v.score == 1.0 for v in verdicts)


@dataclass
class SlowSync(SyncVerifier):
    seconds: float = 0.1
    name: str = "slow_sync"

    def verify(self, task, response):
        time.sleep(self.seconds)  # blocks its thread, as CPU-bound checking does
        return Verdict(1.0, True)


@dataclass
class Requests:
    """Four round trips one after another, as a judge under a concurrency limit makes them."""

    name: str = "requests"

    async def verify_batch(self, tasks, responses):
        for _ in range(4):
            await asyncio.sleep(0.1)
        return [Verdict(1.0, True) for _ in tasks]


def test_async_parts_overlap_blocking_sync_parts():
    r = Rubric([RubricPart(Requests(), name="io"), RubricPart(SlowSync(0.1), name="cpu"), RubricPart(Raises(), optional=True)])
    start = time.perf_counter()
    verdicts = score_sync(r, [T] * 4, ["x"] * 4)
    # 4 x 0.1 s round trips beside 4 x 0.1 s of blocking work: ~0.4 s, not 0.7+ s (round trips stalled by the block)
    assert time.perf_counter() - start < 0.65
    assert all(v.ok and v.score == 1.0 and set(v.breakdown) == {"io", "cpu"} for v in verdicts)


def test_spec_form_with_real_parts_and_duplicate_names():
    r = make_verifier(
        {
            "type": "rubric",
            "parts": [
                {"verifier": {"type": "math"}, "weight": 0.8},
                {"verifier": "tags", "weight": 0.1, "role": "process"},
                {"verifier": {"type": "tags", "tags": ["answer"], "allow_outside": True}, "weight": 0.1, "role": "process"},
            ],
        }
    )
    assert isinstance(r, Rubric)
    good = safe_verify(r, T, "<think>half</think><answer>\\frac{1}{2}</answer>")
    assert good.ok and good.passed and good.score == pytest.approx(1.0)
    assert set(good.breakdown) == {"math", "tags", "tags#2"}
    loose = safe_verify(r, T, "blah <answer>1/2</answer>")
    assert loose.passed and loose.score == pytest.approx(0.9)
    wrong = safe_verify(r, T, "<think>x</think><answer>0.6</answer>")
    assert not wrong.passed and wrong.score == pytest.approx(0.2)


@pytest.mark.parametrize(
    "spec,match",
    [
        ({"type": "rubric", "parts": []}, "at least one part"),
        ({"type": "rubric", "parts": [{"weight": 1.0}]}, "'verifier' key"),
        ({"type": "rubric", "parts": [{"verifier": "exact", "wieght": 1.0}]}, "unknown keys"),
        ({"type": "rubric", "parts": [{"verifier": "exact", "weight": -1.0}]}, "weight must be >= 0"),
        ({"type": "rubric", "parts": [{"verifier": "exact", "role": "vibes"}]}, "role"),
        ({"type": "rubric", "parts": [{"verifier": "nope"}]}, "unknown verifier 'nope'"),
        ({"type": "rubric", "parts": "exact"}, "must be a list"),
    ],
)
def test_bad_specs_are_clear_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        make_verifier(spec)


def test_version_hash_covers_parts_and_weights():
    def rubric(weight=1.0, tol=0.0):
        return make_verifier({"type": "rubric", "parts": [{"verifier": {"type": "numeric", "abs_tol": tol}, "weight": weight}]})

    assert verifier_id(rubric()) == verifier_id(rubric())  # stable (no object addresses in the hash)
    assert verifier_id(rubric()) != verifier_id(rubric(weight=2.0))
    assert verifier_id(rubric()) != verifier_id(rubric(tol=0.5))
    plain = Rubric([RubricPart(ExactMatch())])
    assert verifier_id(plain).startswith("rubric@")


def test_garbage_response_is_a_wrong_answer():
    r = make_verifier({"type": "rubric", "parts": [{"verifier": "math"}, {"verifier": "tags", "role": "process"}]})
    v = safe_verify(r, T, "\x00\ufffd}}{{<think><answer>")
    assert v.ok and v.score == 0.0 and not v.passed


@dataclass
class Finds(SyncVerifier):
    name: str = "finds"

    def verify(self, task, response):
        return Verdict(0.0, False, details="2/3 tests passed", info={"passed": 2, "total": 3})


def test_parts_structured_findings_are_kept_by_part_name():
    r = Rubric([RubricPart(Fixed(1.0), name="answer"), RubricPart(Finds(), name="tests")])
    v = safe_verify(r, T, "x")
    assert v.info == {"tests": {"passed": 2, "total": 3}}  # parts without findings add nothing
    assert "tests: 2/3 tests passed" in v.details
