"""Chat templating: turn OpenAI-style `messages` into the prompt a model was trained on.

Covers: a checkpoint's own Jinja chat template (`chat_template` in
`tokenizer_config.json`, or a `chat_template.jinja` file, as transformers
writes them), rendered in a sandboxed Jinja environment with the variables
HF templates expect (`messages`, `add_generation_prompt`, `bos_token`,
`eos_token`, `raise_exception`, `strftime_now`); and the plain template for
models that have none (the built-in character model): message contents joined
by newlines, no role markers, so `{"role": "user", "content": "12+34="}`
prompts the arithmetic model exactly as its training prompts did. Tool
conversations: assistant `tool_calls` (arguments parsed from their JSON string
into objects, as HF templates expect them), `tool_call_id` and `name` are kept
on the messages, and a template that references `tools` (`supports_tools`) is
rendered with the request's tool schemas.
Does not cover: images or other non-text content parts (rejected with
`ChatTemplateError`), the built-in text call format for templates without tool
support, or generation-side parsing of the reply (`engine/serve/openai_tools.py`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from posttrain.errors import UserError
from posttrain.models.tokenizer import Tokenizer

ROLES = ("system", "developer", "user", "assistant", "tool")


class ChatTemplateError(UserError, ValueError):
    """The messages cannot be rendered: the text says which message and why."""


def message_text(content: Any, index: int) -> str:
    """OpenAI content (a string, or a list of `{"type": "text", "text": ...}` parts) -> plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ChatTemplateError(f"messages[{index}]: only text content parts are supported, got {kind!r}")
            parts.append(part["text"])
        return "".join(parts)
    raise ChatTemplateError(f"messages[{index}].content must be a string or a list of text parts")


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validate roles and flatten content to strings: [{"role", "content"}], plus `tool_calls` (arguments as
    objects), `tool_call_id` and `name` where a message has them."""
    if not messages:
        raise ChatTemplateError("messages must hold at least one message")
    out = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ROLES:
            raise ChatTemplateError(f"messages[{i}].role = {role!r}: expected one of {', '.join(ROLES)}")
        msg: dict[str, Any] = {"role": role, "content": message_text(m.get("content"), i)}
        for key in ("tool_call_id", "name"):
            value = m.get(key)
            if value is not None:
                if not isinstance(value, str):
                    raise ChatTemplateError(f"messages[{i}].{key} must be a string")
                msg[key] = value
        if m.get("tool_calls"):
            if role != "assistant":
                raise ChatTemplateError(f"messages[{i}]: only assistant messages carry tool_calls")
            msg["tool_calls"] = [_tool_call(tc, f"messages[{i}].tool_calls[{j}]") for j, tc in enumerate(m["tool_calls"])]
        out.append(msg)
    return out


def _tool_call(tc: Any, where: str) -> dict[str, Any]:
    """An assistant message's call in the OpenAI shape, its arguments parsed into an object."""
    fn = tc.get("function") if isinstance(tc, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ChatTemplateError(f'{where} must be {{"id", "type": "function", "function": {{"name", "arguments"}}}}')
    if tc.get("type", "function") != "function":
        raise ChatTemplateError(f"{where}.type = {tc.get('type')!r}: only function calls are supported")
    args = fn.get("arguments")
    if args is None or args == "":
        args = {}
    elif isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            raise ChatTemplateError(f"{where}.function.arguments is not valid JSON") from None
    if not isinstance(args, dict):
        raise ChatTemplateError(f"{where}.function.arguments must be a JSON object")
    call_id = tc.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise ChatTemplateError(f"{where}.id must be a string")
    return {"id": call_id or "", "type": "function", "function": {"name": fn["name"], "arguments": args}}


@dataclass(frozen=True)
class ChatTemplate:
    """Renders messages to a prompt; `source` is the Jinja text, or None for the plain template.

    >>> ChatTemplate.plain().render([{"role": "user", "content": "12+34="}])
    '12+34='
    """

    source: str | None = None
    special_tokens: tuple[tuple[str, str], ...] = ()  # (name, text): bos_token, eos_token, ...
    tool_source: str | None = None  # a named "tool_use" template: used instead when tools are given (as transformers does)

    @classmethod
    def plain(cls) -> ChatTemplate:
        return cls(None)

    @classmethod
    def from_checkpoint(cls, directory: str | Path) -> ChatTemplate:
        """The checkpoint's template when it ships one, else the plain template."""
        directory = Path(directory)
        source: str | None = None
        tool_source: str | None = None
        specials: dict[str, str] = {}
        jinja_file = directory / "chat_template.jinja"
        config_file = directory / "tokenizer_config.json"
        if config_file.exists():
            config = json.loads(config_file.read_text())
            source = _pick_template(config.get("chat_template"))
            tool_source = _pick_template(config.get("chat_template"), "tool_use")
            for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
                value = config.get(key)
                value = value.get("content") if isinstance(value, dict) else value
                if isinstance(value, str):
                    specials[key] = value
        if jinja_file.exists():
            source = jinja_file.read_text()
        return cls(source, tuple(sorted(specials.items())), tool_source if tool_source != source else None)

    @property
    def is_plain(self) -> bool:
        return self.source is None

    @property
    def tools_source(self) -> str | None:
        """The template that renders a request with tools."""
        return self.tool_source or self.source

    @property
    def supports_tools(self) -> bool:
        """Whether the template renders tool schemas (it references `tools`, as HF tool-use templates do)."""
        return self.tools_source is not None and _TOOLS_VARIABLE.search(self.tools_source) is not None

    def render(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The prompt text. `tools` (OpenAI function schemas) reach a Jinja template as its `tools` variable."""
        msgs = normalize_messages(messages)
        source = self.tools_source if tools else self.source
        if source is None:
            return "\n".join(m["content"] for m in msgs)
        extra = {"tools": tools} if tools else {}
        try:
            return _compile(source).render(
                messages=msgs, add_generation_prompt=add_generation_prompt, **extra, **dict(self.special_tokens)
            )
        except ChatTemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template bug or a template-raised refusal: the user's request fails, not the server
            raise ChatTemplateError(f"chat template failed: {exc}") from None

    def encode(
        self, messages: list[dict[str, Any]], tokenizer: Tokenizer, tools: list[dict[str, Any]] | None = None, suffix: str = ""
    ) -> list[int]:
        """Prompt token ids (`suffix`: text the prompt ends with after the generation prompt). A Jinja template
        writes its own BOS, so none is added (as transformers does)."""
        return tokenizer.encode(self.render(messages, tools=tools) + suffix, add_bos=self.is_plain)


def _pick_template(value: Any, name: str = "default") -> str | None:
    """The template called `name` ("default": the default one, or the first) of a checkpoint's `chat_template`."""
    if isinstance(value, str):
        return value if name == "default" else None
    if isinstance(value, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        if name != "default":
            return named.get(name)
        return named.get("default") or next((t for t in named.values() if isinstance(t, str)), None)
    return None


_COMPILED: dict[str, Any] = {}
_TOOLS_VARIABLE = re.compile(r"\btools\b")


def _raise(message: str) -> None:
    raise ChatTemplateError(f"chat template refused the messages: {message}")


def _compile(source: str):
    if source not in _COMPILED:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(x, indent=indent, ensure_ascii=ensure_ascii)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        _COMPILED[source] = env.from_string(source)
    return _COMPILED[source]
