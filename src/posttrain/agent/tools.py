"""Tools: JSON-schema'd async calls against a sandbox workspace, the built-ins, and `@tool` for your own.

Covers: `Tool` (name, description, JSON schema of its arguments in the OpenAI function shape, an async
function, its own timeout and output cap); `Tool.run(ctx, call)`, which never raises: bad arguments, a
timeout, a crash, a missing file all come back as a `ToolResult` with `ok=False` and a message the model can
act on, except a failure of the sandbox itself (`SandboxFailure`, e.g. `SessionLost`: the workspace's Ray
sandbox worker died), an env_error result that ends the episode; the workspace is a
`sandbox.workspace.Workspace` (a local `Session`, or a Ray worker's); the output cap (`cap_output`: head and
tail kept, the elided count in between, a hint to narrow the output); `@tool`, which builds a `Tool` from a
typed Python function (its annotations give the schema, its docstring the descriptions); the built-ins `bash`,
`python`, `read_file`, `write_file`, `edit` (exact string replacement), `run_tests` (the task's visible tests,
if it has any), `submit` and `recall` (full-text search over the episode's history and the task's documents,
`recall.py`).
Does not cover: parsing calls out of model text (`format.py`), which tools a task gets (`env.py`).

>>> @tool
... async def word_count(ctx: ToolContext, path: str) -> str:
...     '''Count the words of a file.
...
...     Args:
...         path: the file, relative to the workspace
...     '''
...     return str(len((await ctx.read(path)).split()))
>>> word_count.schema()["function"]["parameters"]["required"]
['path']
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
import types
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import jsonschema

from posttrain.agent.episode import ToolCall, ToolResult
from posttrain.agent.recall import Memory
from posttrain.sandbox.limits import Limits
from posttrain.sandbox.result import ExecResult, ExecStatus
from posttrain.sandbox.session import SandboxError, SandboxFailure
from posttrain.sandbox.workspace import Workspace

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_OUTPUT_CHARS = 8000


@dataclass(slots=True)
class ToolOutput:
    """What a tool function may return instead of a plain string."""

    text: str
    ok: bool = True
    ends_episode: bool = False
    env_error: bool = False
    images: list[bytes] = field(default_factory=list)  # PNGs shown to a multimodal model beside the text (`render`)


@dataclass
class Staged:
    """Task files not yet in the workspace: they travel with the session's first execution, so opening an
    episode costs no execution of its own (one sandbox fork fewer per episode)."""

    files: dict[str, bytes | str] = field(default_factory=dict)

    def take(self) -> dict[str, bytes | str]:
        files, self.files = self.files, {}
        return files


@dataclass
class ToolContext:
    """What a tool can reach: the session (None for tools that need no sandbox), the task's visible test
    command, the episode's memory, and the limits of one execution (`timeout_s` is the calling tool's)."""

    session: Workspace | None
    limits: Limits = field(default_factory=Limits)
    test_command: str | None = None
    memory: Memory | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    staged: Staged = field(default_factory=Staged)  # shared by the copies `Tool.run` makes
    command_prefix: str = ""
    """Shell text each command starts with (a terminal task's `cd WORKDIR; export ENV`: as in its container)."""

    def exec_limits(self) -> Limits:
        return dataclasses.replace(self.limits, wall_s=self.timeout_s, cpu_s=max(self.limits.cpu_s, self.timeout_s))

    def need_session(self) -> Workspace:
        if self.session is None:
            raise SandboxError("this tool needs a sandbox session and the environment has none")
        return self.session

    async def exec(self, command: str | None = None, *, code: str | None = None) -> ExecResult:
        s = self.need_session()
        files = self.staged.take()
        if command is not None and self.command_prefix:
            command = self.command_prefix + command
        r = await s.aexec(command, code=code, files=files or None, limits=self.exec_limits())
        if r.status is ExecStatus.SANDBOX_ERROR and files:
            self.staged.files = files  # not laid out: the next execution carries them
        return r

    async def flush(self) -> None:
        """Lay out the staged files now (before a read or write that goes around `exec`)."""
        if self.staged.files:
            s = self.need_session()
            files = self.staged.take()
            r = await s.aexec(code="pass", files=files, prefork=True)
            if not r.ok:
                self.staged.files = files
                # the sandbox failing (a lost workspace included) is the environment's failure, not the model's
                fail = SandboxFailure if r.status is ExecStatus.SANDBOX_ERROR else SandboxError
                raise fail(f"could not lay out the task's files: {r.error or r.stderr.strip()}")

    async def read(self, path: str) -> str:
        s = self.need_session()
        await self.flush()
        return (await s.aread_file(path)).decode(errors="replace")

    async def write(self, path: str, data: str) -> None:
        s = self.need_session()
        await self.flush()
        await s.awrite_file(path, data)


ToolFn = Callable[..., Awaitable["str | ToolOutput"]]


def cap_output(text: str, max_chars: int) -> tuple[str, int]:
    """`text` within `max_chars`: head and tail kept (cut at line ends where possible), the number of elided
    characters and a hint in between. Returns (text, elided characters)."""
    if len(text) <= max_chars:
        return text, 0
    half = max(1, max_chars // 2)
    head, tail = text[:half], text[-half:]
    nl = head.rfind("\n")
    head = head[: nl + 1] if nl > half // 2 else head
    nl = tail.find("\n")
    tail = tail[nl + 1:] if 0 <= nl < half // 2 else tail
    elided = len(text) - len(head) - len(tail)
    note = f"\n[... {elided} characters elided; narrow the output with head, tail, grep or sed -n ...]\n"
    return head + note + tail, elided


@dataclass(frozen=True)
class Tool:
    """A named async function the model may call, with a JSON schema for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    fn: ToolFn  # async fn(ctx, **arguments) -> str | ToolOutput
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    validator: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "validator", jsonschema.Draft202012Validator(self.parameters))

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling shape: {"type": "function", "function": {name, description, parameters}}."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def with_limits(self, timeout_s: float | None = None, max_output_chars: int | None = None) -> "Tool":
        return dataclasses.replace(self, timeout_s=timeout_s or self.timeout_s,
                                   max_output_chars=max_output_chars or self.max_output_chars)

    async def run(self, ctx: ToolContext, call: ToolCall) -> ToolResult:
        """Call the tool; every failure is a result with `ok=False`, never an exception."""
        t0 = time.perf_counter()
        errors = sorted(self.validator.iter_errors(call.arguments), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path)
            msg = f"invalid arguments for {self.name}: {errors[0].message}" + (f" (at {where})" if where else "")
            return ToolResult(call, msg + f"; expected {_signature(self)}", ok=False, seconds=time.perf_counter() - t0)
        try:
            # the sandbox enforces the timeout inside the session; this bound catches tools that hang elsewhere
            async with asyncio.timeout(self.timeout_s + 5.0):
                out = await self.fn(dataclasses.replace(ctx, timeout_s=self.timeout_s), **call.arguments)
        except TimeoutError:
            out = ToolOutput(f"{self.name} timed out after {self.timeout_s:g}s", ok=False)
        except SandboxFailure as exc:  # the sandbox failed (a workspace lost with its Ray worker): the environment's
            out = ToolOutput(f"the sandbox failed: {exc}", ok=False, env_error=True)
        except SandboxError as exc:
            # a failed read or write carries the in-sandbox traceback: its last line is the reason
            lines = [ln for ln in str(exc).splitlines() if ln.strip()]
            out = ToolOutput(f"{self.name} failed: {lines[-1].strip() if lines else exc}", ok=False)
        except Exception as exc:  # noqa: BLE001 - a tool's crash is an observation for the model
            out = ToolOutput(f"{self.name} failed: {type(exc).__name__}: {exc}", ok=False)
        if isinstance(out, str):
            out = ToolOutput(out)
        text, elided = cap_output(out.text, self.max_output_chars)
        return ToolResult(call, text, out.ok, time.perf_counter() - t0, elided, out.ends_episode, out.env_error,
                          list(out.images))


def _signature(t: Tool) -> str:
    props = t.parameters.get("properties", {})
    req = set(t.parameters.get("required", []))
    return t.name + "(" + ", ".join(f"{k}: {v.get('type', 'any')}" + ("" if k in req else "?") for k, v in props.items()) + ")"


# ---- @tool: a Tool from a typed function

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def _json_type(tp: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    if origin is Literal:
        values = list(typing.get_args(tp))
        return {"type": _SIMPLE.get(type(values[0]), "string"), "enum": values}
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) == 1:
            return _json_type(inner[0])
        return {"anyOf": [_json_type(a) for a in inner]}
    if origin is list:
        (item,) = typing.get_args(tp) or (str,)
        return {"type": "array", "items": _json_type(item)}
    if origin is dict:
        return {"type": "object"}
    raise TypeError(f"@tool: no JSON schema for the annotation {tp!r} (use str, int, float, bool, list[...], "
                    "dict, Literal[...] or an optional of those)")


def _doc_parts(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {argument: description}) from a Google-style docstring."""
    doc = inspect.cleandoc(doc or "")
    head, _, args = doc.partition("\nArgs:")
    params: dict[str, str] = {}
    last = None
    for line in args.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        name, sep, text = stripped.partition(":")
        if sep and name.isidentifier() and line.startswith("    ") and not line.startswith("        "):
            params[name] = text.strip()
            last = name
        elif last is not None:
            params[last] += " " + stripped
    return " ".join(head.split()), params


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
         max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS) -> Any:
    """Make a `Tool` of a typed function `f(ctx: ToolContext, arg: type = default, ...)` (sync or async;
    the `ctx` parameter may be left out). The first docstring paragraph describes the tool, an `Args:`
    section its arguments."""

    def build(f: Callable[..., Any]) -> Tool:
        hints = typing.get_type_hints(f)
        sig = inspect.signature(f)
        description, docs = _doc_parts(f.__doc__ or "")
        props: dict[str, Any] = {}
        required: list[str] = []
        wants_ctx = False
        for i, (pname, p) in enumerate(sig.parameters.items()):
            tp = hints.get(pname, str)
            if i == 0 and tp is ToolContext:
                wants_ctx = True
                continue
            schema = _json_type(tp)
            if pname in docs:
                schema["description"] = docs[pname]
            if p.default is inspect.Parameter.empty:
                required.append(pname)
            elif p.default is not None:
                schema["default"] = p.default
            props[pname] = schema
        params: dict[str, Any] = {"type": "object", "properties": props, "required": required,
                                  "additionalProperties": False}

        async def call(ctx: ToolContext, **kwargs: Any) -> Any:
            out = f(ctx, **kwargs) if wants_ctx else f(**kwargs)
            return await out if inspect.isawaitable(out) else out

        return Tool(name or f.__name__, description or f.__name__, params, call, timeout_s, max_output_chars)

    return build(fn) if fn is not None else build


# ---- the built-ins


def exec_output(r: ExecResult, timeout_s: float) -> ToolOutput:
    """An execution as the model reads it: its output, then how it ended."""
    text = r.stdout
    if r.stderr:
        text += ("" if not text or text.endswith("\n") else "\n") + r.stderr
    if r.status is ExecStatus.SANDBOX_ERROR:
        return ToolOutput(f"the sandbox failed: {r.error}", ok=False, env_error=True)
    ends = {ExecStatus.OK: "[exit code 0]", ExecStatus.TIMEOUT: f"[timed out after {timeout_s:g}s]",
            ExecStatus.CPU_LIMIT: "[killed: CPU time limit]", ExecStatus.OOM: "[killed: out of memory]",
            ExecStatus.OUTPUT_LIMIT: "[killed: too much output]"}
    end = ends.get(r.status, f"[exit code {r.exit_code}]" if r.exit_code is not None else f"[killed by signal {r.signal}]")
    sep = "" if not text or text.endswith("\n") else "\n"
    return ToolOutput(text + sep + end, ok=r.status in (ExecStatus.OK, ExecStatus.RUNTIME_ERROR))


@tool
async def bash(ctx: ToolContext, command: str) -> ToolOutput:
    """Run a shell command in the workspace; returns its output and exit code.

    Args:
        command: the command line, run by /bin/sh -c in the workspace directory
    """
    return exec_output(await ctx.exec(command), ctx.timeout_s)


@tool
async def python(ctx: ToolContext, code: str) -> ToolOutput:
    """Run a Python program in the workspace; returns what it printed.

    Args:
        code: the program's source
    """
    return exec_output(await ctx.exec(code=code), ctx.timeout_s)


@tool
async def read_file(ctx: ToolContext, path: str, start_line: int = 1, max_lines: int = 400) -> str:
    """Read a text file, with line numbers.

    Args:
        path: the file, relative to the workspace
        start_line: the first line to show (1-based)
        max_lines: how many lines to show at most
    """
    lines = (await ctx.read(path)).splitlines()
    lo = max(1, start_line)
    shown = lines[lo - 1: lo - 1 + max(1, max_lines)]
    body = "\n".join(f"{lo + i:5d}  {line}" for i, line in enumerate(shown))
    rest = len(lines) - (lo - 1 + len(shown))
    return body + (f"\n[{rest} more lines: read_file with start_line={lo + len(shown)}]" if rest > 0 else "")


@tool
async def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Create or overwrite a file (parent directories are made).

    Args:
        path: the file, relative to the workspace
        content: the whole new content
    """
    await ctx.write(path, content)
    return f"wrote {len(content.encode())} bytes to {path}"


@tool
async def edit(ctx: ToolContext, path: str, old: str, new: str) -> ToolOutput:
    """Replace one exact occurrence of `old` by `new` in a file.

    Args:
        path: the file, relative to the workspace
        old: the exact text to replace; it must occur exactly once (add surrounding lines to make it unique)
        new: the replacement text
    """
    text = await ctx.read(path)
    count = text.count(old) if old else 0
    if count != 1:
        why = "is empty" if not old else ("was not found" if count == 0 else f"occurs {count} times")
        return ToolOutput(f"edit {path}: the old text {why}; nothing changed (read_file to see the exact text)", ok=False)
    await ctx.write(path, text.replace(old, new, 1))
    return ToolOutput(f"edited {path}: replaced {len(old)} characters by {len(new)}")


@tool
async def run_tests(ctx: ToolContext) -> ToolOutput:
    """Run the task's visible tests; returns their output and exit code."""
    if not ctx.test_command:
        return ToolOutput("this task has no visible tests: write your own checks and run them with bash", ok=False)
    return exec_output(await ctx.exec(ctx.test_command), ctx.timeout_s)


@tool
async def submit(answer: str = "") -> ToolOutput:
    """Finish the task: call it when the work is done. The workspace is then checked by the task's hidden tests.

    Args:
        answer: a final answer, for tasks that ask for one
    """
    return ToolOutput("submitted" + (f": {answer}" if answer else ""), ends_episode=True)


@tool(name="submit")
async def submit_short(answer: str) -> ToolOutput:
    """Give the answer."""
    return ToolOutput("submitted", ends_episode=True)  # the short-schema submit of the built-in small-model domains


@tool
async def recall(ctx: ToolContext, query: str, k: int = 5) -> ToolOutput:
    """Search everything seen so far in this episode (every tool output in full) and the task's documents.

    Args:
        query: words to look for
        k: how many matches to return
    """
    if ctx.memory is None:
        return ToolOutput("recall is not available in this episode", ok=False)
    hits = ctx.memory.search(query, max(1, min(k, 20)))
    if not hits:
        return ToolOutput(f"no matches for {query!r}")
    return ToolOutput("\n".join(f"- {h.source}: {h.snippet}" for h in hits))


BUILTIN = {t.name: t for t in (bash, python, read_file, write_file, edit, run_tests, submit, recall)}


def default_tools(recall_tool: bool = True) -> list[Tool]:
    """bash, python, read_file, write_file, edit, run_tests, submit and recall, in that order."""
    names = ["bash", "python", "read_file", "write_file", "edit", "run_tests", "submit"] + (["recall"] if recall_tool else [])
    return [BUILTIN[n] for n in names]


def tools_named(names: list[str]) -> list[Tool]:
    """Built-in tools by name, in the order given (an unknown name is a ValueError that lists the known ones)."""
    unknown = [n for n in names if n not in BUILTIN]
    if unknown:
        raise ValueError(f"unknown tools {unknown}; the built-ins are {', '.join(BUILTIN)}")
    return [BUILTIN[n] for n in names]
