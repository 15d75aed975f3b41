"""`AgentRollouter`: n episodes per task into scored groups of trajectories, one compaction trigger per group."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.agent import ContextPolicy
from posttrain.agent.demo import demo_tasks
from posttrain.agent.rollouter import AgentRollouter
from posttrain.agent.spec import AgentSpec
from posttrain.engine.mock import MockEngine
from posttrain.models.tokenizer import char_tokenizer

SOLVE = {t.id: t for t in demo_tasks()}


def script(prompt):
    """Solve hello-file, give up on the rest (a stateless script: several episodes share it)."""
    text = char_tokenizer().decode(prompt)
    if "hello.txt" in text and "wrote 12 bytes" not in text:
        return '<tool_call>{"name": "write_file", "arguments": {"path": "hello.txt", "content": "hello world\\n"}}</tool_call>'
    return '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'


@pytest.mark.slow
def test_groups_of_episodes(sandbox):
    engine = MockEngine(script, tokenizer=char_tokenizer())
    policy = ContextPolicy(budget_tokens=8192, compact_at=0.8, compact_jitter=0.2)
    spec = AgentSpec(lambda task: SOLVE[task.id], policy=policy, max_steps=5)
    r = AgentRollouter(engine, sandbox, spec)
    tasks = [t.to_task() for t in demo_tasks()]
    groups = asyncio.run(r.run(tasks, n=3))
    assert [g.task.id for g in groups] == [t.id for t in tasks]
    rewards = {g.task.id: g.rewards for g in groups}
    assert rewards["demo/hello-file"] == [1.0] * 3 and rewards["demo/fix-add"] == [0.0] * 3
    assert all(all(g.valid) for g in groups)
    assert all(len(t.segments()) == 1 for g in groups for t in g.trajectories)
    assert all(len(g.episodes) == 3 and [ep.reward for ep in g.episodes] == g.rewards for g in groups)
