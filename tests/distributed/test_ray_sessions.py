"""Agent workspaces on Ray sandbox workers (distributed/ray_sandbox.py: `RaySession`) on the session's local cluster:
fork isolation on the parent's worker and sessions spread by open sessions; agent episodes on Ray sessions giving
the local sandbox's transcripts and verdicts (lookup and demo tasks, a Harbor terminal task); a killed worker
giving env_error episodes (masked, never scored 0), its sessions counted lost and new ones opened on the rebuilt
worker; and the `[sandbox] backend = "ray"` switch routing an agent domain's training episodes to the Ray
workers."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.sandbox import ExecStatus, Limits, Sandbox, SandboxError, SessionLost

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a Ray cluster to start: the slow subset

WRITE_HELLO = '<tool_call>{"name": "write_file", "arguments": {"path": "hello.txt", "content": "hello world\\n"}}</tool_call>'
FAST = Limits(wall_s=10, cpu_s=10, memory_mb=256, pids=64, output_bytes=1 << 20, disk_mb=32)


def _pool(**kwargs):
    from posttrain.distributed.ray_sandbox import RaySandboxPool

    return RaySandboxPool(**{"workers": 2, "worker_cpus": 0.0, "limits": FAST, **kwargs})


def test_forks_live_on_their_parents_worker_isolated(ray_cluster):
    with _pool() as pool:
        template = pool.session(files={"a.txt": "1"})
        other = pool.session()  # least-loaded by open sessions: the other worker
        forks = [template.fork() for _ in range(2)]
        assert template.worker != other.worker and {f.worker for f in forks} == {template.worker}
        assert [f.parent_id for f in forks] == [template.id] * 2 and template.limits == FAST
        forks[0].write_file("a.txt", "fork0")
        assert forks[0].exec("cat a.txt").stdout == "fork0"
        assert forks[1].read_file("a.txt") == b"1" and template.read_file("a.txt") == b"1"  # invisible elsewhere
        snap = forks[1].snapshot()
        forks[1].write_file("b.txt", "x")
        forks[1].rollback(snap)
        assert forks[1].exec("ls").stdout.split() == ["a.txt"]
        with pytest.raises(SandboxError):  # the worker's SandboxError, raised here as the local session raises it
            forks[1].read_file("missing.txt")
        template.close()  # the forks keep the layers they read
        assert forks[0].read_file("a.txt") == b"fork0" and forks[1].read_file("a.txt") == b"1"
        with pytest.raises(SandboxError, match="closed"):
            template.fork()
        stats, workers = pool.stats(), pool.worker_stats()
        assert stats.sessions_opened == 4 and stats.sessions_closed == 1 and stats.sessions_lost == 0
        assert sorted(stats.sessions) == [1, 2] and [w["sessions"] for w in workers] == stats.sessions
        for s in [*forks, other]:
            s.close()
        assert pool.stats().sessions == [0, 0] and [w["sessions"] for w in pool.worker_stats()] == [0, 0]


def test_sessions_spread_by_open_sessions_and_wait_for_room(ray_cluster):
    async def spread(pool):
        sessions = await asyncio.gather(*(pool.asession() for _ in range(4)))
        counts = pool.stats().sessions
        results = await asyncio.gather(*(s.aexec("sleep 0.3; echo $((1 + 1))") for s in sessions))
        await asyncio.gather(*(s.aclose() for s in sessions))
        return sessions, counts, results

    with _pool(inflight=1) as pool:
        sessions, counts, results = asyncio.run(spread(pool))
        workers = pool.worker_stats()
    assert counts == [2, 2] and sorted(s.worker for s in sessions) == [0, 0, 1, 1]
    assert [r.stdout for r in results] == ["2\n"] * 4
    assert [w["peak_inflight"] for w in workers] == [1, 1]  # backpressure: one call at a time on each worker


def _transcript(ep):
    v = ep.verdict
    return (ep.status, ep.error, ep.submitted, [(t.completion.text, t.observation, t.format_error) for t in ep.turns],
            None if v is None else (v.score, v.passed, v.status, v.verifier, v.details))


def test_agent_episodes_on_ray_sessions_are_the_local_ones(ray_cluster):
    from posttrain.agent.demo import demo_tasks
    from posttrain.agent.lookup import SPEC, LookupSource, agent_task_of, oracle_calls
    from posttrain.agent.rollouter import AgentRollouter
    from posttrain.agent.runtime import run_agent_task
    from posttrain.agent.scripted import ScriptedAgent, call
    from posttrain.agent.spec import AgentSpec
    from posttrain.agent.terminal import solution_tool
    from posttrain.agent.tools import default_tools
    from posttrain.engine.mock import MockEngine
    from posttrain.models.tokenizer import char_tokenizer
    from posttrain.sandbox.sandboxes import Sandboxes, use_sandboxes
    from posttrain.tasks.harbor import TerminalTask
    from posttrain.tasks.terminal import TerminalVerifier, as_task

    lookups = LookupSource(hops=2).take(2, "train", seed=0)
    hello = TerminalTask("hello", "Write hello world to /app/hello.txt.", {"README": b"hi\n"},  # a Harbor task
                         {"test.sh": b"grep -qx 'hello world' /app/hello.txt && echo 1 > /logs/verifier/reward.txt\n"},
                         "echo 'hello world' > /app/hello.txt\n", agent_timeout_s=30, verifier_timeout_s=30, memory_mb=256)
    demos = {t.id: t for t in demo_tasks()}

    def script(prompt):  # solve hello-file (its hidden test runs in the workspace), give up on the rest
        text = char_tokenizer().decode(prompt)
        if "hello.txt" in text and "wrote 12 bytes" not in text:
            return WRITE_HELLO
        return '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'

    async def episodes(sandbox):
        solo = [await run_agent_task(ScriptedAgent([c for c, _ in oracle_calls(t)]), agent_task_of(t), None, 8,
                                     sandbox=sandbox, system=SPEC.system, tool_listing=SPEC.tool_listing)
                for t in lookups]
        rollouter = AgentRollouter(MockEngine(script, tokenizer=char_tokenizer()), sandbox,
                                   AgentSpec(lambda task: demos[task.id], max_steps=4))
        groups = await rollouter.run([t.to_task() for t in demo_tasks()], n=2)  # forks of one template per group
        oracle = ScriptedAgent([call("run_solution"), call("bash", command="cat /app/hello.txt")])
        terminal = await run_agent_task(oracle, hello, [*default_tools(), solution_tool(hello)], sandbox=sandbox)
        return solo + [ep for g in groups for ep in g.episodes] + [terminal]

    def judged():  # the terminal domain's single-response verifier, on wherever the run's sessions open
        responses = [hello.solution, ""]
        return [(v.score, v.passed, v.status) for v in
                asyncio.run(TerminalVerifier().verify_batch([as_task(hello, "t")] * 2, responses))]

    with Sandbox(FAST) as local:
        expected = asyncio.run(episodes(local))
    verdicts = judged()
    with _pool() as pool:
        got = asyncio.run(episodes(pool))
        stats, workers = pool.stats(), pool.worker_stats()
        with use_sandboxes(Sandboxes(pool, pool, "ray")):
            assert judged() == verdicts and verdicts[0][1] and not verdicts[1][1]
        judging = pool.stats()
    assert [ep.passed for ep in expected[:2]] == [True, True] and any(ep.passed for ep in expected[2:-1])
    assert expected[-1].passed and "hello world" in expected[-1].turns[-2].observation
    assert [_transcript(ep) for ep in got] == [_transcript(ep) for ep in expected]
    groups = len(demo_tasks())
    assert stats.sessions_opened == 3 + 3 * groups  # an episode each, a template and its 2 forks per group
    assert stats.sessions_closed == stats.sessions_opened and stats.sessions == [0, 0] and stats.sessions_lost == 0
    assert min(stats.sessions_per_worker) >= 1 and sum(w["sessions_opened"] for w in workers) == stats.sessions_opened
    assert judging.sessions_opened == stats.sessions_opened + 2 and judging.sessions == [0, 0]  # one per response


def test_a_killed_worker_gives_env_error_episodes_and_new_sessions_go_to_the_rebuilt_one(ray_cluster):
    from posttrain.agent.demo import demo_tasks
    from posttrain.agent.episode import EpisodeStatus
    from posttrain.agent.rollouter import AgentRollouter, masked_groups
    from posttrain.agent.spec import AgentSpec
    from posttrain.engine.mock import MockEngine
    from posttrain.models.tokenizer import char_tokenizer
    from posttrain.types import RolloutStatus

    task = next(t for t in demo_tasks() if t.id == "demo/hello-file")
    slow = '<tool_call>{"name": "bash", "arguments": {"command": "sleep 3; echo done"}}</tool_call>'

    def script(prompt):  # a slow command first (the worker is killed under it), then solve and submit
        text = char_tokenizer().decode(prompt)
        if "<tool_response name=\"bash\">" not in text:
            return slow
        if "wrote 12 bytes" not in text:
            return WRITE_HELLO
        return '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'

    rollouter_of = lambda pool: AgentRollouter(MockEngine(script, tokenizer=char_tokenizer()), pool,  # noqa: E731
                                              AgentSpec(lambda t: task, max_steps=5))

    async def group_with_a_kill(pool, ray):
        held = await pool.asession(files={"a.txt": "1"})  # a session outside the group, on the same worker
        run = asyncio.ensure_future(rollouter_of(pool).run([task.to_task()], n=2))
        # until the two episodes' commands are in flight on the worker: its four sessions open (held, template, two
        # forks) and two calls in flight. Calls in flight alone were not enough: under load (2 cores at load 30-40)
        # they were once the forks themselves, so the kill came before them and 2 sessions of 4 were lost.
        def ready():
            stats = pool.stats()
            return stats.sessions[0] >= 4 and stats.inflight[0] >= 2

        for _ in range(2400):
            if ready():
                break
            await asyncio.sleep(0.05)
        assert ready(), "the episodes' commands never reached the worker in 120 s"
        killed = pool.actor(0)
        ray.kill(killed)
        (group,) = await run
        with pytest.raises(SessionLost, match="lost with sandbox worker 0"):  # every later operation: lost
            await held.aread_file("a.txt")
        with pytest.raises(SessionLost):
            await held.afork()
        assert (await held.aexec("true")).status is ExecStatus.SANDBOX_ERROR  # an execution answers as one failing
        await held.aclose()  # nothing to close: its worker took it
        return group, killed

    with _pool(workers=1) as pool:
        with pytest.warns(RuntimeWarning, match="sandbox worker 0 died"):
            group, killed = asyncio.run(group_with_a_kill(pool, ray_cluster))
        lost = pool.stats()
        (again,) = asyncio.run(rollouter_of(pool).run([task.to_task()], n=2))
        after, workers = pool.stats(), pool.worker_stats()
        assert pool.actor(0) is not killed
    assert [ep.status for ep in group.episodes] == [EpisodeStatus.ENV_ERROR] * 2
    assert all(ep.verdict is None and "sandbox" in ep.error for ep in group.episodes)  # never judged, never a 0
    assert masked_groups([group]) == 1 and not any(group.valid)
    assert {t.status for t in group.trajectories} == {RolloutStatus.ENV_ERROR}
    assert lost.worker_failures == 1 and lost.sessions_lost == 4 and lost.sessions == [0]  # held, template, 2 forks
    assert [ep.status for ep in again.episodes] == [EpisodeStatus.SOLVED] * 2 and masked_groups([again]) == 0
    assert workers[0]["sessions_opened"] == 3 and after.sessions == [0]  # on the rebuilt worker


def _agent_cfg(tmp_path, name, **rollout):
    import torch

    from posttrain.config import load_config
    from posttrain.models import char_tokenizer, save_model
    from tiny_models import agent_model

    torch.set_num_threads(1)  # restored after the module by tests/conftest.py's _torch_threads_restored
    if not (tmp_path / "tiny").exists():
        save_model(agent_model(), char_tokenizer(), tmp_path / "tiny")
    sets = [f"{k}={v!r}" for k, v in rollout.items()]
    return load_config(None, [
        f"model.path='{tmp_path / 'tiny'}'", f"run_dir='{tmp_path / 'runs'}'", f"name='{name}'",
        "tasks.source='agent:lookup'", "tasks.digits=2", "sampling.n=2", "sampling.max_tokens=80",
        "train.steps=2", "train.prompts_per_step=2", "eval.size=4", "eval.every=0",
        "train.checkpoint_every=0", "train.drop_zero_variance=false", "tensorboard=false", *sets,
    ])


def _episodes(cfg):
    from posttrain.store import RunStore

    with RunStore(cfg.path / "run.sqlite") as store:
        return [(s, row.task_id, row.status, row.reward) for s, row in store.episodes()]


def test_agent_training_opens_its_workspaces_on_the_ray_workers(tmp_path, ray_cluster):
    from posttrain.rl.trainer import Trainer
    from posttrain.sandbox.sandboxes import LazySandbox
    from posttrain.wiring import default_backends

    runs = {}
    for name, rollout in [("local", {}), ("ray", {"sandbox.backend": "ray", "sandbox.workers": 2,
                                                  "sandbox.worker_cpus": 0.0})]:
        cfg = _agent_cfg(tmp_path, name, **rollout)
        trainer = Trainer(cfg, backends=default_backends())
        try:
            result = trainer.run()
            sandboxes = trainer.parts.sandboxes
            installed = sandboxes if sandboxes.backend == "ray" else None
            assert trainer.parts.rollouter.sandbox is sandboxes.workspaces
            assert isinstance(sandboxes.executor, LazySandbox) == (installed is None)
            stats = (installed.executor.stats(), installed.executor.worker_stats()) if installed else None
        finally:
            trainer.close()
        assert result.steps == 2
        runs[name] = (cfg, stats, result)
    assert runs["local"][1] is None
    stats, workers = runs["ray"][1]
    # 2 steps x 2 tasks: a template and 2 forks per group; more for the final held-out episodes, run there too
    assert stats.sessions_opened > 2 * 2 * 3 and stats.sessions_closed == stats.sessions_opened
    assert sum(w["sessions_opened"] for w in workers) == stats.sessions_opened and stats.sessions_lost == 0
    assert trainer.parts.sandboxes.closed  # the trainer's close closed its sandbox workers
    local, remote = _episodes(runs["local"][0]), _episodes(runs["ray"][0])
    assert len(remote) == 2 * 2 * 2 and remote == local  # the same episodes, judged the same, on the Ray workers
    untimed = [{k: v for k, v in runs[n][2].final_eval.items() if not k.endswith("_s")} for n in ("ray", "local")]
    assert untimed[0] == untimed[1] and "agent/turns_per_episode" in untimed[0]  # held-out episodes alike
