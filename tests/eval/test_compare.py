"""`compare`: identical runs pass the gate, a planted regression is found, the exit code gates CI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.eval.compare import compare
from posttrain.eval.records import EvalDir, SampleRecord, load_eval
from posttrain.eval.stats import mcnemar_exact

runner = CliRunner()
N_TASKS = 164


def _write_eval(path, passed: np.ndarray, suite="synthetic", model="m", latency=1.0, prices=None):
    """passed: [tasks, samples] booleans."""
    d = EvalDir(path)
    d.start({"model": model, "label": path.name, "suite": suite, "ks": [1], "prices": prices or {}},
            [{"id": f"T/{i}", "prompt": f"p{i}", "answer": ""} for i in range(passed.shape[0])])
    d.rewrite(SampleRecord(task_id=f"T/{i}", response="r", score=float(p), passed=bool(p), sample=j, tokens_in=100,
                           tokens_out=50, latency_s=latency) for i, row in enumerate(passed) for j, p in enumerate(row))
    return path


def _planted(tmp_path):
    rng = np.random.default_rng(0)
    rates = rng.beta(2, 2, N_TASKS)
    planted = sorted(rng.choice(np.flatnonzero(rates > 0.6), 10, replace=False).tolist())
    a = rng.random((N_TASKS, 20)) < rates[:, None]
    b_rates = rates.copy()
    b_rates[planted] = 0.05
    b = rng.random((N_TASKS, 20)) < b_rates[:, None]
    return _write_eval(tmp_path / "A", a), _write_eval(tmp_path / "B", b), {f"T/{i}" for i in planted}


@pytest.mark.slow
def test_planted_regression_of_10_tasks_out_of_164_is_found(tmp_path):
    a, b, planted = _planted(tmp_path)
    c = compare(load_eval(a), load_eval(b))
    assert {t.task_id for t in c.regressed} == planted
    assert c.improved == [] and c.regression and c.n_paired == N_TASKS
    assert c.diff.hi < 0 and c.mcnemar is None  # 20 samples per task: Fisher per task, no McNemar
    res = runner.invoke(app, ["compare", str(a), str(b), "--json"])
    assert res.exit_code == 1, res.output
    assert {t["task_id"] for t in json.loads(res.stdout)["regressed"]} == planted
    text = runner.invoke(app, ["compare", str(a), str(b)])
    assert text.exit_code == 1 and "REGRESSION" in text.output and "accuracy vs cost" in text.output


@pytest.mark.slow
def test_identical_runs_report_no_regression(tmp_path):
    a, _, _ = _planted(tmp_path)
    c = compare(load_eval(a), load_eval(a))
    assert not c.regression and c.regressed == [] and c.improved == [] and c.diff.mean == 0
    res = runner.invoke(app, ["compare", str(a), str(a)])
    assert res.exit_code == 0 and "no significant regression" in res.output


def test_single_sample_runs_use_mcnemar(tmp_path):
    rng = np.random.default_rng(1)
    a = rng.random((N_TASKS, 1)) < 0.7
    b = a.copy()
    lost = np.flatnonzero(a[:, 0])[:20]
    gained = np.flatnonzero(~a[:, 0])[:3]
    b[lost, 0], b[gained, 0] = False, True
    c = compare(load_eval(_write_eval(tmp_path / "A", a)), load_eval(_write_eval(tmp_path / "B", b)))
    assert c.mcnemar == {"a_only": 20, "b_only": 3, "p": mcnemar_exact(20, 3)}
    assert c.mcnemar["p"] < 0.01 and c.regression and c.regressed == []  # one sample per task: no per-task power
    up = compare(load_eval(tmp_path / "B"), load_eval(tmp_path / "A"))
    assert not up.regression  # the same change read as an improvement


def test_cost_and_latency_view(tmp_path):
    rng = np.random.default_rng(2)
    a = rng.random((50, 4)) < 0.8
    b = rng.random((50, 4)) < 0.78
    pa = {"default": {"input_per_mtok": 10.0, "output_per_mtok": 30.0}}
    pb = {"default": {"input_per_mtok": 1.0, "output_per_mtok": 3.0}}
    ra = load_eval(_write_eval(tmp_path / "std", a, latency=2.0, prices=pa))
    rb = load_eval(_write_eval(tmp_path / "fast", b, latency=0.5, prices=pb))
    from posttrain.pricing import price_of

    c = compare(ra, rb, prices=(price_of(ra.meta), price_of(rb.meta)))
    assert c.sides["A"]["cost"] == pytest.approx(200 * (100 * 10 + 50 * 30) / 1e6)
    assert c.sides["B"]["cost"] == pytest.approx(c.sides["A"]["cost"] / 10)
    assert c.sides["B"]["latency_p50"] == 0.5 and c.sides["A"]["latency_p50"] == 2.0
    assert c.sides["B"]["solved_per_cost"] > 5 * c.sides["A"]["solved_per_cost"]


def test_suite_mismatch_is_a_user_error(tmp_path):
    a = _write_eval(tmp_path / "A", np.ones((3, 1), bool))
    b = _write_eval(tmp_path / "B", np.ones((3, 1), bool), suite="other")
    res = runner.invoke(app, ["compare", str(a), str(b)])
    assert res.exit_code == 2 and "suite" in res.output
    res = runner.invoke(app, ["compare", str(a), str(tmp_path / "missing")])
    assert res.exit_code == 2 and "not an evaluation directory" in res.output
