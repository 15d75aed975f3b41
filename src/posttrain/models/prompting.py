"""How a task becomes the text a model is prompted with: the one renderer rollout, evaluation and serving share.

Covers: `PromptRenderer`: `raw` (the task's prompt as it is, what the built-in
model was pre-trained on) or `chat` (the prompt as a user message, after an
optional system message, through the checkpoint's chat template: the same
`ChatTemplate` the OpenAI-compatible server renders `messages` with).
Does not cover: the templates themselves (`ChatTemplate`, Jinja rendering)
or multi-turn histories (the agent runtime's context policies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from posttrain.types import Task


class MessageTemplate(Protocol):
    """What the renderer needs of a chat template (`ChatTemplate` is one)."""

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str: ...


@dataclass(frozen=True)
class PromptRenderer:
    """Task -> prompt text.

    >>> PromptRenderer().render(Task("t", "12+34="))
    '12+34='
    """

    mode: Literal["raw", "chat"] = "raw"
    template: MessageTemplate | None = None
    system_prompt: str | None = None

    def __post_init__(self) -> None:
        if self.mode == "chat" and self.template is None:
            raise ValueError("PromptRenderer(mode='chat') needs a chat template")

    def messages(self, task: Task) -> list[dict[str, str]]:
        out = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return out + [{"role": "user", "content": task.prompt}]

    def render(self, task: Task) -> str:
        if self.mode == "raw" or self.template is None:
            return task.prompt
        return self.template.render(self.messages(task))

    def render_all(self, tasks: list[Task]) -> list[str]:
        return [self.render(t) for t in tasks]
