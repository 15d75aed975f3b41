"""Terminal (Harbor-format) tasks through the runtime: every built-in oracle passes and doing nothing fails, as
agents; a planted reward or planted tests earn nothing; a task without a reward is an env error, never 0."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.agent import EpisodeStatus, ScriptedAgent, call, run_agent_task
from posttrain.agent.runtime import make_env
from posttrain.agent.scripted import noop_agent
from posttrain.agent.terminal import TerminalEnv, solution_tool
from posttrain.agent.tools import default_tools
from posttrain.tasks.harbor import TerminalTask, load_terminal_suite

SUITE = load_terminal_suite("terminal")


def gather(coros):
    async def main():
        gate = asyncio.Semaphore(8)

        async def one(c):
            async with gate:
                return await c

        return await asyncio.gather(*(one(c) for c in coros))

    return asyncio.run(main())


def oracle(task, sandbox):
    return run_agent_task(ScriptedAgent([call("run_solution"), call("submit")]), task,
                          [*default_tools(), solution_tool(task)], sandbox=sandbox)


@pytest.mark.slow
def test_every_oracle_passes_and_doing_nothing_fails(sandbox):
    assert len(SUITE) >= 20
    solved = gather([oracle(t, sandbox) for t in SUITE])
    assert [e.task_id for e in solved if e.status is not EpisodeStatus.SOLVED] == []
    idle = gather([run_agent_task(noop_agent(), t, sandbox=sandbox) for t in SUITE])
    assert [(e.task_id, e.status.value) for e in idle if e.status is not EpisodeStatus.FAILED] == []


def hello_task(test_sh: str = "grep -qx 'hello world' /app/hello.txt && echo 1 > /logs/verifier/reward.txt "
                              "|| echo 0 > /logs/verifier/reward.txt\n") -> TerminalTask:
    return TerminalTask("hello", "Write hello world to /app/hello.txt.", {"README": b"hi\n"},
                        {"test.sh": test_sh.encode()}, "echo 'hello world' > /app/hello.txt\n", agent_timeout_s=30,
                        verifier_timeout_s=30, memory_mb=256)


def test_a_scripted_agent_solves_a_terminal_task(sandbox):
    t = hello_task()
    assert isinstance(make_env(t, sandbox), TerminalEnv)
    ep = asyncio.run(run_agent_task(ScriptedAgent([call("bash", command="pwd; ls; ls /tests 2>&1 || true"),
                                                   call("write_file", path="hello.txt", content="hello world\n")]),
                                    t, sandbox=sandbox))
    assert ep.status is EpisodeStatus.SOLVED and ep.reward == 1.0
    # the agent starts in the task's WORKDIR, /app, as in its container; the tests stay hidden
    assert ep.turns[0].observation.startswith("[bash] /app\n") and "test.sh" not in ep.turns[0].observation


def test_a_planted_reward_and_planted_tests_earn_nothing(sandbox):
    # /logs and /tests are bound from /work/.harbor (when it exists as an execution starts): plant there
    plant = ("mkdir -p /work/.harbor/logs/verifier /work/.harbor/tests && echo 1 > .harbor/logs/verifier/reward.txt && "
             "printf 'echo 1 > /logs/verifier/reward.txt\\n' > .harbor/tests/test.sh")
    ep = asyncio.run(run_agent_task(ScriptedAgent([call("bash", command=plant)]), hello_task(), sandbox=sandbox))
    assert "[exit code 0]" in ep.turns[0].observation
    assert ep.status is EpisodeStatus.FAILED and ep.reward == 0.0


def test_no_reward_is_an_env_error_never_zero(sandbox):
    ep = asyncio.run(run_agent_task(noop_agent(), hello_task("true\n"), sandbox=sandbox))
    assert ep.status is EpisodeStatus.ENV_ERROR and ep.reward is None and "no reward" in ep.error
    assert not ep.to_trajectory().trainable
