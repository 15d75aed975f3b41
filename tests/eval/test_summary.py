"""Suite summaries from records: errors kept apart, cost and latency, flips."""

from __future__ import annotations

import math

import pytest

from posttrain.eval.metrics import Price, pass_at_k
from posttrain.eval.records import SampleRecord
from posttrain.eval.summary import flip_rate, summarize


def rec(task, passed, sample=0, repeat=0, status="ok", tin=10, tout=5, lat=1.0):
    return SampleRecord(task_id=task, response="x", score=float(passed), passed=passed, status=status, sample=sample,
                        repeat=repeat, tokens_in=tin, tokens_out=tout, latency_s=lat)


def test_summary_figures():
    records = [rec("a", True, 0, lat=1.0), rec("a", False, 1, lat=3.0), rec("a", True, 2, lat=2.0),
               rec("b", False, 0, lat=4.0), rec("b", False, 1, status="error", lat=5.0),
               rec("c", False, 0, status="timeout"), ]
    s = summarize(records, ks=[1, 2], price=Price(input_per_mtok=1e5, output_per_mtok=2e5))
    assert s["n_tasks"] == 3 and s["n_tasks_unscored"] == 1 and s["n_errors"] == 2
    a, b, c = s["tasks"]
    assert (a["n"], a["c"], b["n"], b["c"], c["n"]) == (3, 2, 1, 0, 0)
    assert math.isnan(c["pass@1"]) and math.isnan(b["pass@2"])
    assert s["pass@1"] == pytest.approx((2 / 3 + 0) / 2)  # the unscored task has no estimate
    assert s["pass@2"] == pytest.approx(pass_at_k(3, 2, 2)) and s["pass@2_tasks"] == 1
    assert s["pass^2"] == pytest.approx(1 / 3)
    # cost: 6 responses x (10 in x 0.1 + 5 out x 0.2) = 6 x 2 = 12; two passing responses
    assert s["cost"] == pytest.approx(12.0) and s["cost_per_solved"] == pytest.approx(6.0)
    assert s["solved_per_cost"] == pytest.approx(2 / 12) and s["cost_per_task"] == pytest.approx(4.0)
    assert s["success_latency_p50"] == pytest.approx(1.5) and s["latency_p95"] > s["latency_p50"]
    assert s["seconds_per_solved"] == pytest.approx(16.0 / 2)
    assert s["status"] == {"ok": 4, "error": 1, "timeout": 1}
    lo, hi = s["pass@1_ci"]
    assert 0 <= lo <= s["pass@1"] <= hi <= 1


def test_flip_rate():
    assert flip_rate({0: {0: True}, 1: {0: True}}) == 0
    assert flip_rate({0: {0: True}, 1: {0: False}}) == 1
    assert flip_rate({0: {0: True}, 1: {0: False}, 2: {0: True}}) == pytest.approx(2 / 3)
    assert math.isnan(flip_rate({0: {0: True}}))
    s = summarize([rec("a", True, repeat=0), rec("a", False, repeat=1), rec("b", True, repeat=0), rec("b", True, repeat=1)])
    assert s["repeats"] == 2 and s["flaky_tasks"] == ["a"] and s["flip_rate"] == pytest.approx(0.5)
