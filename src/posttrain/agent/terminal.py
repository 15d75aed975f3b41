"""`TerminalEnv`: a Harbor-format terminal task (`posttrain.tasks.harbor.TerminalTask`) as an agent `Env`.

Covers: opening the task's workspace (`open_workspace`: the workspace its Dockerfile describes, Harbor's
`/app`), the agent's tools over that session (each shell command starts in the task's WORKDIR with its
ENV), and verification through `verify_workspace` (planted reward files deleted, the hidden `tests/` copied in only after the
agent, `tests/test.sh` run, the reward read; a missing reward is an error verdict, not 0). The
agent's wall-clock budget is the task's `[agent] timeout_sec`. `solution_tool(task)` is the tool an
oracle agent calls to run the task's `solve.sh` (`run_solution`: with its `solution/` files, under the
agent's budget), so `--model oracle` proves each task can be solved through the runtime itself.
Does not cover: loading or validating tasks, the verifier itself (both `posttrain.tasks.harbor`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard

from posttrain.agent.env import SessionEnv
from posttrain.agent.recall import Memory
from posttrain.agent.tools import Tool, ToolContext, ToolOutput, exec_output, tool
from posttrain.types import Verdict, VerdictStatus

if TYPE_CHECKING:
    from posttrain.sandbox.workspace import Workspace, Workspaces
    from posttrain.tasks.harbor import TerminalTask


def is_terminal_task(task: object) -> TypeGuard[TerminalTask]:
    try:
        from posttrain.tasks.harbor import TerminalTask
    except ImportError:  # the Harbor adapter is not part of this installation
        return False
    return isinstance(task, TerminalTask)


class TerminalEnv(SessionEnv):
    """A terminal task in the sandbox: no visible tests (they are hidden until verification)."""

    def __init__(self, sandbox: Workspaces, task: TerminalTask, tools: list[Tool] | None = None) -> None:
        super().__init__(task.id, tools, float(task.agent_timeout_s))
        self.sandbox = sandbox
        self.task = task

    async def reset(self, memory: Memory | None) -> str:
        """The task's workspace, or a fork of the group's `template` (the same files, already written)."""
        if self.template is not None:
            self.bind(await self.template.afork(), memory)
            return self.task.instruction
        session = await self.open_template()
        self.bind(session, memory)
        return self.task.instruction

    def bind(self, session: Workspace, memory: Memory | None) -> None:
        """The session, with each shell command starting in the task's WORKDIR with its ENV (as in its container)."""
        from posttrain.tasks.harbor import task_prefix

        super().bind(session, memory)
        self.ctx.command_prefix = task_prefix(self.task)

    async def open_template(self) -> Workspace:
        from posttrain.tasks.harbor import open_workspace

        # `open_workspace` is blocking (open, write, snapshot): off the event loop, wherever the sandbox is
        return await self.sandbox.in_worker(lambda: open_workspace(self.sandbox, self.task))

    async def verify(self) -> Verdict:
        from posttrain.tasks.harbor import verify_workspace

        if self.session is None:
            return Verdict(0.0, False, VerdictStatus.ERROR, "harbor", "no workspace to verify")
        return await verify_workspace(self.session, self.task)



def solution_tool(task: TerminalTask) -> Tool:
    """`run_solution()`: the task's oracle `solve.sh` in the workspace (for oracle agents only)."""

    @tool(name="run_solution", timeout_s=float(task.agent_timeout_s))
    async def run_oracle(ctx: ToolContext) -> ToolOutput:
        """Run the task's reference solution."""
        from posttrain.tasks.harbor import run_solution

        return exec_output(await run_solution(ctx.need_session(), task), float(task.agent_timeout_s))

    return run_oracle
