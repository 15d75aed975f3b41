"""The built-in text format for tool calls: how a local model is told about tools, calls one, and reads results.

One implementation for both sides: the agent runtime (`posttrain.agent`, which re-exports this module
as `posttrain.agent.format`) trains and runs models in this format, and `posttrain serve`
(`engine/serve/openai_tools.py`) renders an OpenAI `tools` conversation into the same text, so a model
trained by posttrain's agent loop is served exactly as it was trained. It lives in `engine/` because
`engine/` may not import `agent/` (the agent depends on the engine).

The format (the Hermes / Qwen2.5 shape, so instruction-tuned checkpoints already know it):

    <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>

One call per model turn: the runtime samples with the stop string `</tool_call>`, so the model
stops right after its call. Text before the call is the model's reasoning and is kept. What the
tool returned comes back as

    <tool_response name="bash">
    ...output...
    </tool_response>

and a completion without a parseable call as `<error>...</error>` (a format error, counted).
A compaction summary is `<summary>...</summary>`, a runtime note (the summary request) `<note>...</note>`.
The system block lists every tool's JSON schema, one per line, `json.dumps(sort_keys=True)`: the
prefix is byte-identical across turns and tasks, so the engine's prefix cache keeps it. A small model
(the built-in character-level one, whose cost grows with the square of the context) can be given the
compact listing instead, one signature per line (`read(path: string): Show a file.`); a model must be
driven with the listing it was trained with (`posttrain serve` renders the JSON listing).

Chat clients with native tools (`agent/openai_chat.py`) send the entries that have no chat role as user
messages starting with `CHAT_SUMMARY_LABEL` / `CHAT_ERROR_LABEL`; the server reads them back as
summary and error blocks.
Covers: rendering the prefix, the task block, observations, format errors, summaries and notes;
parsing a call; the chat labels.
Does not cover: native `tools`/`tool_calls` of OpenAI-compatible endpoints (`agent/openai_chat.py`),
the server's OpenAI adapter (`engine/serve/openai_tools.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from posttrain.types import ToolCall

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
STOP = (CALL_CLOSE,)
SUMMARY_OPEN, SUMMARY_CLOSE = "<summary>\n", "\n</summary>\n"
CHAT_SUMMARY_LABEL = "Summary of the work so far:\n"
CHAT_ERROR_LABEL = "Error: "

SYSTEM = (
    "You are an agent working in a sandboxed Linux workspace (the current directory). Act with tools: "
    "inspect files, run commands and tests, fix what fails, then call submit. Each reply holds your "
    "reasoning, if any, then exactly one call written as\n"
    '<tool_call>{"name": TOOL, "arguments": {...}}</tool_call>\n'
    "Results come back in <tool_response> blocks. Tools:\n"
)


Listing = Literal["json", "signature"]


def signature(function: dict) -> str:
    """`name(arg: type, optional?: type): description` of an OpenAI function schema."""
    params = function.get("parameters", {})
    req = set(params.get("required", []))
    args = ", ".join(f"{k}{'' if k in req else '?'}: {v.get('type', 'any')}" for k, v in params.get("properties", {}).items())
    return f"{function['name']}({args}): {function.get('description', '')}".rstrip(": ")


def render_prefix(schemas: list[dict], system: str = SYSTEM, listing: Listing = "json") -> str:
    """The stable prefix: the system text and one line per tool, its JSON schema (sorted keys, tools in the
    order given) or, with `listing="signature"`, its signature and description."""
    if listing == "signature":
        lines = [signature(s["function"]) for s in schemas]
    else:
        lines = [json.dumps(s["function"], sort_keys=True, separators=(", ", ": ")) for s in schemas]
    return "<system>\n" + system + "\n".join(lines) + "\n</system>\n"


def render_task(instruction: str) -> str:
    return "<task>\n" + instruction.strip() + "\n</task>\n"


def render_call(call: ToolCall) -> str:
    """A call as the model writes it (the scripted model writes this)."""
    return CALL_OPEN + json.dumps({"name": call.name, "arguments": call.arguments}) + CALL_CLOSE


def render_observation(name: str, output: str) -> str:
    return f'\n<tool_response name="{name}">\n{output}\n</tool_response>\n'


def render_format_error(message: str) -> str:
    return f"\n<error>\n{message}\n</error>\n"


def render_summary(text: str) -> str:
    return SUMMARY_OPEN + text + SUMMARY_CLOSE


def render_note(text: str) -> str:
    return "\n<note>\n" + text + "\n</note>\n"


@dataclass(frozen=True, slots=True)
class Parsed:
    """A completion's call, or why there is none."""

    call: ToolCall | None
    error: str = ""


def parse_call(text: str) -> Parsed:
    """The call in `text` (its last `<tool_call>`; the closing tag may have been cut as a stop string)."""
    at = text.rfind(CALL_OPEN)
    if at < 0:
        return Parsed(None, "no tool call: end each reply with " + CALL_OPEN + '{"name": ..., "arguments": {...}}'
                      + CALL_CLOSE + " (call submit when done)")
    body = text[at + len(CALL_OPEN):]
    end = body.find(CALL_CLOSE)
    body = (body if end < 0 else body[:end]).strip()
    try:
        obj = json.loads(body)
    except ValueError as exc:
        return Parsed(None, f"the tool call is not valid JSON ({exc.msg} at char {exc.pos})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return Parsed(None, 'the tool call must be a JSON object {"name": TOOL, "arguments": {...}}')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args)
        except ValueError:
            return Parsed(None, "the tool call's arguments are a string that is not JSON")
    if not isinstance(args, dict):
        return Parsed(None, "the tool call's arguments must be a JSON object")
    return Parsed(ToolCall(obj["name"], args))
