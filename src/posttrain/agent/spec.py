"""`AgentSpec`: how a domain's tasks run as agent episodes, the one record training and evaluation share.

Covers: what turns a `types.Task` of an agent domain into an episode (`load`: the `AgentTask`,
`TerminalTask` or `Env` it carries), the tools when the task brings none, the system text of the
stable prefix, the step budget, the context policy and the format-error cap; and `Opening`, an episode that opens
the way a single-turn answer is written (the prompt alone, the first reply a bare answer the runtime runs as a
call). A `Domain` with
`rollouter == "agent"` holds one (`Domain.agent`), and so does its evaluation view (`Suite.agent`):
the `AgentRollouter` that trains and the evaluation that measures run every episode the same way.
`spec_of(domain)` is a domain's spec, or the default one for an agent domain that names none (a
Harbor terminal domain: its tasks carry their `TerminalTask`, `task_env_of`).
Does not cover: running episodes (`runtime.py`, `rollouter.py`, `evaluate.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from posttrain.agent import format as fmt
from posttrain.agent.context import ContextPolicy
from posttrain.agent.tools import Tool
from posttrain.types import Task


def task_env_of(task: Task) -> object:
    """What a `Task` of an agent domain runs: the `TerminalTask` in its meta (Harbor domains) or the
    `AgentTask` / `Env` it carries under "agent_task"."""
    for key in ("terminal_task", "agent_task"):
        if key in task.meta:
            return task.meta[key]
    from posttrain.errors import UserError

    raise UserError(f"task {task.id!r} carries no agent task (meta 'terminal_task' or 'agent_task')")


@dataclass(frozen=True)
class Opening:
    """An episode whose first attempt is written exactly where and how a single-turn answer is: the context opens
    with the task's prompt alone, as single-turn sampling gives it to the built-in model (BOS and the raw prompt, no
    system text, no tool listing), the first reply is sampled as a single-turn answer (to EOS: no call format, no
    call stop string) and the runtime runs it as a call of `tool` with the reply's text as `argument`; after that
    call's observation come the system text and the tool listing (a `listing` entry), and the episode goes on with
    calls. So the agent starts from single-shot's answer and can only add corrections to it."""

    tool: str  # the tool the first reply is given to (`render` for the brief CAD form)
    argument: str  # the argument the reply's text fills (`program`)
    trains: bool = True  # False: the sampled first reply is the learner's context only, never trained (RL then
    # moves the calls after it, correcting or keeping the model's own attempt, and leaves the opening to single-shot's)


@dataclass(frozen=True)
class AgentSpec:
    """How to run one domain's tasks as episodes."""

    load: Callable[[Task], object] = task_env_of  # a Task -> the AgentTask, TerminalTask or Env to run
    tools: tuple[Tool, ...] | None = None  # None: the task's own, else the env's defaults
    system: str = fmt.SYSTEM  # the system text of the stable prefix
    max_steps: int = 30
    policy: ContextPolicy = field(default_factory=ContextPolicy)
    max_format_errors: int | None = 3
    max_tokens: int = 512  # room for one reply (a call), unless the config's sampling says otherwise
    tool_listing: fmt.Listing = "json"  # how the prefix lists the tools (`format.render_prefix`)
    process: Callable[[Any, Task], float] | None = None  # (episode, task) -> a process score in [0, 1] (`well_formed`)
    process_weight: float = 0.0  # reward = (1 - w) x the verifier's score + w x the process score; pass/fail stays
    # the verifier's, so evaluation figures do not move
    opening: Opening | None = None  # None: the usual episode (prefix, task, calls); else see `Opening`

    def __post_init__(self) -> None:
        if not 0.0 <= self.process_weight <= 1.0:
            raise ValueError(f"AgentSpec.process_weight must be in [0, 1], got {self.process_weight}")
        if self.process_weight > 0 and self.process is None:
            raise ValueError("AgentSpec.process_weight > 0 needs a process score function")


def with_system_prompt(spec: AgentSpec, system_prompt: str | None) -> AgentSpec:
    """`spec` with a model's system prompt (`model.system_prompt`) opening its prefix's system text, on the line
    before it (the plain rendering of a system message, `models/prompting.py`)."""
    if not system_prompt:
        return spec
    return dataclasses.replace(spec, system=f"{system_prompt}\n{spec.system}")


def well_formed(episode: Any, task: Task | None = None) -> float:
    """A process score: the share of the episode's acting turns whose reply held a valid call."""
    acting = [t for t in episode.turns if t.kind == "act"]
    return sum(1 for t in acting if not t.format_error) / len(acting) if acting else 0.0


def spec_of(domain: Any) -> AgentSpec | None:
    """The `AgentSpec` a domain's tasks run with (None: a single-turn domain)."""
    if domain.rollouter != "agent":
        return None
    return domain.agent if domain.agent is not None else AgentSpec()
