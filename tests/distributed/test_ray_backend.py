"""Rollout workers as Ray actors on a local cluster: the same run as the in-process producers, acknowledged
weight versions, and a killed worker whose request is re-queued."""

from __future__ import annotations

import pytest
import torch

from posttrain.rl.trainer import Trainer
from posttrain.store import RunStore
from posttrain.wiring import default_backends

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a Ray cluster to start: the slow subset


def _with(cfg, **sections):
    update = {}
    for name, values in sections.items():
        section = getattr(cfg, name)
        update[name] = section.model_copy(update=values) if hasattr(section, "model_copy") else values
    return cfg.model_copy(update=update)


@pytest.fixture
def cfg(tiny_config):
    return _with(tiny_config, reward={"verifier": "numeric", "tolerance": 4.0}, eval={"every": 0})


def _train(cfg, name, on_step=None, **rollout):
    cfg = _with(cfg.model_copy(update={"name": name}), rollout=rollout)
    trainer = Trainer(cfg, on_step=on_step, backends=default_backends())
    trainer.run()
    trainer.close()
    return trainer, cfg


def test_ray_workers_at_staleness_zero_give_the_in_process_run(cfg, ray_cluster):
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the actor samples with one torch thread: the same float reductions
    try:
        local, _ = _train(cfg, "local", mode="async", max_staleness=0, producer_kind="thread")
        remote, remote_cfg = _train(cfg, "ray", mode="async", max_staleness=0, backend="ray")
    finally:
        torch.set_num_threads(before)
    for (k, a), (_, b) in zip(local.model.state_dict().items(), remote.model.state_dict().items()):
        assert torch.equal(a, b), k
    with RunStore(remote_cfg.path / "run.sqlite") as store:
        versions = sorted({r[0] for r in store.db.execute("SELECT policy_version FROM samples")})
    assert versions == list(range(cfg.train.steps))  # every step sampled with the version it acknowledged


def test_a_killed_ray_worker_has_its_request_requeued(cfg, ray_cluster):
    killed = []

    def kill(result):
        if result.step == 1:
            ray_cluster.kill(trainer_ref[0].async_loop.producers[0].runner.actor)
            killed.append(result.step)

    trainer_ref = []
    run_cfg = _with(cfg.model_copy(update={"name": "ray_fault"}), train={"steps": 4},
                    rollout={"mode": "async", "max_staleness": 1, "backend": "ray", "producers": 2})
    trainer = Trainer(run_cfg, on_step=kill, backends=default_backends())
    trainer_ref.append(trainer)
    with pytest.warns(UserWarning, match="rollout producer 0 failed"):
        trainer.run()
    trainer.close()
    assert killed
    with RunStore(run_cfg.path / "run.sqlite") as store:
        steps = store.steps()
        assert [s for s, _ in steps] == [1, 2, 3, 4]
        assert sum(m["producer_failures"] for _, m in steps) >= 1
        assert store.count("samples") == sum(int(m["groups_sampled"]) for _, m in steps) * run_cfg.sampling.n
        rows = list(store.db.execute("SELECT step, group_idx, COUNT(*) FROM groups GROUP BY step, group_idx"))
        assert all(c == 1 for _, _, c in rows)
        assert any(a["kind"] == "producer_failure" for a in store.alerts())


def test_a_ray_worker_adopts_weights_offered_during_a_rollout(cfg):
    """`on_new_weights = "update"` on Ray: weights offered while a rollout runs are loaded before the next engine
    call (the actor's body, run in this process), and the completions carry the new version."""
    from posttrain.distributed.ray_backend import RolloutWorker
    from posttrain.types import Task

    c = _with(cfg, rollout={"mode": "async", "backend": "ray", "on_new_weights": "update"})
    worker = RolloutWorker(c, 0, 0, 1)
    state = {k: v.detach().numpy().copy() for k, v in worker.engine.model.state_dict().items()}
    worker.offer(state, 7)
    groups = worker.run([Task("t", "1+2=", "3")], 2)
    assert {t.completion.policy_version for g in groups for t in g.trajectories} == {7}
    assert worker.version == 7
    plain = RolloutWorker(_with(cfg, rollout={"mode": "async", "backend": "ray"}), 0, 0, 1)
    plain.offer(state, 7)  # continue: an offer is never adopted mid-rollout
    assert {t.completion.policy_version for g in plain.run([Task("t", "1+2=", "3")], 2) for t in g.trajectories} == {0}


def test_update_mode_on_ray_keeps_the_staleness_bound(cfg, ray_cluster):
    trainer, run_cfg = _train(_with(cfg, train={"steps": 3}), "ray_update", mode="async", max_staleness=1,
                              backend="ray", on_new_weights="update")
    with RunStore(run_cfg.path / "run.sqlite") as store:
        steps = store.steps()
    assert [s for s, _ in steps] == [1, 2, 3] and all(m["staleness_max"] <= 1 for _, m in steps)
