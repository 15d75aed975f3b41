"""The quickstart's base model must not choose where to stop pre-training on the problems it is later evaluated on.

Covers: for the quickstart's own configuration (the CLI's overrides for a few seeds), the held-out
problems `builtin.pretrain_base` measures to decide when to stop (its band check) are disjoint, as
canonical problems (`a+b` and `b+a` are one problem), from the held-out problems the RL trainer
evaluates before and after GRPO. Were they shared, the base model's starting accuracy on the
evaluation set would be selected on that very set (stopped when it first looked good there), and
the before/after figures would be measured on problems that already steered the run.
Does not cover: training a real base model (a one-step pre-training of a 1-layer model stands in: the
stopping set depends on the task configuration and the seed, not on the model's size), nor the
train/held-out split itself (tests/tasks/test_split_properties.py).
"""

from __future__ import annotations

import pytest

from posttrain.config import load_config
from posttrain.eval.accuracy import AccuracyResult
from posttrain.recipes import builtin
from posttrain.rl.trainer import Trainer

SEEDS = (0, 1, 2)  # benchmarks/quickstart.py's default seeds


def _stopping_set(base_cfg, out_dir, monkeypatch) -> list:
    """The tasks pre-training's band check evaluates, captured from a one-step pre-training of a tiny model."""
    seen: list = []

    def capture(engine, tasks, verifier, max_tokens, **kw):
        seen.extend(tasks)
        return AccuracyResult(accuracy=1.0, n_tasks=len(tasks), n_samples=len(tasks), n_errors=0)  # in band: stop now

    monkeypatch.setattr(builtin, "evaluate_accuracy", capture)
    tiny = base_cfg.model_copy(update={"hidden_size": 16, "num_layers": 1, "intermediate_size": 32, "num_heads": 2,
                                       "batch_size": 4, "max_steps": 1, "eval_every": 1})  # fmt: skip
    builtin.pretrain_base(tiny, out_dir)
    assert seen, "pre-training never ran its held-out band check"
    return seen


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.slow
def test_base_stopping_set_is_disjoint_from_the_evaluation_problems(seed, tiny_model_dir, tmp_path, monkeypatch):
    # what `posttrain quickstart --seed S` configures (cli.py), with the tiny model standing in for the base path
    cfg = load_config(None, [f"seed={seed}", f"model.base.seed={seed}", f"model.path='{tiny_model_dir}'",
                             f"run_dir='{tmp_path / 'runs'}'", "tensorboard=false"])  # fmt: skip
    trainer = Trainer(cfg, overwrite=True)
    evaluation = trainer.held_out + trainer.reporting  # the selection half and the reporting half
    trainer.close()
    assert len(evaluation) == cfg.eval.size == 500
    stopping = _stopping_set(cfg.model.base, tmp_path / "base", monkeypatch)
    assert len(stopping) == cfg.model.base.eval_size
    shared = {t.meta["split_key"] for t in stopping} & {t.meta["split_key"] for t in evaluation}
    assert not shared, (
        f"seed {seed}: {len(shared)} of the base model's {len(stopping)} stopping-check problems are among the "
        f"{len(evaluation)} quickstart evaluation problems, e.g. {sorted(shared)[:3]}"
    )
