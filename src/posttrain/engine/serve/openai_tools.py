"""Tool calls in `posttrain serve`: an OpenAI `tools` conversation in, `tool_calls` out.

Rendering a request (`chat_prompt`):
- a checkpoint whose chat template references `tools` and writes calls as `<tool_call>` blocks (the
  Hermes / Qwen2.5 / Qwen3 templates) is rendered by its own template, with the tool schemas and the
  messages' `tool_calls` (arguments as objects) and `tool` results;
- a template that references `tools` but writes calls some other way (Llama 3.1's bare JSON,
  Mistral's `[TOOL_CALLS]`) is refused with a 400: the server would not read its calls back;
- everything else (the plain template of the built-in model, templates without tool support) is
  rendered in posttrain's built-in text call format (`engine/tool_format.py`), byte for byte the text
  the agent runtime trains and runs on: the system message (or, without one, the format's own
  `SYSTEM` text) and the tools as the prefix, the first user message as the task, an assistant
  message as its text and `<tool_call>{json}</tool_call>`, a `tool` message as a `<tool_response>`
  named after the call it answers, and the agent client's labelled user messages
  (`CHAT_SUMMARY_LABEL`, `CHAT_ERROR_LABEL`) as summary and error blocks; other later user (and
  system) messages are `<note>` blocks. Each piece is encoded on its own (BOS on the prefix only),
  as the runtime's codec encodes each context entry.

Reading a completion (`tool_message`): with `tool_choice` other than `none` the engine samples with
the stop string `</tool_call>` (one call per reply, as the runtime samples), the call is parsed with
`tool_format.parse_call`, and the reply is `content` = the text before the call (null when empty),
`tool_calls` = [{"id": "call_...", "type": "function", "function": {"name", "arguments": JSON}}] and
`finish_reason` "tool_calls". A completion without a readable call is returned as plain content
with the engine's finish reason: the client sees the model's text and decides (posttrain's agent
client counts a format error). `required` and a named function are forced by ending the prompt with
the call's opening (`<tool_call>`, or `<tool_call>{"name": "NAME", "arguments": `), which the
completion continues. `none` reads no call (the tools still appear in the prompt, as the
conversation may hold earlier calls).
Streaming (`HeldStream`): text before a call streams live as content; a call is sent whole, as one
`tool_calls` delta (`{"index": 0, "id", "type": "function", "function": {"name", "arguments"}}`),
once the completion has ended, then the choice's `finish_reason: "tool_calls"` chunk. `logprobs`
with streamed tool calls are refused (a 400): the held text's tokens would not line up with chunks.
Does not cover: parallel calls in one reply, constrained decoding of the arguments, validation of the arguments
against the schema (the client's tools do that).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from posttrain.engine import tool_format as fmt
from posttrain.engine.chat import ChatTemplate, normalize_messages
from posttrain.engine.serve.openai_protocol import ToolChoice, bad_request
from posttrain.models.tokenizer import Tokenizer
from posttrain.types import ToolCall


@dataclass(frozen=True)
class ToolPlan:
    """How a chat request's completions are read."""

    parse: bool = False  # look for a call in each completion
    forced: str = ""  # the text the prompt ends with, which each completion continues
    stop: tuple[str, ...] = ()  # stop strings added to the request's own


NO_TOOLS = ToolPlan()


def chat_prompt(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, choice: ToolChoice, template: ChatTemplate,
    tokenizer: Tokenizer,
) -> tuple[list[int], ToolPlan]:
    """The prompt's token ids and how to read its completions. Raises `ChatTemplateError` (bad messages) or an
    `APIError` 400 (a template whose call syntax this server does not read)."""
    if not tools:
        return template.encode(messages, tokenizer), NO_TOOLS
    if template.supports_tools:
        if fmt.CALL_OPEN not in (template.tools_source or ""):
            raise bad_request(
                "tools: this checkpoint's chat template writes tool calls in a syntax this server does not read "
                f"(it reads {fmt.CALL_OPEN} blocks: Hermes, Qwen)", "tools")
        forced = _forced(choice, fmt.CALL_OPEN + "\n")
        return template.encode(messages, tokenizer, tools=tools, suffix=forced), _plan(choice, forced)
    forced = _forced(choice, fmt.CALL_OPEN)
    pieces = text_format_pieces(messages, tools) + ([forced] if forced else [])
    ids = [t for i, p in enumerate(pieces) for t in tokenizer.encode(p, add_bos=i == 0)]
    return ids, _plan(choice, forced)


def _forced(choice: ToolChoice, opening: str) -> str:
    if choice.mode == "required":
        return opening
    if choice.mode == "function":
        return opening + '{"name": ' + json.dumps(choice.name) + ', "arguments": '
    return ""


def _plan(choice: ToolChoice, forced: str) -> ToolPlan:
    if choice.mode == "none":
        return NO_TOOLS
    return ToolPlan(True, forced, fmt.STOP)


def text_format_pieces(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[str]:
    """The conversation in the built-in text call format, one string per context entry (the prefix first)."""
    msgs = normalize_messages(messages)
    lead = 0
    while lead < len(msgs) and msgs[lead]["role"] in ("system", "developer"):
        lead += 1
    system = "\n".join(m["content"] for m in msgs[:lead]) if lead else fmt.SYSTEM
    pieces = [fmt.render_prefix(tools, system)]
    names: dict[str, str] = {}  # tool_call_id -> the function it called
    task_seen = False
    for m in msgs[lead:]:
        role, content = m["role"], m["content"]
        if role == "assistant":
            calls = [ToolCall(tc["function"]["name"], tc["function"]["arguments"]) for tc in m.get("tool_calls", [])]
            names.update({tc["id"]: tc["function"]["name"] for tc in m.get("tool_calls", []) if tc["id"]})
            pieces.append(content + "".join(fmt.render_call(c) for c in calls))
        elif role == "tool":
            name = names.get(m.get("tool_call_id", ""), m.get("name", "tool"))
            pieces.append(fmt.render_observation(name, content))
        elif role == "user" and not task_seen:
            task_seen = True
            pieces.append(fmt.render_task(content))
        elif role == "user" and content.startswith(fmt.CHAT_ERROR_LABEL):
            pieces.append(fmt.render_format_error(content.removeprefix(fmt.CHAT_ERROR_LABEL)))
        elif role == "user" and content.startswith(fmt.CHAT_SUMMARY_LABEL):
            pieces.append(fmt.render_summary(content.removeprefix(fmt.CHAT_SUMMARY_LABEL)))
        else:
            pieces.append(fmt.render_note(content))
    return pieces


def read_reply(text: str, plan: ToolPlan) -> tuple[str | None, list[dict[str, Any]] | None]:
    """A completion's (content, tool_calls): a call read out of it (content: the text before it, None when
    empty), or (the text as it is, None)."""
    if not plan.parse:
        return text, None
    full = plan.forced + text
    parsed = fmt.parse_call(full)
    if parsed.call is None:  # no readable call: the model's text, for the client to judge
        return full, None
    before = full[: full.rfind(fmt.CALL_OPEN)]
    call = {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": parsed.call.name, "arguments": json.dumps(parsed.call.arguments)},
    }
    return before or None, [call]


def tool_message(text: str, plan: ToolPlan, finish_reason: str) -> tuple[dict[str, Any], str]:
    """A completion's assistant message and finish reason ("tool_calls" when a call was read)."""
    content, calls = read_reply(text, plan)
    if calls is None:
        return {"role": "assistant", "content": content}, finish_reason
    return {"role": "assistant", "content": content, "tool_calls": calls}, "tool_calls"


class HeldStream:
    """One streamed choice's text, with whatever may be a call held back until the completion ends.

    Text before a `<tool_call>` streams live as content (a tail that may be the start of the tag waits
    for the next piece); from the tag on, nothing is sent until the end, when `finish` returns the
    content still owed and the calls (the same reading as `read_reply`, so a stream concatenates to the
    non-streamed message).
    """

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.text = plan.forced
        self.sent = 0

    def push(self, piece: str) -> str:
        """The content that may be sent now."""
        self.text += piece
        at = self.text.find(fmt.CALL_OPEN, self.sent)  # a tag never starts before `sent`: its head was held
        if at < 0:  # hold a tail that could still grow into the tag
            at = len(self.text) - next(
                (k for k in range(len(fmt.CALL_OPEN) - 1, 0, -1) if self.text.endswith(fmt.CALL_OPEN[:k])), 0)
        out = self.text[self.sent:at] if at > self.sent else ""
        self.sent += len(out)
        return out

    def finish(self) -> tuple[str, list[dict[str, Any]] | None]:
        """(the content not sent yet, the calls or None)."""
        content, calls = read_reply(self.text[len(self.plan.forced):], self.plan)
        owed = (content or "")[self.sent:]
        return owed, calls
