"""Best-checkpoint selection and the early warning on scripted held-out series; `RUN` resolves to best/."""

from __future__ import annotations

import pytest

from posttrain.rl.selection import Best, observe


def _run(series, drop=0.05, patience=2):
    best, out = None, []
    for step, value in series:
        best, improved, warn = observe(best, step, value, drop, patience)
        out.append((best.step, improved, warn))
    return best, out


def test_best_is_the_highest_value_ties_to_the_later_step():
    best, trace = _run([(10, 0.4), (20, 0.6), (30, 0.5), (40, 0.6), (50, 0.55)])
    assert best == Best(40, 0.6, 0)
    assert [t[1] for t in trace] == [True, True, False, True, False]


def test_warning_needs_a_sustained_drop_beyond_the_margin():
    _, trace = _run([(1, 0.6), (2, 0.54), (3, 0.53), (4, 0.58), (5, 0.50), (6, 0.49), (7, 0.48)])
    # 0.54 and 0.53 are more than 0.05 below 0.6 twice in a row -> warn at step 3; 0.58 resets
    assert [t[2] for t in trace] == [False, False, True, False, False, True, True]
    _, trace = _run([(1, 0.6), (2, 0.56), (3, 0.56)])  # within the margin: never
    assert not any(t[2] for t in trace)


@pytest.mark.slow
def test_a_run_keeps_best_and_resolves_to_it(tiny_config):
    from posttrain.config import load_config
    from posttrain.resolve import resolve_model
    from posttrain.rl.trainer import Trainer
    from posttrain.store import RunStore

    cfg = load_config(None, [f"model.path='{tiny_config.model.path}'", f"run_dir='{tiny_config.run_dir}'",
                             "name='best'", "tasks.digits=1", "sampling.n=4", "sampling.max_tokens=4", "train.steps=4",
                             "train.prompts_per_step=4", "eval.every=1", "eval.size=10",
                             "train.checkpoint_every=0", "tensorboard=false", "reward.verifier='numeric'",
                             "reward.tolerance=4.0"])
    trainer = Trainer(cfg)
    trainer.run()
    trainer.final_model_dir()
    trainer.close()
    with RunStore(cfg.path / "run.sqlite") as store:
        accs = [(s, m["greedy_accuracy"]) for s, _, m in store.evals("held_out")]
        best = store.info()["best"]
    top = max(v for _, v in accs)
    assert best["value"] == top and best["step"] == max(s for s, v in accs if v == top)
    resolved = resolve_model(str(cfg.path))
    assert resolved.info["path"].endswith("best") and resolved.info["step"] == best["step"]
    assert "best/" in resolved.info["note"]

