"""Evaluation during training: suites every K steps in the run store, per-task series, lost-task flags."""

from __future__ import annotations

import pytest

from posttrain.eval.training import new_failures, regression_flags, task_series
from posttrain.store.run_store import RunStore


def test_series_and_flags(tmp_path):
    with RunStore(tmp_path / "run.sqlite") as store:
        store.log_eval(10, "suite:x", {"pass@1": 0.5}, {"a": 1.0, "b": 0.0, "c": 1.0})
        store.log_eval(20, "suite:x", {"pass@1": 1.0}, {"a": 1.0, "b": 1.0, "c": 1.0})
        assert new_failures(store, "suite:x", {"a": 0.0, "b": 1.0, "c": 1.0}, 30) == ["a"]
        store.log_eval(30, "suite:x", {"pass@1": 0.67}, {"a": 0.0, "b": 1.0, "c": 1.0})
        store.log_eval(30, "held_out", {"greedy_accuracy": 1.0}, {"q": 1.0})
        series = task_series(store)
        assert series["suite:x"]["a"] == [(10, 1.0), (20, 1.0), (30, 0.0)] and series["held_out"]["q"] == [(30, 1.0)]
        flags = regression_flags(store)
        assert [(f["task_id"], f["best_step"], f["step"]) for f in flags] == [("a", 20, 30)]
        store.truncate_after(20)  # a resume drops the later evaluation and its flags
        assert regression_flags(store) == []


@pytest.mark.slow
def test_trainer_evaluates_suites_every_k_steps(tiny_config, jsonl_suite):
    from posttrain.rl.trainer import Trainer

    cfg = tiny_config.model_copy(deep=True)
    cfg.train.steps, cfg.eval.every, cfg.eval.suites = 2, 1, [str(jsonl_suite)]
    trainer = Trainer(cfg)
    try:
        result = trainer.run()
        name = f"suite:{jsonl_suite}"
        assert f"{name}/pass@1" in result.final_eval and f"{name}/regressed_tasks" in result.final_eval
        evals = trainer.store.evals(name)
        assert [s for s, _, _ in evals] == [0, 1, 2] and "pass@1" in evals[0][2]  # step 0: the initial model
        assert set(task_series(trainer.store)[name]) == {f"t{i:02d}" for i in range(20)}
        assert len(trainer.store.eval_samples(name, step=2)) == 20
        assert "regressed_tasks" in trainer.store.evals("held_out")[0][2]
    finally:
        trainer.close()


@pytest.mark.slow
def test_eval_at_start_is_the_initial_model_and_can_be_turned_off(tiny_config):
    from posttrain.rl.trainer import Trainer

    for at_start, steps in ((True, [0, 2]), (False, [2])):
        cfg = tiny_config.model_copy(deep=True)
        cfg.name = f"start-{at_start}"
        cfg.train.steps, cfg.eval.every, cfg.eval.at_start = 2, 2, at_start
        trainer = Trainer(cfg)
        try:
            trainer.run()
            assert [s for s, _, _ in trainer.store.evals("held_out")] == steps
            assert trainer.best is not None and trainer.best.step in steps
        finally:
            trainer.close()
