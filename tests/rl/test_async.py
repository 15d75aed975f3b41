"""The asynchronous loop: staleness-0 identity with the synchronous loop, the staleness bound, the buffer's
accounting, importance weights by hand, weight-version acknowledgement, a dying producer, resume."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.rl.buffer import FinishedRollout, GroupBuffer, group_version
from posttrain.rl.losses import clipped_policy_loss, truncated_importance_weights
from posttrain.rl.trainer import Trainer
from posttrain.store import RunStore
from posttrain.types import Completion, FinishReason, Group, Task, Trajectory, Verdict, VerdictStatus

TIMING = ("rollout_s", "learn_s", "step_s", "verifier_latency_p50", "verifier_latency_p95", "verifier_latency_max")


def _with(cfg, **sections):
    update = {}
    for name, values in sections.items():
        section = getattr(cfg, name)
        update[name] = section.model_copy(update=values) if hasattr(section, "model_copy") else values
    return cfg.model_copy(update=update)


@pytest.fixture
def cfg(tiny_config):
    return _with(tiny_config, reward={"verifier": "numeric", "tolerance": 4.0}, train={"eval_every": 0})


def _train(cfg, name, **rollout):
    cfg = _with(cfg.model_copy(update={"name": name}), rollout=rollout)
    trainer = Trainer(cfg)
    trainer.run()
    trainer.close()
    return trainer, cfg


def _steps(cfg):
    with RunStore(cfg.path / "run.sqlite") as store:
        return store.steps(), store.count("samples")


def test_async_with_staleness_zero_is_the_synchronous_run(cfg):
    sync, sync_cfg = _train(cfg, "sync")
    asyn, async_cfg = _train(cfg, "async", mode="async", max_staleness=0, producer_kind="thread")
    for (k, a), (_, b) in zip(sync.model.state_dict().items(), asyn.model.state_dict().items()):
        assert torch.equal(a, b), k
    (s1, n1), (s2, n2) = _steps(sync_cfg), _steps(async_cfg)
    assert n1 == n2
    for (st1, m1), (st2, m2) in zip(s1, s2):
        assert st1 == st2
        assert {k: v for k, v in m1.items() if k not in TIMING} == {k: m2[k] for k in m1 if k not in TIMING}
        assert m2["staleness_max"] == 0 and m2["dropped_stale_groups"] == 0
