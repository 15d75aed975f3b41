"""Colocated vLLM (tests/fake_vllm.py: the engine core in another process) sleeps around every update and wakes
with the new weights: the order of calls the core sees, through the trainer's own step."""

from __future__ import annotations

import pytest

from fake_vllm import FakeLLM
from posttrain.config import load_config
from posttrain.engine.remote.vllm_engine import VLLMEngine
from posttrain.rl.colocation import Colocation, colocated


def test_the_rule():
    on_gpu = ["engine.kind='vllm'", "rl.device='cuda'"]
    assert colocated(load_config(None, on_gpu))
    assert not colocated(load_config(None, [*on_gpu, "engine.sleep_level=0"]))
    assert not colocated(load_config(None, ["engine.kind='vllm'"]))  # the learner on the host: nothing to share
    assert not colocated(load_config(None, ["rl.device='cuda'", "engine.device='cuda'"]))  # local engine


@pytest.mark.slow
def test_the_trainer_sleeps_vllm_around_each_update_and_wakes_it_with_the_new_weights(fake_vllm, tiny_config,
                                                                                      monkeypatch):
    """Two trainer steps with vLLM colocated (the learner's device is the host here; the rule is forced on)."""
    from posttrain.rl.trainer import Trainer

    cfg = tiny_config.model_copy(update={"engine": tiny_config.engine.model_copy(update={"kind": "vllm"}),
                                         # the fake's completions all score alike: update on every group anyway
                                         "train": tiny_config.train.model_copy(update={"drop_zero_variance": False})})
    monkeypatch.setattr("posttrain.rl.colocation.colocated", lambda cfg: True)
    trainer = Trainer(cfg, overwrite=True)
    assert isinstance(trainer.engine, VLLMEngine) and trainer.colocation.active
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["enable_sleep_mode"] is True
    updates = []
    real_update = trainer.learner.update

    def update(batch):  # the learner runs while vLLM sleeps
        updates.append(trainer.engine.asleep)
        return real_update(batch)

    trainer.learner.update = update
    for _ in range(2):
        trainer.train_step()
    trainer.close()
    assert updates and all(updates)
    events = [e[0] if e[0] != "wake" else f"wake:{','.join(e[1] or ['all'])}" for e in llm.events()]
    # per step: generate (the rollouts) ... then sleep, [update], wake the weights, load them, wake the KV, reset
    loads = events.count("load") // 2  # buckets per sync
    step = ["generate", "sleep", "wake:weights", *["load"] * loads, "wake:kv_cache", "reset"]
    steps = [e for i, e in enumerate(events) if e != "generate" or (i + 1 < len(events) and events[i + 1] == "sleep")]
    assert steps == step * 2, events
    assert trainer.colocation.sleeps == len(updates)


@pytest.mark.slow
def test_level_zero_never_sleeps(fake_vllm, tiny_model_dir):
    engine = VLLMEngine(tiny_model_dir)
    with Colocation(engine, 0).updating():
        pass
    assert FakeLLM.instances[-1].events() == []
