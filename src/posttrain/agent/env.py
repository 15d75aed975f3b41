"""Environments: what an agent acts in. The `Env` protocol, `AgentTask` and `ToolEnv`, the default env over a sandbox session.

Covers: `Env` (`reset` opens the workspace and returns the task's instruction, `step` turns one
tool call into a `ToolResult`, `verify` judges the workspace after the agent has finished,
`close`); `SessionEnv`, the tool dispatch every session-backed env shares (an unknown tool is an
observation, like any failing call); `AgentTask`, a plain task: workspace files, hidden tests
copied in only after the agent finished (over whatever the agent wrote there), a test command
whose exit status is the verdict (or a gold `answer` that the argument of `submit` must match,
judged by the task's `answer_verifier`, exact match by default), optional visible tests for
`run_tests`, an oracle solution, its own tools (the defaults otherwise) and documents for `recall`
(the files go into the workspace with the session's first execution: `tools.Staged`); `ToolEnv`,
which runs an `AgentTask` in a workspace of its own (or in a fork of its group's `template` workspace, so a
group's n episodes cost one set-up); and `FunctionEnv`, for tools that need no sandbox (plain
Python `@tool` functions), judged on the answer given to `submit`.
The envs open and use workspaces only through `sandbox.workspace.Workspaces` / `Workspace`, so the `sandbox`
they are given may be this process's `Sandbox` or a `RaySandboxPool` (`[sandbox] backend = "ray"`: the
sessions live on Ray sandbox workers); a lost workspace (`SessionLost`) ends the episode as env_error.
Does not cover: the loop (`runtime.py`), terminal tasks (`terminal.py` over `posttrain.tasks.harbor`).

>>> env = ToolEnv(sandbox, AgentTask("t", "Create hello.txt", tests={"t.sh": "grep -q hi hello.txt"},
...                                  test_command="sh t.sh"))             # doctest: +SKIP
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from posttrain.agent.episode import ToolCall, ToolResult
from posttrain.agent.recall import Memory
from posttrain.agent.tools import Tool, ToolContext, default_tools
from posttrain.sandbox.limits import Limits
from posttrain.sandbox.result import ExecStatus
from posttrain.types import Task, Verdict, VerdictStatus

if TYPE_CHECKING:
    from posttrain.sandbox.workspace import Workspace, Workspaces

VERIFIER = "agent-tests@1"


@runtime_checkable
class Env(Protocol):
    """What the runtime drives. `reset` may raise (the episode then ends as env_error); `step` never does."""

    task_id: str
    tools: list[Tool]
    timeout_s: float  # the agent's wall-clock budget
    documents: dict[str, str]  # what `recall` can search besides the history
    # optional: `opening` (str | None), a first attempt the task gives for the spec's `Opening` (`ToolEnv` has it)

    async def reset(self, memory: Memory | None) -> str:
        """Open the workspace; returns the instruction the model is given."""
        ...

    async def step(self, call: ToolCall) -> ToolResult: ...

    async def verify(self) -> Verdict:
        """Judge the workspace after the agent has finished (hidden tests run only now)."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class AgentTask:
    """A task for `ToolEnv`: files in the workspace, hidden tests, and the command that judges the result."""

    id: str
    instruction: str
    files: dict[str, str | bytes] = field(default_factory=dict)  # the workspace the agent starts from
    tests: dict[str, str | bytes] = field(default_factory=dict)  # hidden: written only after the agent finished
    test_command: str = ""  # run after the tests are written; exit status 0 passes
    visible_test_command: str | None = None  # what `run_tests` runs (None: the task has no visible tests)
    solution: str | None = None  # a shell script that solves the task (the oracle agent runs it)
    documents: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0
    verifier_timeout_s: float = 60.0
    meta: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None  # judged on the answer given to `submit` instead of a test command
    answer_verifier: Any = None  # a `rewards.Verifier` for `answer` (None: exact match after stripping)
    tools: tuple[Tool, ...] | None = None  # the task's own tools (None: what the env is given, or the defaults)
    answer_file: str | None = None  # with `answer`: judge this workspace file as it is when the episode ends (whatever
    # ended it), instead of the argument of `submit` (the brief CAD form's `model.scad`, the program rendered last)
    opening: str | None = None  # with the spec's `Opening`: the first attempt given, not sampled (a correction drill:
    # the runtime runs it as the opening call; it enters the context and never trains), None: the model writes it

    def to_task(self) -> Task:
        """The task as the rest of posttrain knows tasks (training groups, stores)."""
        return Task(self.id, self.instruction, self.answer, {**self.meta, "kind": "agent"})


async def dispatch(tools: dict[str, Tool], ctx: ToolContext, call: ToolCall) -> ToolResult:
    """Run the named tool; an unknown name is an observation listing the tools."""
    tool = tools.get(call.name)
    if tool is None:
        return ToolResult(call, f"unknown tool {call.name!r}; the tools are {', '.join(tools)}", ok=False,
                          unknown_tool=True)
    return await tool.run(ctx, call)


class SessionEnv:
    """The tool dispatch of every env backed by a sandbox session (subclasses open the session and verify)."""

    def __init__(self, task_id: str, tools: list[Tool] | None, timeout_s: float,
                 documents: dict[str, str] | None = None, test_command: str | None = None) -> None:
        self.task_id = task_id
        self.tools = list(tools) if tools is not None else default_tools()
        self.timeout_s = timeout_s
        self.documents = dict(documents or {})
        self.test_command = test_command
        self.session: Workspace | None = None
        self.template: Workspace | None = None  # a group's shared workspace: `reset` forks it instead of opening one
        self.ctx = ToolContext(None)
        self.submitted: str | None = None  # the argument of `submit`, once the model called it
        self._by_name = {t.name: t for t in self.tools}

    async def open_template(self) -> Workspace | None:
        """The workspace this env starts from, written and frozen, for a group's episodes to fork (`template`);
        None when it has none to share."""
        return None

    def bind(self, session: Workspace, memory: Memory | None) -> None:
        self.session = session
        self.ctx = ToolContext(session, session.limits, self.test_command, memory)

    async def step(self, call: ToolCall) -> ToolResult:
        result = await dispatch(self._by_name, self.ctx, call)
        if result.ends_episode:
            self.submitted = str(call.arguments.get("answer", ""))
        return result

    async def close(self) -> None:
        if self.session is not None:
            s, self.session = self.session, None
            await s.aclose()


class ToolEnv(SessionEnv):
    """An `AgentTask` in a fresh sandbox session: the task's files, the tools, its hidden tests at the end."""

    def __init__(self, sandbox: Workspaces, task: AgentTask, tools: list[Tool] | None = None,
                 limits: Limits | None = None) -> None:
        own = list(task.tools) if task.tools is not None else None
        super().__init__(task.id, own if own is not None else tools, task.timeout_s, task.documents,
                         task.visible_test_command)
        self.sandbox = sandbox
        self.task = task
        self.limits = limits

    @property
    def opening(self) -> str | None:
        """The first attempt the task gives (`AgentTask.opening`), run by the runtime instead of sampled."""
        return self.task.opening

    async def reset(self, memory: Memory | None) -> str:
        """A fresh session; the task's files are staged to travel with its first execution (whatever the
        agent does first sees them), which saves a sandbox fork per episode. With a `template` (the
        group's workspace, `open_template`), a fork of it instead: the files are already there."""
        # locally a new session (or fork) is one short request to the fork-server, made on the event loop
        # (`Sandbox.asession`, `Session.afork`): worker threads busy running commands would queue it
        if self.template is not None:
            self.bind(await self.template.afork(limits=self.limits), memory)
            return self.task.instruction
        session = await self.sandbox.asession(limits=self.limits)
        self.bind(session, memory)
        self.ctx.staged.files = dict(self.task.files)
        return self.task.instruction

    async def open_template(self) -> Workspace:
        """The workspace this task starts from (its files written, frozen), for a group's episodes to fork."""
        return await self.sandbox.asession(files=dict(self.task.files) or None, limits=self.limits)

    async def verify(self) -> Verdict:
        """Write the hidden tests over whatever is there, run the test command; exit 0 passes. A sandbox
        failure is an ERROR verdict (never a 0). A task with a gold `answer` is judged on what was submitted."""
        if self.task.answer is not None:
            return await self.verify_answer()
        s = self.session
        t0 = time.perf_counter()
        if s is None:
            return Verdict(0.0, False, VerdictStatus.ERROR, VERIFIER, "no workspace to verify")
        if not self.task.test_command:
            return Verdict(0.0, False, VerdictStatus.ERROR, VERIFIER, f"task {self.task.id!r} has no test_command")
        lim = Limits(**{**s.limits.to_dict(), "wall_s": self.task.verifier_timeout_s,
                        "cpu_s": max(s.limits.cpu_s, self.task.verifier_timeout_s)})
        files = {**self.ctx.staged.take(), **self.task.tests}  # the hidden tests over whatever is there
        r = await s.aexec(self.task.test_command, files=files, limits=lim)
        dt = time.perf_counter() - t0
        if r.status is ExecStatus.SANDBOX_ERROR:
            return Verdict(0.0, False, VerdictStatus.ERROR, VERIFIER, f"sandbox failed: {r.error}", latency_s=dt)
        passed = r.status is ExecStatus.OK
        tail = (r.stdout + r.stderr)[-2000:]
        return Verdict(float(passed), passed, VerdictStatus.OK, VERIFIER,
                       f"tests {'passed' if passed else 'failed'} ({r.status.value}, exit {r.exit_code})\n{tail}",
                       info={"exit_code": r.exit_code, "status": r.status.value}, latency_s=dt)


    async def verify_answer(self) -> Verdict:
        """The submitted answer judged against the gold one by the task's verifier (never submitting scores 0); with
        `answer_file`, that file's content at the end instead (none written scores 0)."""
        from posttrain.rewards.base import score
        from posttrain.rewards.verifiers import ExactMatch

        verifier = self.task.answer_verifier or ExactMatch(extract="full")
        task = Task(self.task.id, self.task.instruction, self.task.answer, dict(self.task.meta))
        if self.task.answer_file is not None:
            answer, missing = await self.read_answer_file(self.task.answer_file)
            (verdict,) = await score(verifier, [task], [answer])
            if missing and verdict.ok:
                verdict.details = f"never wrote {self.task.answer_file}; " + verdict.details
            return verdict
        (verdict,) = await score(verifier, [task], [self.submitted if self.submitted is not None else ""])
        if self.submitted is None and verdict.ok:
            verdict.details = "never submitted an answer; " + verdict.details
        return verdict

    async def read_answer_file(self, path: str) -> tuple[str, bool]:
        """(the workspace file's text, whether it is missing: then ""); a sandbox failure raises (an ERROR verdict)."""
        if self.session is None:
            raise RuntimeError("no workspace to read the answer from")
        await self.ctx.flush()
        q = shlex.quote(path)
        r = await self.session.aexec(f"test -f {q} || exit 3; cat -- {q}")
        if r.status is ExecStatus.SANDBOX_ERROR:
            raise RuntimeError(f"sandbox failed reading {path}: {r.error}")
        return ("", True) if r.exit_code == 3 else (r.stdout, False)


class FunctionEnv:
    """Tools that need no sandbox, and a verdict computed from the answer given to `submit` (None: never submitted).

    >>> env = FunctionEnv("sum", "Add 2 and 3, submit the result.", [add, submit], lambda answer: answer == "5")
    """

    def __init__(self, task_id: str, instruction: str, tools: list[Tool], check: Callable[[str | None], bool],
                 timeout_s: float = 600.0, documents: dict[str, str] | None = None) -> None:
        self.task_id, self.instruction, self.tools, self.check = task_id, instruction, list(tools), check
        self.timeout_s = timeout_s
        self.documents = dict(documents or {})
        self.answer: str | None = None
        self.ctx = ToolContext(None)
        self._by_name = {t.name: t for t in self.tools}

    async def reset(self, memory: Memory | None) -> str:
        self.ctx = ToolContext(None, memory=memory)
        self.answer = None
        return self.instruction

    async def step(self, call: ToolCall) -> ToolResult:
        result = await dispatch(self._by_name, self.ctx, call)
        if result.ends_episode:
            self.answer = str(call.arguments.get("answer", ""))
        return result

    async def verify(self) -> Verdict:
        passed = bool(self.check(self.answer))
        return Verdict(float(passed), passed, VerdictStatus.OK, "function-env@1", f"answer {self.answer!r}")

    async def close(self) -> None:
        pass

