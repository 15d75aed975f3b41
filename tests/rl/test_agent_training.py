"""Multi-turn RL through the trainer: a 5-step run on the agent:lookup domain with a tiny random model,
episodes in the store, per-turn metrics, and held-out episode success evaluated through the same rollouter."""

from __future__ import annotations

import json

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
        "train.steps=5", "train.prompts_per_step=2", "train.eval_size=8", "train.eval_every=5",
        "train.checkpoint_every=0", "train.drop_zero_variance=false", "tensorboard=false",
    ])


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
