"""One `[sandbox]` back end per run, passed in: every caller of a run (training episodes, in-training evaluation,
the quickstart's before/after episodes) opens its workspaces on the same `Sandboxes`; old `[rollout]` keys are
one-line errors; the back ends `rl/` needs are supplied, never loaded by name."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.aio import run_sync
from posttrain.config import ConfigError, load_config
from posttrain.errors import UserError
from posttrain.rl.backends import Backends, OneProcess, lead_first
from posttrain.sandbox.sandboxes import LazySandbox, Sandboxes, current_sandboxes, local_sandboxes, use_sandboxes


@pytest.mark.parametrize("old,new", [("sandbox_backend='ray'", "sandbox.backend"), ("sandbox_workers=3", "sandbox.workers"),
                                     ("sandbox_worker_cpus=0.5", "sandbox.worker_cpus"),
                                     ("sandbox_inflight=4", "sandbox.inflight")])
def test_the_old_rollout_keys_name_their_new_place_in_one_line(old, new):
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"rollout.{old}"])
    assert new in str(info.value) and "\n" not in str(info.value)
    assert load_config(None, [f"{new}={old.split('=')[1]}"]).sandbox.backend in ("local", "ray")


def test_the_dead_rollout_kind_knob_is_a_one_line_error():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["rollout.kind='single_turn'"])
    assert "kind was removed" in str(info.value) and "\n" not in str(info.value)
    assert "kind" not in load_config(None, []).rollout.model_dump()


def test_a_run_context_crosses_into_run_sync_threads_and_nowhere_else():
    mine = local_sandboxes()

    async def seen() -> Sandboxes:
        return current_sandboxes()

    async def inside_a_loop() -> Sandboxes:
        return run_sync(seen())  # a running loop: run_sync uses a worker thread

    with use_sandboxes(mine):
        assert asyncio.run(seen()) is mine and asyncio.run(inside_a_loop()) is mine
    assert current_sandboxes() is not mine  # outside the context: the process's default, never the run's
    assert not mine.executor.started  # nothing executed: nothing started
    mine.close()


def test_a_ray_backend_the_entry_point_did_not_supply_is_a_one_line_error(tiny_config):
    from posttrain.rl.build import build_sandboxes

    cfg = tiny_config.model_copy(update={"sandbox": tiny_config.sandbox.model_copy(update={"backend": "ray"})})
    with pytest.raises(UserError) as info:
        build_sandboxes(cfg, Backends())
    assert "default_backends" in str(info.value) and "\n" not in str(info.value)


def test_one_process_is_the_identity_data_parallel():
    dp = OneProcess()
    assert dp.lead and dp.world == 1 and dp.shard([1, 2, 3]) == [1, 2, 3] and dp.gather([1, 2], 2) == [1, 2]
    assert dp.all_equal(3.0) == (True, 0.0) and dp.gather_to_lead("x") == ["x"]
    assert lead_first(dp, lambda: 7) == 7


class _CountingPool:
    """A stand-in for the Ray sandbox workers: a local sandbox whose sessions and executions are counted."""

    def __init__(self) -> None:
        self.local = LazySandbox()
        self.sessions = 0
        self.runs = 0

    async def arun(self, *args, **kwargs):
        self.runs += 1
        return await self.local.arun(*args, **kwargs)

    def session(self, *args, **kwargs):
        self.sessions += 1
        return self.local.session(*args, **kwargs)

    async def asession(self, *args, **kwargs):
        self.sessions += 1
        return await self.local.asession(*args, **kwargs)

    async def in_worker(self, fn):
        return await self.local.in_worker(fn)


@pytest.mark.slow
def test_the_quickstart_measures_its_episodes_on_the_trainers_pool(tmp_path):
    """The bug this guards: with `sandbox.backend = "ray"` the trainer's agent episodes used the Ray pool and the
    quickstart's before/after episodes the local sandbox. Every phase must open its workspaces on the one pool."""
    from posttrain.recipes.quickstart import AGENT_OVERRIDES, run_quickstart

    pools: list[_CountingPool] = []

    def fake_ray(cfg) -> Sandboxes:
        pool = _CountingPool()
        pools.append(pool)
        return Sandboxes(pool, pool, "ray", closer=pool.local.close)

    tiny = ["model.base.hidden_size=16", "model.base.num_layers=1", "model.base.intermediate_size=32",
            "model.base.num_heads=2", "model.base.digits=1", "model.base.batch_size=4", "model.base.max_steps=2",
            "model.base.eval_every=2", "model.base.eval_size=16", "tasks.digits=1", "sampling.n=2", "train.steps=1",
            "train.prompts_per_step=2", "eval.size=6", "eval.every=0", "train.checkpoint_every=0",
            "train.drop_zero_variance=false", "tensorboard=false", "sandbox.backend='ray'",
            f"model.base.cache_dir='{tmp_path / 'cache'}'", f"run_dir='{tmp_path / 'runs'}'"]
    cfg = load_config(None, [*AGENT_OVERRIDES, *tiny])
    opened: dict[str, int] = {}

    def on_phase(msg: str) -> None:  # sessions opened on the pool when each phase starts
        if pools:
            opened[msg.split(" ")[0] + (" trained" if "trained" in msg else "")] = pools[0].sessions

    result = run_quickstart(cfg, pass1_samples=1, on_phase=on_phase, backends=Backends(ray_sandboxes=fake_ray))
    assert len(pools) == 1 and result.steps == 1  # one pool for the whole run
    before = opened["GRPO"] - opened["evaluating"]  # the base's before episodes
    training = opened["evaluating trained"] - opened["GRPO"]
    after = pools[0].sessions - opened["evaluating trained"]  # the trained model's after episodes
    assert before > 0 and training > 0 and after > 0, (opened, pools[0].sessions)
