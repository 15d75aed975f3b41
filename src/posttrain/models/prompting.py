"""How a task becomes the input a model is prompted with: the one renderer rollout, evaluation, agents and serving share.

Covers: `PromptRenderer`: `raw` (the task's prompt as it is, what the built-in
model was pre-trained on; a system prompt, when one is set, goes on the line
before it) or `chat` (the task's conversation, `meta["messages"]` or its
prompt as one user message, after the system prompt when the conversation
has none, through the checkpoint's chat template, exactly as transformers'
`apply_chat_template(..., add_generation_prompt=True)` writes it); the token
ids of a rendered prompt (a chat template writes its own BOS, so none is
added, as transformers does); and the end-of-turn token ids that stop a
completion (`sampling`). Who builds a renderer from a config:
`engine/prompt_format.py` (`build_renderer`), the one place.
Does not cover: the templates themselves (`engine/chat.py`: `ChatTemplate`,
Jinja rendering) or multi-turn agent histories (the agent runtime).

The plain rendering of a conversation (raw models; `posttrain serve`'s plain
template alike): the messages' contents joined by newlines, no role markers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from posttrain.types import MESSAGES_KEY, SamplingParams, Task


class MessageTemplate(Protocol):
    """What the renderer needs of a chat template (`ChatTemplate` is one)."""

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str: ...


class _Tokenizer(Protocol):
    def encode(self, text: str, add_bos: bool = True) -> list[int]: ...


class _Encoder(Protocol):
    """What the renderer needs of an engine (any `Engine` is one)."""

    tokenizer: Any

    def encode(self, prompts: list[str]) -> list[list[int]] | None: ...


def plain_text(messages: list[dict[str, Any]]) -> str:
    """A conversation without a template: contents joined by newlines (`ChatTemplate.plain()` renders the same)."""
    return "\n".join(str(m.get("content") or "") for m in messages)


@dataclass(frozen=True)
class PromptRenderer:
    """Task -> prompt text -> prompt ids.

    >>> PromptRenderer().render(Task("t", "12+34="))
    '12+34='
    """

    mode: Literal["raw", "chat"] = "raw"
    template: MessageTemplate | None = None
    system_prompt: str | None = None
    end_of_turn: tuple[int, ...] = ()
    """Token ids that end an assistant turn (`<|im_end|>`, `<|eot_id|>`): stops, beside the tokenizer's EOS."""

    def __post_init__(self) -> None:
        if self.mode == "chat" and self.template is None:
            raise ValueError("PromptRenderer(mode='chat') needs a chat template")

    def conversation(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`messages` after the system prompt, when one is set and they start with none (also the server's rule)."""
        if self.system_prompt and (not messages or messages[0].get("role") != "system"):
            return [{"role": "system", "content": self.system_prompt}, *messages]
        return list(messages)

    def messages(self, task: Task) -> list[dict[str, Any]]:
        convo = task.meta.get(MESSAGES_KEY) or [{"role": "user", "content": task.prompt}]
        return self.conversation(convo)

    def render(self, task: Task) -> str:
        if self.mode == "raw" or self.template is None:
            if not self.system_prompt:
                return task.prompt  # byte for byte what the built-in model was trained on
            return plain_text(self.messages(task))
        return self.template.render(self.messages(task))

    def render_all(self, tasks: list[Task]) -> list[str]:
        return [self.render(t) for t in tasks]

    @property
    def adds_bos(self) -> bool:
        """Whether encoding adds the tokenizer's BOS (raw prompts do; a chat template writes its own)."""
        return self.mode == "raw"

    def encode(self, text: str, tokenizer: _Tokenizer) -> list[int]:
        return tokenizer.encode(text, add_bos=self.adds_bos)

    def token_ids(self, texts: list[str], engine: _Encoder) -> list[list[int]] | None:
        """The ids `texts` (rendered prompts) are sampled from: a raw prompt as the engine encodes text, a chat
        prompt without an added BOS; None when the engine sees only text (a remote server without a tokenizer)."""
        if self.adds_bos:
            return engine.encode(texts)
        if engine.tokenizer is None:
            return None
        return [self.encode(t, engine.tokenizer) for t in texts]

    def sampling(self, params: SamplingParams) -> SamplingParams:
        """`params` with the end-of-turn ids among its stop ids."""
        missing = tuple(t for t in self.end_of_turn if t not in params.stop_token_ids)
        return dataclasses.replace(params, stop_token_ids=params.stop_token_ids + missing) if missing else params
