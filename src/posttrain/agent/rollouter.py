"""`AgentRollouter`: the `Rollouter` protocol (`async run(tasks, n) -> list[Group]`) over agent episodes.

Covers: n concurrent `run_agent_task` episodes per task on one shared model (the local engine batches
their turns), the context policy drawn once per group (`ContextPolicy.for_group`: every attempt of a
group sees the same compaction trigger, groups differ), each episode turned into a
`types.Trajectory` (`Episode.to_trajectory`: segments where history was rewritten; env_error
episodes are masked, never scored 0). The episodes of the last `run` stay in `episodes` for stores.
Does not cover: the training loop (`rl/`), which task becomes which env (`load`, given).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from posttrain.agent.context import ContextPolicy
from posttrain.agent.episode import Episode
from posttrain.agent.runtime import DEFAULT_PARAMS, run_agent_task
from posttrain.agent.tools import Tool
from posttrain.types import Group, SamplingParams, Task

if TYPE_CHECKING:
    from posttrain.sandbox.sandbox import Sandbox


@dataclass
class AgentRollouter:
    model: object  # an Engine with a tokenizer (trainable), or an AgentModel
    sandbox: Sandbox
    load: Callable[[Task], object]  # a Task -> the AgentTask, TerminalTask or Env to run
    policy: ContextPolicy = field(default_factory=ContextPolicy)
    params: SamplingParams = DEFAULT_PARAMS
    max_steps: int = 30
    tools: list[Tool] | None = None
    seed: int = 0
    max_concurrency: int = 64  # episodes in flight at once
    episodes: list[list[Episode]] = field(default_factory=list)

    async def run(self, tasks: list[Task], n: int) -> list[Group]:
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(task: Task, policy: ContextPolicy) -> Episode:
            async with gate:
                return await run_agent_task(self.model, self.load(task), self.tools, self.max_steps, policy,
                                            sandbox=self.sandbox, params=self.params)

        groups = []
        for task in tasks:
            policy = self.policy.for_group(zlib.crc32(f"{self.seed}:{task.id}".encode()))
            groups.append([one(task, policy) for _ in range(n)])
        done = await asyncio.gather(*(asyncio.gather(*g) for g in groups))
        self.episodes = [list(g) for g in done]
        return [Group(task, [ep.to_trajectory(task) for ep in eps]) for task, eps in zip(tasks, done)]
