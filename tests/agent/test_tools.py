"""Each built-in tool's success and failure; the output cap; `@tool` schemas; failures are observations."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from posttrain.agent.episode import ToolCall
from posttrain.agent.recall import Memory
from posttrain.agent.tools import BUILTIN, ToolContext, ToolOutput, cap_output, default_tools, tool, tools_named
from posttrain.sandbox.session import Session


@pytest.fixture
def ctx(sandbox):
    s = Session(sandbox, files={"a.txt": "one\ntwo\nthree\n", "t.sh": "grep -q two a.txt"})
    memory = Memory()
    memory.add("step 1: bash", "the secret port is 8231")
    yield ToolContext(s, s.limits, "sh t.sh", memory)
    s.close()
    memory.close()


def run(ctx, name, **args):
    return asyncio.run(BUILTIN[name].run(ctx, ToolCall(name, args)))


def test_bash_success_and_failure(ctx):
    r = run(ctx, "bash", command="echo hi; echo oops >&2")
    assert r.ok and "hi" in r.output and "oops" in r.output and "[exit code 0]" in r.output
    r = run(ctx, "bash", command="exit 3")
    assert r.ok and "[exit code 3]" in r.output  # a failing command is information, not a failed call


def test_bash_timeout_is_an_observation(ctx):
    quick = BUILTIN["bash"].with_limits(timeout_s=0.5)
    r = asyncio.run(quick.run(ctx, ToolCall("bash", {"command": "sleep 5"})))
    assert not r.ok and "timed out after 0.5s" in r.output and r.seconds < 4


def test_python_success_and_failure(ctx):
    assert "42" in run(ctx, "python", code="print(6 * 7)").output
    r = run(ctx, "python", code="raise ValueError('bad')")
    assert "ValueError: bad" in r.output and "[exit code 1]" in r.output


def test_read_file(ctx):
    r = run(ctx, "read_file", path="a.txt", start_line=2, max_lines=1)
    assert r.ok and "2  two" in r.output and "three" not in r.output and "1 more lines" in r.output
    r = run(ctx, "read_file", path="missing.txt")
    assert not r.ok and "No such file" in r.output and "Traceback" not in r.output


def test_write_file(ctx):
    r = run(ctx, "write_file", path="d/new.txt", content="x\n")
    assert r.ok and ctx.session.read_file("d/new.txt") == b"x\n"
    r = run(ctx, "write_file", path="/proc/nope/x", content="x")
    assert not r.ok and r.output.startswith("write_file failed")


def test_edit_exact_replacement(ctx):
    assert run(ctx, "edit", path="a.txt", old="two", new="TWO").ok
    assert ctx.session.read_file("a.txt") == b"one\nTWO\nthree\n"
    r = run(ctx, "edit", path="a.txt", old="absent", new="x")
    assert not r.ok and "was not found" in r.output
    ctx.session.write_file("b.txt", "x x")
    r = run(ctx, "edit", path="b.txt", old="x", new="y")
    assert not r.ok and "occurs 2 times" in r.output and ctx.session.read_file("b.txt") == b"x x"


def test_run_tests(ctx):
    assert "[exit code 0]" in run(ctx, "run_tests").output
    ctx.session.write_file("a.txt", "none")
    assert "[exit code 1]" in run(ctx, "run_tests").output
    ctx.test_command = None
    r = run(ctx, "run_tests")
    assert not r.ok and "no visible tests" in r.output


def test_submit_ends_the_episode(ctx):
    r = run(ctx, "submit", answer="42")
    assert r.ok and r.ends_episode and "42" in r.output


def test_recall(ctx):
    r = run(ctx, "recall", query="which port?")
    assert r.ok and "8231" in r.output
    assert "no matches" in run(ctx, "recall", query="zebra").output
    ctx.memory = None
    assert not run(ctx, "recall", query="port").ok


def test_bad_arguments_are_observations(ctx):
    r = run(ctx, "bash", cmd="ls")
    assert not r.ok and "invalid arguments for bash" in r.output and "command: string" in r.output
    r = run(ctx, "read_file", path=3)
    assert not r.ok and "invalid arguments" in r.output


def test_a_crashing_tool_is_an_observation(ctx):
    @tool
    async def boom(x: int) -> str:
        """Always fails."""
        raise RuntimeError(f"kaboom {x}")

    r = asyncio.run(boom.run(ctx, ToolCall("boom", {"x": 1})))
    assert not r.ok and "RuntimeError: kaboom 1" in r.output


def test_output_cap_keeps_head_and_tail():
    text = "".join(f"line {i}\n" for i in range(1000))
    capped, elided = cap_output(text, 200)
    assert len(capped) < 400 and capped.startswith("line 0\n") and capped.endswith("line 999\n")
    assert f"{elided} characters elided" in capped and "grep" in capped and elided > len(text) - 250
    assert cap_output("short", 200) == ("short", 0)


def test_capped_tool_output(ctx):
    small = BUILTIN["bash"].with_limits(max_output_chars=300)
    r = asyncio.run(small.run(ctx, ToolCall("bash", {"command": "seq 1 5000"})))
    assert r.elided_chars > 0 and r.output.startswith("1\n") and "[exit code 0]" in r.output


def test_tool_decorator_builds_the_schema():
    @tool(timeout_s=5)
    def lookup(ctx: ToolContext, key: str, mode: Literal["fast", "slow"] = "fast", n: int | None = None,
               tags: list[str] | None = None) -> ToolOutput:
        """Look a key up.

        Args:
            key: what to look up
            mode: how hard to look
        """
        return ToolOutput(f"{key}:{mode}:{n}:{tags}")

    f = lookup.schema()["function"]
    assert f["name"] == "lookup" and f["description"] == "Look a key up." and lookup.timeout_s == 5
    p = f["parameters"]
    assert p["required"] == ["key"] and p["additionalProperties"] is False
    assert p["properties"]["key"] == {"type": "string", "description": "what to look up"}
    assert p["properties"]["mode"]["enum"] == ["fast", "slow"] and p["properties"]["mode"]["default"] == "fast"
    assert p["properties"]["n"] == {"type": "integer"}
    assert p["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    r = asyncio.run(lookup.run(ToolContext(None), ToolCall("lookup", {"key": "k", "n": 2})))
    assert r.ok and r.output == "k:fast:2:None"
    r = asyncio.run(lookup.run(ToolContext(None), ToolCall("lookup", {"key": "k", "mode": "medium"})))
    assert not r.ok and "medium" in r.output


def test_decorator_rejects_unknown_annotations():
    with pytest.raises(TypeError, match="no JSON schema"):
        @tool
        def bad(x: set) -> str:
            return ""


def test_tool_sets():
    assert [t.name for t in default_tools()] == ["bash", "python", "read_file", "write_file", "edit", "run_tests",
                                                 "submit", "recall"]
    assert default_tools(recall_tool=False)[-1].name == "submit"
    with pytest.raises(ValueError, match="unknown tools"):
        tools_named(["bash", "nope"])


def test_a_sessionless_context_fails_cleanly():
    r = asyncio.run(BUILTIN["bash"].run(ToolContext(None), ToolCall("bash", {"command": "ls"})))
    assert not r.ok and "needs a sandbox session" in r.output


def test_a_lost_workspace_is_an_env_error_not_an_observation():
    from posttrain.sandbox import ExecResult, ExecStatus, Limits, SessionLost

    class Lost:  # a workspace whose holder died (a Ray sandbox worker): every file operation raises SessionLost
        limits = Limits()

        async def aread_file(self, path):
            raise SessionLost("session s1 was lost with sandbox worker 0, which died")

        async def awrite_file(self, path, data):
            await self.aread_file(path)

        async def aexec(self, command=None, **kwargs):  # an execution answers as a failing sandbox
            return ExecResult(ExecStatus.SANDBOX_ERROR, error="session s1 was lost with sandbox worker 0, which died")

    ctx = ToolContext(Lost(), Limits())
    for name, args in [("read_file", {"path": "a.txt"}), ("write_file", {"path": "a.txt", "content": "x"}),
                       ("bash", {"command": "ls"})]:
        r = run(ctx, name, **args)
        assert not r.ok and r.env_error and "lost with sandbox worker 0" in r.output, name
    ctx.staged.files = {"a.txt": "1"}  # task files not laid out yet: the read lays them out first, and that fails
    r = run(ctx, "read_file", path="a.txt")
    assert not r.ok and r.env_error and "could not lay out" in r.output and ctx.staged.files == {"a.txt": "1"}
