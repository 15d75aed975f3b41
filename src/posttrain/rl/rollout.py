"""Rollouters: tasks in, scored groups out. The `Rollouter` protocol and its single-turn implementation.

Covers: the contract every producer of training data implements,
`async run(tasks, n) -> list[Group]` (n trajectories per task, each with
its verdict), and `SingleTurnRollouter`: render each task's prompt (one
`PromptRenderer`, shared with evaluation and serving; its end-of-turn ids
stop each completion), encode it once, one
`agenerate` call for all tasks (the engine shares each group's prefix),
then one guarded `score` call for all completions with a per-item deadline (code executed on the run's
`sandboxes`),
so a failing or hanging verifier is data. Tasks of several domains are
judged each by its own domain's verifier (`verifiers`, keyed by
`task.meta["domain"]`). `fill_draw` (how many tasks one fill round draws) is
re-exported from `scheduler/pipeline.py`, where the one refill rule lives.
Does not cover: agent episodes (the agent rollouter implements the same
protocol), asynchronous producers or Ray workers (they wrap a rollouter).

>>> rollouter = SingleTurnRollouter(engine, SamplingParams(max_tokens=8), ExactMatch())
>>> groups = asyncio.run(rollouter.run(tasks, n=16))
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from posttrain import aio
from posttrain.engine.base import Engine, Prompt, context_overflow
from posttrain.models.prompting import PromptRenderer
from posttrain.rewards.base import Verifier, score
from posttrain.sandbox.sandboxes import Sandboxes, use_sandboxes
from posttrain.scheduler.pipeline import fill_draw  # noqa: F401 - the rule lives with the scheduler
from posttrain.types import (
    DOMAIN_KEY,
    Completion,
    FinishReason,
    Group,
    RolloutStatus,
    SamplingParams,
    Task,
    Trajectory,
    Turn,
    Verdict,
)


@runtime_checkable
class Rollouter(Protocol):
    """Produces scored groups: n attempts at each task, each with its verdict, in task order."""

    async def run(self, tasks: list[Task], n: int) -> list[Group]: ...


@dataclass
class SingleTurnRollouter:
    """One completion per attempt, judged by the task's domain verifier.

    `params.n` is replaced by the `n` of each `run` call. `verifiers` maps a
    domain name to its verifier for runs over several domains; a task without
    `meta["domain"]` (or with a domain not listed) is judged by `verifier`.
    """

    engine: Engine
    params: SamplingParams
    verifier: Verifier
    renderer: PromptRenderer = field(default_factory=PromptRenderer)
    timeout_s: float | None = None
    verifiers: Mapping[str, Verifier] = field(default_factory=dict)
    inline: bool = False
    """Call the engine's blocking `generate` from the event loop instead of awaiting `agenerate`: for the
    synchronous loop, where nothing else shares the loop. Measured on the addition recipe: the local
    engine's worker-thread hand-off made a training step ~35% slower in wall time (torch work alternating
    between two threads), so the synchronous trainer samples inline."""
    sandboxes: Sandboxes | None = None
    """Where the verifiers execute code (the run's `[sandbox]`, `use_sandboxes`); None: the caller's."""

    async def run(self, tasks: list[Task], n: int) -> list[Group]:
        if not tasks:
            return []
        texts = self.renderer.render_all(tasks)
        ids = self.renderer.token_ids(texts, self.engine)
        prompts: list[Prompt] = list(ids) if ids is not None else list(texts)
        params = dataclasses.replace(self.params, n=n) if n != self.params.n else self.params
        params = self.renderer.sampling(params)  # the end-of-turn token stops a chat model's reply
        fits = [i for i, p in enumerate(prompts) if _overflow(p, self.engine.max_context) is None]
        sampled = [prompts[i] for i in fits]
        if not sampled:
            completions: list[list[Completion]] = []
        elif self.inline:
            completions = self.engine.generate(sampled, params)
        else:
            completions = await self.engine.agenerate(sampled, params)
        flat_tasks = [tasks[i] for i, group in zip(fits, completions) for _ in group]
        with use_sandboxes(self.sandboxes):
            verdicts = iter(await self._judge(flat_tasks, [c.text for group in completions for c in group]))
        groups = [Group(tasks[i], [Trajectory.single_turn(tasks[i], _ids(prompts[i]), c, next(verdicts)) for c in group])
                  for i, group in zip(fits, completions)]
        if len(fits) == len(prompts):
            return groups
        return self._with_overlong(tasks, prompts, dict(zip(fits, groups)), n)

    def _with_overlong(self, tasks: list[Task], prompts: list[Prompt], fitted: dict[int, Group], n: int) -> list[Group]:
        """The batch's groups in order, those whose prompt does not fit the model's context as masked `OVERLONG`
        trajectories that sampled nothing: a failure of the task for this model, recorded, never a crash."""
        out = []
        for i, (task, prompt) in enumerate(zip(tasks, prompts)):
            if i in fitted:
                out.append(fitted[i])
                continue
            why = _overflow(prompt, self.engine.max_context) or ""
            empty = Completion([], "", [], FinishReason.LENGTH)
            verdict = Verdict(0.0, False, verifier="context", details=why)
            out.append(Group(task, [Trajectory(task, [Turn(_ids(prompt), empty)], verdict, RolloutStatus.OVERLONG)
                                    for _ in range(n)]))
        return out

    async def _judge(self, tasks: list[Task], texts: list[str]) -> list[Verdict]:
        if not self.verifiers:
            return await score(self.verifier, tasks, texts, self.timeout_s)
        buckets: dict[int, tuple[Verifier, list[int]]] = {}
        for i, task in enumerate(tasks):
            v = self.verifiers.get(task.meta.get(DOMAIN_KEY, ""), self.verifier)
            buckets.setdefault(id(v), (v, []))[1].append(i)
        out: list[Any] = [None] * len(tasks)

        async def run(v: Verifier, idx: list[int]) -> None:
            for i, verdict in zip(idx, await score(v, [tasks[i] for i in idx], [texts[i] for i in idx], self.timeout_s)):
                out[i] = verdict

        await asyncio.gather(*(run(v, idx) for v, idx in buckets.values()))
        return out


def _ids(prompt: Prompt) -> list[int]:
    return list(prompt) if isinstance(prompt, list) else []


def _overflow(prompt: Prompt, max_context: int | None) -> str | None:
    """Why a prompt of token ids leaves no room for one sampled token (text prompts are the engine's to check)."""
    return context_overflow(len(prompt), max_context) if isinstance(prompt, list) else None


def run_sync(rollouter: Rollouter, tasks: list[Task], n: int) -> list[Group]:
    """`rollouter.run` from synchronous code (the synchronous training loop)."""
    return aio.run_sync(rollouter.run(tasks, n))
