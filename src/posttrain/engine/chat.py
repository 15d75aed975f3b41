"""Chat templating: turn OpenAI-style `messages` into the prompt a model was trained on.

Covers: a checkpoint's own Jinja chat template (`chat_template` in
`tokenizer_config.json`, or a `chat_template.jinja` file, as transformers
writes them), rendered in a sandboxed Jinja environment with the variables
HF templates expect (`messages`, `add_generation_prompt`, `bos_token`,
`eos_token`, `raise_exception`, `strftime_now`); and the plain template for
models that have none (the built-in character model): message contents joined
by newlines, no role markers, so `{"role": "user", "content": "12+34="}`
prompts the arithmetic model exactly as its training prompts did.
Does not cover: tool calls, images or other non-text content parts (rejected
with `ChatTemplateError`), or generation-side parsing of the reply.
"""

from __future__ import annotations

import json
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


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Validate roles and flatten content to strings: [{"role", "content"}]."""
    if not messages:
        raise ChatTemplateError("messages must hold at least one message")
    out = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ROLES:
            raise ChatTemplateError(f"messages[{i}].role = {role!r}: expected one of {', '.join(ROLES)}")
        out.append({"role": role, "content": message_text(m.get("content"), i)})
    return out


@dataclass(frozen=True)
class ChatTemplate:
    """Renders messages to a prompt; `source` is the Jinja text, or None for the plain template.

    >>> ChatTemplate.plain().render([{"role": "user", "content": "12+34="}])
    '12+34='
    """

    source: str | None = None
    special_tokens: tuple[tuple[str, str], ...] = ()  # (name, text): bos_token, eos_token, ...

    @classmethod
    def plain(cls) -> ChatTemplate:
        return cls(None)

    @classmethod
    def from_checkpoint(cls, directory: str | Path) -> ChatTemplate:
        """The checkpoint's template when it ships one, else the plain template."""
        directory = Path(directory)
        source: str | None = None
        specials: dict[str, str] = {}
        jinja_file = directory / "chat_template.jinja"
        config_file = directory / "tokenizer_config.json"
        if config_file.exists():
            config = json.loads(config_file.read_text())
            source = _pick_template(config.get("chat_template"))
            for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
                value = config.get(key)
                value = value.get("content") if isinstance(value, dict) else value
                if isinstance(value, str):
                    specials[key] = value
        if jinja_file.exists():
            source = jinja_file.read_text()
        return cls(source, tuple(sorted(specials.items())))

    @property
    def is_plain(self) -> bool:
        return self.source is None

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        msgs = normalize_messages(messages)
        if self.source is None:
            return "\n".join(m["content"] for m in msgs)
        try:
            return _compile(self.source).render(
                messages=msgs, add_generation_prompt=add_generation_prompt, **dict(self.special_tokens)
            )
        except ChatTemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template bug or a template-raised refusal: the user's request fails, not the server
            raise ChatTemplateError(f"chat template failed: {exc}") from None

    def encode(self, messages: list[dict[str, Any]], tokenizer: Tokenizer) -> list[int]:
        """Prompt token ids. A Jinja template writes its own BOS, so none is added (as transformers does)."""
        return tokenizer.encode(self.render(messages), add_bos=self.is_plain)


def _pick_template(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        return named.get("default") or next((t for t in named.values() if isinstance(t, str)), None)
    return None


_COMPILED: dict[str, Any] = {}


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
