"""Reward hygiene: the output-length cap before verification, latency percentiles, build_verifier from config."""

import pytest

from posttrain.rewards import (
    ExactMatch,
    LengthCapped,
    NumericMatch,
    PerTask,
    Rubric,
    build_verifier,
    score_sync,
    verifier_id,
    verifier_latency_metrics,
)
from posttrain.types import Task, Verdict, VerdictStatus

T = Task(id="t", prompt="2+2=", answer="4")


def test_over_long_responses_get_the_penalty_without_verification():
    calls = []

    class Counting(ExactMatch):
        def verify(self, task, response):
            calls.append(response)
            return super().verify(task, response)

    capped = LengthCapped(Counting(), max_chars=5, penalty=-0.5)
    out = score_sync(capped, [T, T, T], ["4", "4" + " " * 10, "5"])
    assert [o.score for o in out] == [1.0, -0.5, 0.0]
    assert out[1].ok and not out[1].passed and "over the 5-char cap" in out[1].details
    assert calls == ["4", "5"]  # the over-long one never reached the inner verifier
    assert all(o.latency_s is not None for o in out)


def test_cap_is_part_of_the_version_and_keeps_the_inner_name():
    a, b = LengthCapped(ExactMatch(), 100), LengthCapped(ExactMatch(), 200)
    assert a.name == "exact" and verifier_id(a) != verifier_id(b)
    with pytest.raises(ValueError, match=">= 1"):
        LengthCapped(ExactMatch(), 0)


def test_latency_metrics():
    verdicts = [Verdict(1.0, True, latency_s=x) for x in (0.1, 0.2, 0.3, 0.4, 1.0)]
    verdicts.append(Verdict(0.0, False, VerdictStatus.TIMEOUT, latency_s=None))
    m = verifier_latency_metrics(verdicts)
    assert m["verifier_latency_p50"] == pytest.approx(0.3)
    assert m["verifier_latency_p95"] == pytest.approx(0.4 + 0.6 * 0.8)  # numpy's linear interpolation
    assert m["verifier_latency_max"] == pytest.approx(1.0)
    assert m["verifier_timeouts"] == 1.0
    assert verifier_latency_metrics([]) == {"verifier_timeouts": 0.0}


def test_build_verifier_from_config_values():
    assert isinstance(build_verifier("exact"), ExactMatch)
    numeric = build_verifier("numeric", "full", 0.5)
    assert isinstance(numeric, NumericMatch) and numeric.extract == "last_number" and numeric.abs_tol == 0.5
    assert isinstance(build_verifier("per_task"), PerTask)
    rubric = build_verifier({"type": "rubric", "parts": [{"verifier": "math"}, {"verifier": "tags", "weight": 0.2}]})
    assert isinstance(rubric, Rubric)
    capped = build_verifier("exact", max_response_chars=10, over_length_score=-1.0)
    assert isinstance(capped, LengthCapped) and capped.penalty == -1.0
    with pytest.raises(ValueError, match="unknown verifier"):
        build_verifier("telepathy")
