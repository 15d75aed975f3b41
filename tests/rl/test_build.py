"""Building apart from looping: each section builds its component alone; several domains train in one run."""

from __future__ import annotations

import pytest

from posttrain.config import ConfigError, DomainConfig, EngineConfig, RewardConfig, load_config
from posttrain.engine import Engine
from posttrain.engine.build import build_engine
from posttrain.models import load_model
from posttrain.rl.build import build, build_domain, build_verifier
from posttrain.rl.trainer import Trainer
from posttrain.store import RunStore


def test_an_engine_and_a_verifier_from_their_sections_alone(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    engine = build_engine(EngineConfig(prefix_cache_tokens=0), model, tok, seed=3)
    assert isinstance(engine, Engine)
    verifier = build_verifier({"type": "numeric", "abs_tol": 1.0}, RewardConfig(max_response_chars=5))
    assert verifier.name.startswith("length_capped") or "numeric" in repr(verifier)
    with pytest.raises(ConfigError, match="unknown verifier 'nope'"):
        build_verifier("nope", RewardConfig())
    domain = build_domain(DomainConfig(source="arith:sub", options={"digits": 1}, weight=2.0), RewardConfig())
    assert domain.name == "arith:sub" and domain.weight == 2.0 and domain.held_out(5)


def test_build_gives_every_component(tiny_config):
    parts = build(tiny_config, store=False)
    assert parts.shares_weights and isinstance(parts.engine, Engine)
    assert parts.params.n == tiny_config.sampling.n and parts.held_out and parts.held_out[0].tasks
    assert parts.learner.importance_sampling is False  # the local engine samples with the learner's module


def test_domains_and_tasks_sugar_exclude_each_other():
    with pytest.raises(ConfigError, match="either as \\[\\[domains\\]\\]"):
        load_config(None, ["domains=[{source='arith:add'}]", "tasks.source='arith:sub'"])
    with pytest.raises(ConfigError, match="must be distinct"):
        load_config(None, ["domains=[{source='arith:add'}, {source='arith:add'}]"])


@pytest.mark.slow
def test_two_domains_train_in_one_run(tiny_config):
    cfg = load_config(None, [
        f"model.path='{tiny_config.model.path}'", f"run_dir='{tiny_config.run_dir}'", "name='mix'",
        "domains=[{source='arith:add', weight=3.0, options={digits=1}}, "
        "{source='arith:sub', name='sub', verifier={type='numeric', abs_tol=4.0}, options={digits=1}}]",
        "sampling.n=4", "sampling.max_tokens=4", "train.steps=3", "train.prompts_per_step=4",
        "train.drop_zero_variance=false", "eval.size=8", "train.checkpoint_every=0", "tensorboard=false",
    ])
    trainer = Trainer(cfg)
    trainer.run()
    trainer.close()
    with RunStore(cfg.path / "run.sqlite") as store:
        names = {n for _, n, _ in store.evals()}
        assert names == {"held_out", "held_out:sub"}
        ids = [r[0] for r in store.db.execute("SELECT task_id FROM groups")]
        assert len(ids) == 12
        info = store.info()
        assert [d["name"] for d in info["domains"]] == ["arith:add", "sub"]
        assert info["domains"][1]["verifier"].startswith("numeric@")
        verifiers = {r[0].split("@")[0] for r in store.db.execute("SELECT DISTINCT verifier FROM samples")}
        assert verifiers == {"exact", "numeric"}


def test_a_reduced_precision_engine_turns_importance_sampling_on(tiny_config):
    cfg = tiny_config.model_copy(update={"engine": tiny_config.engine.model_copy(update={"precision": "int8"})})
    parts = build(cfg, store=False)
    assert not parts.shares_weights and parts.learner.importance_sampling
