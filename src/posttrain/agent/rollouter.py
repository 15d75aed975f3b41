"""`AgentRollouter`: the `Rollouter` protocol (`async run(tasks, n) -> list[Group]`) over agent episodes.

Covers: n concurrent `run_agent_task` episodes per task on one shared model (the local engine batches
their turns through `agenerate`); one workspace per group: the task's files are written once into a
template session and the n episodes start from forks of it (`Workspace.afork`: n copies, one set-up; on a
`RaySandboxPool` the forks live on the template's worker);
the context policy drawn once per group (`ContextPolicy.for_group`: every attempt of a group sees the
same compaction trigger, groups differ); each episode turned into a `types.Trajectory`
(`Episode.to_trajectory`: ids exactly as seen and sampled, one segment per rewritten history, each
carrying the episode's advantage), its reward optionally blended with a process score
(`AgentSpec.process`, e.g. `spec.well_formed`: `blend_process`). A group in which any episode hit an infrastructure failure
(env_error: the sandbox, the verifier or the endpoint failed) is masked whole, never scored 0, and
counted (`masked_groups(groups)`); its siblings are marked ABORTED so the trainer drops them too. Each
group carries its episodes (`Group.episodes`), so the run store and the per-turn metrics get them from the
groups wherever they were sampled (this process, or an asynchronous producer's).
Does not cover: the training loop (`rl/`), which task becomes which env (`spec.load`).
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from posttrain.agent.env import SessionEnv
from posttrain.agent.episode import Episode, EpisodeStatus
from posttrain.agent.runtime import DEFAULT_PARAMS, make_env, run_agent_task
from posttrain.agent.spec import AgentSpec
from posttrain.sandbox.sandboxes import Sandboxes, use_sandboxes
from posttrain.types import Group, RolloutStatus, SamplingParams, Task

if TYPE_CHECKING:
    from posttrain.sandbox.workspace import Workspace, Workspaces


@dataclass
class AgentRollouter:
    model: object  # an Engine with a tokenizer (trainable), or an AgentModel
    sandbox: Workspaces | None  # a local `Sandbox`, or a `RaySandboxPool` (the sessions on Ray sandbox workers)
    spec: AgentSpec
    params: SamplingParams = DEFAULT_PARAMS
    seed: int = 0
    max_concurrency: int = 64  # episodes in flight at once
    share_workspace: bool = True  # a group's episodes fork one template workspace
    sandboxes: Sandboxes | None = None  # where its verifiers execute code (the run's `[sandbox]`); None: the caller's

    async def run(self, tasks: list[Task], n: int) -> list[Group]:
        with use_sandboxes(self.sandboxes):
            return await self._run(tasks, n)

    async def _run(self, tasks: list[Task], n: int) -> list[Group]:
        gate = asyncio.Semaphore(self.max_concurrency)
        spec = self.spec

        async def group(task: Task) -> list[Episode]:
            policy = spec.policy.for_group(zlib.crc32(f"{self.seed}:{task.id}".encode()))
            template = await self._template(task)
            try:
                return list(await asyncio.gather(*(one(task, policy, template) for _ in range(n))))
            finally:
                if template is not None:
                    await template.aclose()

        async def one(task: Task, policy, template: Workspace | None) -> Episode:
            async with gate:
                env = make_env(spec.load(task), self.sandbox, list(spec.tools) if spec.tools is not None else None)
                if template is not None and isinstance(env, SessionEnv):
                    env.template = template
                return await run_agent_task(self.model, env, None, spec.max_steps, policy, params=self.params,
                                            max_format_errors=spec.max_format_errors, system=spec.system,
                                            tool_listing=spec.tool_listing, opening=spec.opening)

        done = await asyncio.gather(*(group(t) for t in tasks))
        if spec.process is not None and spec.process_weight > 0:
            for task, eps in zip(tasks, done):
                for ep in eps:
                    blend_process(ep, spec.process(ep, task), spec.process_weight)
        groups = []
        for task, eps in zip(tasks, done):
            trajectories = [ep.to_trajectory(task) for ep in eps]
            if any(ep.status is EpisodeStatus.ENV_ERROR for ep in eps):
                for ep, t in zip(eps, trajectories):
                    if ep.status is not EpisodeStatus.ENV_ERROR:
                        t.status = RolloutStatus.ABORTED
            groups.append(Group(task, trajectories, list(eps)))
        return groups

    async def _template(self, task: Task) -> Workspace | None:
        """The group's shared workspace, or None (an env without a session, sharing off, or a set-up that
        failed: each episode then opens its own and a failure there is its env_error)."""
        if not self.share_workspace or self.sandbox is None:
            return None
        env = make_env(self.spec.load(task), self.sandbox, None)
        if not isinstance(env, SessionEnv):
            return None
        try:
            return await env.open_template()
        except Exception:  # noqa: BLE001 - each episode then tries on its own and records what failed
            return None


def masked_groups(groups: list[Group]) -> int:
    """How many of `groups` were masked whole for an infrastructure failure (an env_error episode)."""
    return sum(1 for g in groups if any(ep.status is EpisodeStatus.ENV_ERROR for ep in g.episodes))


def blend_process(ep: Episode, process: float, weight: float) -> None:
    """The episode's reward becomes (1 - weight) x its verdict's score + weight x `process` (an OK verdict
    only: a failed verifier stays failed). The verifier's own score stays in `verdict.outcome`, and the blend's
    parts in `verdict.info["blend"]` (apart from `breakdown`, whose keys are a rubric's part names)."""
    v = ep.verdict
    if v is None or not v.ok:
        return
    v.outcome = v.score
    v.info = {**v.info, "blend": {"outcome": v.score, "process": process, "weight": weight}}
    v.score = (1.0 - weight) * v.score + weight * process
