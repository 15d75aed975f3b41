"""Sandbox executions on Ray actors (distributed/ray_sandbox.py) on the session's local cluster: the local pool's
results for the same programs, executions spread over two workers, a worker killed mid-batch losing no execution
and running none twice, a worker that cannot start answering SANDBOX_ERROR results, and a code-domain run whose
verification goes through the `[sandbox] backend = "ray"` switch with the same verdicts as a local run, and a
sandbox worker killed between training steps: rebuilt, counted in the step's metrics, kept in the run store's alerts."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time

import pytest

from posttrain.errors import UserError
from posttrain.sandbox import ExecStatus, Limits, SandboxPool

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a Ray cluster to start: the slow subset

# pass, fail, timeout, crash (a segfault), a shell command with stdin and an exit status, output past its limit
PROGRAMS = [
    {"code": "print(6 * 7)"},
    {"code": "import sys\nprint('no', file=sys.stderr)\nassert 1 == 2"},
    {"code": "import time\ntime.sleep(30)", "limits": Limits(wall_s=1.0, cpu_s=1.0)},
    {"code": "import ctypes\nctypes.string_at(0)"},
    {"command": "read x; echo got $x; exit 3", "stdin": "7\n"},
    {"code": "print('x' * 5000)", "limits": Limits(output_bytes=1000)},
]
SANDBOX = {"prefork": True, "preload": ("json",)}


def _seen(r):
    """What a caller can rely on: everything but timings, resource counts and degradation notes; of an output cut
    at its limit, that it was cut (how much got through before the kill, and how the task ended, is a race)."""
    if r.status is ExecStatus.OUTPUT_LIMIT:
        return (r.status, r.stdout_truncated or r.stderr_truncated, set(r.stdout) <= {"x", "\n"}, r.isolated)
    return (r.status, r.exit_code, r.signal, r.stdout, r.stderr, r.stdout_truncated, r.stderr_truncated, r.isolated)


def _pool(**kwargs):
    from posttrain.distributed.ray_sandbox import RaySandboxPool

    return RaySandboxPool(**{"workers": 2, "worker_cpus": 0.0, **SANDBOX, **kwargs})


def test_results_equal_the_local_pool(ray_cluster):
    with SandboxPool(max_concurrency=4, **SANDBOX) as local:
        expected = asyncio.run(local.map(PROGRAMS))
        with pytest.raises(ValueError, match="exactly one of"):
            asyncio.run(local.run())
    with _pool() as remote:
        got = asyncio.run(remote.map(PROGRAMS))
        with pytest.raises(ValueError, match="exactly one of"):  # a bad request raises as it does locally
            asyncio.run(remote.run())
        stats = remote.stats()
    assert [r.status for r in expected] == [ExecStatus.OK, ExecStatus.RUNTIME_ERROR, ExecStatus.TIMEOUT,
                                            ExecStatus.RUNTIME_ERROR, ExecStatus.RUNTIME_ERROR, ExecStatus.OUTPUT_LIMIT]
    assert expected[3].signal == 11 and expected[4].stdout == "got 7\n" and expected[4].exit_code == 3
    assert [_seen(r) for r in got] == [_seen(r) for r in expected]
    assert stats.calls == stats.results == len(PROGRAMS) + 1 and stats.worker_failures == 0


def test_executions_spread_over_two_workers(ray_cluster):
    with _pool(inflight=2) as pool:
        results = asyncio.run(pool.map([{"code": f"import time\ntime.sleep(0.3)\nprint({i})"} for i in range(12)]))
        stats, workers = pool.stats(), pool.worker_stats()
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
    assert sum(stats.per_worker) == 12 and min(stats.per_worker) >= 1
    assert [w["executed"] for w in workers] == stats.per_worker  # each worker ran what it delivered, once
    assert len({w["pid"] for w in workers}) == 2
    assert max(w["peak_inflight"] for w in workers) == 2  # backpressure: never more than `inflight` on a worker
    assert stats.inflight == [0, 0]


def test_a_caller_that_gives_up_frees_its_slot(ray_cluster):
    async def give_up(pool):
        with pytest.raises(TimeoutError):  # as `asyncio.wait_for` over the local pool
            await asyncio.wait_for(pool.run(code="import time\ntime.sleep(30)", limits=Limits(wall_s=4.0)), 1.0)
        return pool.stats().inflight, await pool.run(code="print('after')")

    with _pool(workers=1, inflight=1) as pool:
        inflight, after = asyncio.run(give_up(pool))
        for _ in range(100):  # the cancelled execution leaves the actor too (ray.cancel)
            if pool.worker_stats()[0]["inflight"] == 0:
                break
            time.sleep(0.1)
        assert pool.worker_stats()[0]["inflight"] == 0
    assert inflight == [0] and after.stdout == "after\n"


def test_a_killed_worker_loses_no_execution_and_runs_none_twice(ray_cluster):
    n = 16
    requests = [{"code": f"import time\ntime.sleep(1.0)\nprint({i})"} for i in range(n)]

    async def batch_with_a_kill(pool):
        runs = asyncio.gather(*(pool.run(**r) for r in requests))
        for _ in range(600):  # until worker 0 has executions in flight
            if pool.stats().inflight[0] > 0:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        killed = pool.actor(0)
        ray_cluster.kill(killed)
        return await runs, killed

    with _pool(inflight=4) as pool:
        with pytest.warns(RuntimeWarning, match="sandbox worker 0 died"):
            results, killed = asyncio.run(batch_with_a_kill(pool))
        stats, workers = pool.stats(), pool.worker_stats()
        assert pool.actor(0) is not killed  # rebuilt in place
    assert [r.status for r in results] == [ExecStatus.OK] * n
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(n)]  # every execution answered, each its own
    assert stats.calls == stats.results == sum(stats.per_worker) == n  # none lost, none answered twice
    assert stats.worker_failures == 1 and stats.resubmitted >= 1 and stats.gave_up == 0
    assert workers[1]["executed"] == stats.per_worker[1]  # the live worker ran each of its executions once
    assert workers[0]["executed"] <= stats.per_worker[0]


def test_a_worker_that_cannot_start_answers_sandbox_errors(ray_cluster):
    from posttrain.sandbox.launcher import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="did not start"):
        _pool(workers=1, not_a_sandbox_option=1)
    pool = _pool(workers=1, max_attempts=2, wait_ready=False, not_a_sandbox_option=1)
    try:
        with pytest.warns(RuntimeWarning, match="sandbox worker 0 died"):
            result = asyncio.run(pool.run(code="print(1)"))
    finally:
        pool.close()
    assert result.status is ExecStatus.SANDBOX_ERROR and "died on 2 attempts" in result.error
    assert pool.stats().gave_up == 1


def _code_cfg(tiny_config, name, sandbox=None, **rollout):
    return tiny_config.model_copy(update={
        "sandbox": tiny_config.sandbox.model_copy(update=sandbox or {}),
        "name": name,
        "tasks": tiny_config.tasks.model_copy(update={"source": "code:ops", "digits": 1, "options": {"max_ops": 1}}),
        "reward": tiny_config.reward.model_copy(update={"verifier": "per_task"}),
        "train": tiny_config.train.model_copy(update={"steps": 2}),
        "eval": tiny_config.eval.model_copy(update={"size": 8}),
        "rollout": tiny_config.rollout.model_copy(update=rollout),
    })


def _verdicts(cfg):
    with sqlite3.connect(cfg.path / "run.sqlite") as db:
        return list(db.execute("SELECT step, group_idx, sample_idx, completion, score, status, verifier, details "
                               "FROM samples ORDER BY step, group_idx, sample_idx"))


def test_code_training_verifies_through_the_ray_switch(tiny_config, ray_cluster):
    from posttrain.rl.trainer import Trainer
    from posttrain.wiring import default_backends

    runs = {}
    for name, sandbox in [("local", {}), ("ray", {"backend": "ray", "workers": 2, "worker_cpus": 0.0})]:
        cfg = _code_cfg(tiny_config, name, sandbox)
        trainer = Trainer(cfg, backends=default_backends())
        try:
            result = trainer.run()
            installed = trainer.parts.sandboxes if trainer.parts.sandboxes.backend == "ray" else None
            stats = installed.executor.stats() if installed is not None else None
        finally:
            trainer.close()
        assert result.steps == 2 and "greedy_accuracy" in result.final_eval
        runs[name] = (cfg, stats, result)
    assert runs["local"][1] is None
    stats = runs["ray"][1]
    assert stats.results > 0 and stats.calls == stats.results and stats.worker_failures == 0
    assert trainer.parts.sandboxes.closed  # the trainer's close closed its sandbox workers
    local, remote = _verdicts(runs["local"][0]), _verdicts(runs["ray"][0])
    assert remote and all(v.startswith("python_tests@") for *_, v, _ in remote)
    assert remote == local  # the same samples judged the same on the Ray workers
    assert runs["ray"][2].final_eval == runs["local"][2].final_eval


def test_a_sandbox_worker_killed_between_steps_is_in_the_step_metrics_and_the_store(tiny_config, ray_cluster):
    from posttrain.rl.trainer import Trainer
    from posttrain.store.run_store import RunStore
    from posttrain.wiring import default_backends

    cfg = _code_cfg(tiny_config, "ray_kill", {"backend": "ray", "workers": 2, "worker_cpus": 0.0})
    trainer = Trainer(cfg, backends=default_backends())
    try:
        first = trainer.train_step()
        killed = trainer.parts.sandboxes.executor.actor(0)
        ray_cluster.kill(killed)
        with pytest.warns(RuntimeWarning, match="sandbox worker 0 died"):
            second = trainer.train_step()
        stats = trainer.parts.sandboxes.executor.stats()
        third = trainer.train_step()
    finally:
        trainer.close()
    assert first.metrics["sandbox_worker_failures"] == 0.0
    assert second.metrics["sandbox_worker_failures"] == 1.0 and third.metrics["sandbox_worker_failures"] == 0.0
    assert stats.worker_failures == 1 and stats.gave_up == 0 and stats.calls == stats.results
    assert second.metrics["verifier_errors"] == 0  # every execution of the dead worker was answered by another
    alerts = [a for a in RunStore(cfg.path / "run.sqlite").alerts() if a["kind"] == "sandbox_worker_failure"]
    assert [(a["step"], a["origin"]) for a in alerts] == [(2, "learner")]
    assert "sandbox worker 0 died" in alerts[0]["message"]


def test_without_ray_the_switch_is_a_one_line_user_error(tiny_config, monkeypatch):
    from posttrain.rl.build import build_sandboxes
    from posttrain.wiring import default_backends

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(UserError) as info:
        build_sandboxes(_code_cfg(tiny_config, "noray", {"backend": "ray"}), default_backends())
    assert "posttrain[ray]" in str(info.value) and "\n" not in str(info.value)


def test_producer_processes_need_a_cluster_address(tiny_config):
    from posttrain.config import ConfigError
    from posttrain.rl.build import build_sandboxes
    from posttrain.sandbox.sandboxes import LazySandbox

    cfg = _code_cfg(tiny_config, "procs", {"backend": "ray"}, mode="async", producer_kind="process")
    with pytest.raises(ConfigError, match="ray_address"):
        build_sandboxes(cfg)
    plain = build_sandboxes(_code_cfg(tiny_config, "plain"))
    assert isinstance(plain.executor, LazySandbox) and not plain.executor.started  # the default starts nothing


def test_ray_rollout_workers_verify_on_their_own_sandbox_workers(tiny_config, ray_cluster):
    from posttrain.rl.trainer import Trainer
    from posttrain.store.run_store import RunStore
    from posttrain.wiring import default_backends

    cfg = _code_cfg(tiny_config, "ray_both", {"backend": "ray", "workers": 1, "worker_cpus": 0.0}, mode="async",
                    max_staleness=0, backend="ray")
    cfg = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"every": 0})})
    trainer = Trainer(cfg, backends=default_backends())
    try:
        result = trainer.run()
    finally:
        trainer.close()
    assert result.steps == 2
    rows = _verdicts(cfg)
    # judged inside the rollout actor, through the sandbox actors it built: no sandbox failure among them
    assert rows and all(v.startswith("python_tests@") for *_, v, _ in rows)
    assert {status for *_, status, _, _ in rows} == {"ok"}
    # the rollout actor was asked for its sandbox workers' deaths after every rollout: none, and none unreadable
    assert [f.message for p in trainer.async_loop.producers for f in p.sandbox_failures] == []
    with RunStore(cfg.path / "run.sqlite") as store:
        assert all(m["sandbox_worker_failures"] == 0 for _, m in store.steps())
