"""`AgentSpec`: how a domain's tasks run as agent episodes, the one record training and evaluation share.

Covers: what turns a `types.Task` of an agent domain into an episode (`load`: the `AgentTask`,
`TerminalTask` or `Env` it carries), the tools when the task brings none, the system text of the
stable prefix, the step budget, the context policy and the format-error cap. A `Domain` with
`rollouter == "agent"` holds one (`Domain.agent`), and so does its evaluation view (`Suite.agent`):
the `AgentRollouter` that trains and the evaluation that measures run every episode the same way.
Does not cover: running episodes (`runtime.py`, `rollouter.py`, `evaluate.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from posttrain.agent import format as fmt
from posttrain.agent.context import ContextPolicy
from posttrain.agent.tools import Tool
from posttrain.types import Task


@dataclass(frozen=True)
class AgentSpec:
    """How to run one domain's tasks as episodes."""

    load: Callable[[Task], object]  # a Task -> the AgentTask, TerminalTask or Env to run
    tools: tuple[Tool, ...] | None = None  # None: the task's own, else the env's defaults
    system: str = fmt.SYSTEM  # the system text of the stable prefix
    max_steps: int = 30
    policy: ContextPolicy = field(default_factory=ContextPolicy)
    max_format_errors: int | None = 3
    max_tokens: int = 512  # room for one reply (a call), unless the config's sampling says otherwise
    tool_listing: fmt.Listing = "json"  # how the prefix lists the tools (`format.render_prefix`)
