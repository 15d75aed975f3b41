"""Multi-turn RL through the trainer: a 5-step run on the agent:lookup domain with a tiny random model,
episodes in the store, per-turn metrics, and held-out episode success evaluated through the same rollouter."""

from __future__ import annotations

import json
import math

import pytest
import torch

from posttrain.config import load_config
from posttrain.models import char_tokenizer, save_model
from posttrain.rl.trainer import Trainer
from posttrain.store import RunStore
from tiny_models import agent_model


@pytest.fixture
def agent_config(tmp_path):
    torch.set_num_threads(1)  # restored after each test by tests/conftest.py's _torch_threads_restored
    save_model(agent_model(), char_tokenizer(), tmp_path / "tiny")
    return load_config(None, [
        f"model.path='{tmp_path / 'tiny'}'", f"run_dir='{tmp_path / 'runs'}'", "name='agent'",
        "tasks.source='agent:lookup'", "tasks.digits=2", "sampling.n=2", "sampling.max_tokens=80",
        "train.steps=5", "train.prompts_per_step=2", "eval.size=8", "eval.every=5",
        "train.checkpoint_every=0", "train.drop_zero_variance=false", "tensorboard=false",
    ])


@pytest.mark.slow
def test_five_multi_turn_steps_store_episodes_and_turn_metrics(agent_config):
    trainer = Trainer(agent_config)
    result = trainer.run()
    trainer.close()
    assert result.steps == 5 and "greedy_accuracy" in result.final_eval
    assert "agent/turns_per_episode" in result.final_eval  # the held-out evaluation ran episodes
    with RunStore(agent_config.path / "run.sqlite") as store:
        steps = store.steps()
        assert [s for s, _ in steps] == [1, 2, 3, 4, 5]
        m = steps[-1][1]
        for key in ("agent/turns_per_episode", "agent/tokens_per_turn", "agent/format_error_rate",
                    "agent/status/format_errors", "masked_groups", "optimizer_steps"):
            assert key in m, key
        assert sum(v for k, v in m.items() if k.startswith("agent/status/")) == pytest.approx(1.0)
        episodes = store.episodes(step=5, transcripts=True)
        assert len(episodes) == 4  # 2 tasks x 2 episodes
        t = episodes[0][1].transcript
        assert t["turns"] and json.dumps(t)
        assert store.eval_samples(limit=100)  # held-out episodes graded and stored
        # each multi-turn sample's last turn token by token; where the update trained on it, the learner's values
        used = {(s, g) for s, g, u in store.db.execute("SELECT step, group_idx, used FROM groups") if u}
        rows = [(s, r) for s in range(1, 6) for r in store.sample_tokens(s)]
        assert len(rows) == store.count("samples")
        trained = [r for s, r in rows if (s, r.group_idx) in used and any(r.loss_mask)]
        assert trained and all(not math.isnan(x) for r in trained for x, m in zip(r.learner_logp, r.loss_mask) if m)


def _agent_run(cfg, name, **rollout):
    from posttrain.config import RunConfig

    data = cfg.model_dump()
    data["name"] = name
    data["rollout"] = {**data["rollout"], **rollout}
    run_cfg = RunConfig.model_validate(data)
    trainer = Trainer(run_cfg)
    trainer.run()
    trainer.close()
    if trainer.async_loop is not None:  # each producer was asked after every rollout, over its own channel
        assert [f.message for p in trainer.async_loop.producers for f in p.sandbox_failures] == []
    with RunStore(run_cfg.path / "run.sqlite") as store:
        return store.steps(), [(s, row.task_id, row.status, row.reward) for s, row in store.episodes()]


@pytest.mark.slow
def test_async_agent_training_at_staleness_zero_is_the_synchronous_run(agent_config):
    sync_steps, sync_episodes = _agent_run(agent_config, "sync")
    async_steps, async_episodes = _agent_run(agent_config, "async", mode="async", max_staleness=0,
                                             producer_kind="thread")
    assert async_episodes == sync_episodes and len(async_episodes) == 5 * 4
    for (s1, m1), (s2, m2) in zip(sync_steps, async_steps):
        assert s1 == s2 and m1["loss"] == pytest.approx(m2["loss"]) and m1["reward"] == m2["reward"]
        assert m2["agent/turns_per_episode"] == m1["agent/turns_per_episode"] and "staleness_max" in m2


@pytest.mark.slow
def test_async_agent_training_in_producer_processes_stores_their_episodes(agent_config, tmp_path):
    steps, episodes = _agent_run(agent_config, "proc", mode="async", max_staleness=1, producer_kind="process")
    assert [s for s, _ in steps] == [1, 2, 3, 4, 5]
    assert all(m["staleness_max"] <= 1 and "agent/format_error_rate" in m for _, m in steps)
    assert len(episodes) == 5 * 4 and {s for s, *_ in episodes} == {1, 2, 3, 4, 5}
