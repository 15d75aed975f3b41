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
    assert s.n_tasks == 3 and s.n_tasks_unscored == 1 and s.n_errors == 2
    a, b, c = s.tasks
    assert (a.n, a.c, b.n, b.c, c.n) == (3, 2, 1, 0, 0)
    assert math.isnan(c.pass_at[1]) and math.isnan(b.pass_at[2])
    assert s.pass_at[1].value == pytest.approx((2 / 3 + 0) / 2)  # the unscored task has no estimate
    assert s.pass_at[2].value == pytest.approx(pass_at_k(3, 2, 2)) and s.pass_at[2].n_tasks == 1
    assert s.pass_hat[2].value == pytest.approx(1 / 3)
    # cost: 6 responses x (10 in x 0.1 + 5 out x 0.2) = 6 x 2 = 12; two passing responses
    assert s.cost == pytest.approx(12.0) and s.cost_per_solved == pytest.approx(6.0)
    assert s.solved_per_cost == pytest.approx(2 / 12) and s.cost_per_task == pytest.approx(4.0)
    assert s.success_latency.p50 == pytest.approx(1.5) and s.latency.p95 > s.latency.p50
    assert s.seconds_per_solved == pytest.approx(16.0 / 2)
    assert s.status == {"ok": 4, "error": 1, "timeout": 1}
    lo, hi = s.pass_at[1].ci_low, s.pass_at[1].ci_high
    assert 0 <= lo <= s.pass_at[1].value <= hi <= 1


def test_flip_rate():
    assert flip_rate({0: {0: True}, 1: {0: True}}) == 0
    assert flip_rate({0: {0: True}, 1: {0: False}}) == 1
    assert flip_rate({0: {0: True}, 1: {0: False}, 2: {0: True}}) == pytest.approx(2 / 3)
    assert math.isnan(flip_rate({0: {0: True}}))
    s = summarize([rec("a", True, repeat=0), rec("a", False, repeat=1), rec("b", True, repeat=0), rec("b", True, repeat=1)])
    assert s.repeats == 2 and s.flaky_tasks == ["a"] and s.flip_rate == pytest.approx(0.5)


def _golden_records():
    """The records tests/eval/data/summary_golden.json was written from (by the dict-returning summarize)."""
    def r(task, passed, sample=0, repeat=0, status="ok", lat=1.0):
        return SampleRecord(task_id=task, response="x", score=float(passed), passed=passed, status=status, sample=sample,
                            repeat=repeat, tokens_in=10, tokens_out=5, latency_s=lat, verifier="exact@abc")

    one = [r("a", True, 0, lat=1.0), r("a", False, 1, lat=3.0), r("a", True, 2, lat=2.0), r("b", False, 0, lat=4.0),
           r("b", False, 1, status="error", lat=5.0), r("c", False, 0, status="timeout", lat=None), r("d", True, 0),
           r("d", True, 1)]
    outcomes = {"a": [[True, False], [False, False]], "b": [[True, True], [True, True]], "c": [[False, True], [True, True]]}
    repeats = [r(t, p, s, rep) for t, rows in outcomes.items() for rep, row in enumerate(rows) for s, p in enumerate(row)]
    return {
        "one_repeat": summarize(one, ks=[1, 2, 3], price=Price(input_per_mtok=1e5, output_per_mtok=2e5), task_order=["d", "a"]),
        "repeats": summarize(repeats, ks=[2], price=Price(per_hour=3.6)),
    }


def test_summary_json_is_unchanged_and_round_trips():
    """`to_dict` writes today's summary.json key for key and value for value; `from_dict` reads it back."""
    import json
    from pathlib import Path

    from posttrain.eval.records import EvalDir, clean_json
    from posttrain.eval.results import EvalSummary

    golden = json.loads((Path(__file__).parent / "data" / "summary_golden.json").read_text())
    for name, summary in _golden_records().items():
        written = clean_json(summary.to_dict())
        assert list(written) == list(golden[name]) and written == golden[name], name  # same keys, same order
        assert list(written["tasks"][0]) == list(golden[name]["tasks"][0])
        back = EvalSummary.from_dict(json.loads(json.dumps(written)))
        assert clean_json(back.to_dict()) == written
        assert back.ks == summary.ks and back.tasks[0].pass_at == summary.tasks[0].pass_at
        for k in summary.ks:
            assert back.pass_at[k].n_tasks == summary.pass_at[k].n_tasks
            assert back.pass_hat[k].n_tasks == summary.pass_hat[k].n_tasks  # rebuilt from pass@k's count
        assert back.mean_score.n_tasks == summary.mean_score.n_tasks
    one = _golden_records()["one_repeat"]
    assert math.isnan(one.pass_at[3].ci_low) and "flaky_tasks" not in one.to_dict()  # one repeat: no flip figures
    assert "tasks" not in one.to_dict(tasks=False)
    store = EvalDir(Path(__file__).parent / "data" / "no-such-eval")
    assert store.summary() is None


def test_a_stored_summary_reads_back(tmp_path):
    from posttrain.eval.records import EvalDir

    summary = _golden_records()["repeats"]
    store = EvalDir(tmp_path)
    store.write_summary(summary)
    back = store.summary()
    assert back is not None and back.flaky_tasks == summary.flaky_tasks == ["a", "c"]
    assert back.pass_at[2].value == summary.pass_at[2].value and back.latency == summary.latency
