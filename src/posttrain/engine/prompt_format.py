"""Building the one `PromptRenderer` of a model: its prompt format, system prompt and end-of-turn tokens.

Covers: `build_renderer(checkpoint, tokenizer, prompt_format, system_prompt)`, what training rollouts,
in-training evaluation, `posttrain eval`, the agent runtime and `posttrain serve` all render with:
`prompt_format = "auto"` is `chat` when the checkpoint ships a chat template (`tokenizer_config.json`'s
`chat_template` or `chat_template.jinja`) and `raw` otherwise (the built-in model); `"chat"` without a template
is a one-line error. `end_of_turn_ids`: the token the template closes an assistant turn with (found by
rendering a one-turn conversation, so `<|im_end|>`, `<|eot_id|>` or whatever the template writes), plus
`generation_config.json`'s `eos_token_id`s, each a stop.
Does not cover: rendering itself (`models/prompting.py`, `engine/chat.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from posttrain.engine.chat import ChatTemplate
from posttrain.errors import UserError
from posttrain.models.prompting import PromptRenderer
from posttrain.models.tokenizer import Tokenizer

PromptFormat = Literal["auto", "raw", "chat"]
_SENTINEL = "\u2063posttrain-reply\u2063"  # an answer no template rewrites: what follows it closes the turn


class PromptFormatError(UserError, ValueError):
    """A prompt format the checkpoint cannot honour (chat without a template)."""


def build_renderer(checkpoint: str | Path | None, tokenizer: Tokenizer | None, prompt_format: PromptFormat = "auto",
                   system_prompt: str | None = None) -> PromptRenderer:
    """The renderer of the model at `checkpoint` (None: the built-in model, which has no template)."""
    template = ChatTemplate.from_checkpoint(checkpoint) if checkpoint is not None else ChatTemplate.plain()
    if prompt_format == "chat" and template.is_plain:
        where = checkpoint if checkpoint is not None else "the built-in model"
        raise PromptFormatError(f"model.prompt_format = \"chat\": {where} ships no chat template (tokenizer_config.json "
                                "chat_template or chat_template.jinja); use \"raw\" or \"auto\"")
    if prompt_format == "raw" or template.is_plain:
        return PromptRenderer("raw", None, system_prompt or None)
    stops = end_of_turn_ids(template, tokenizer, checkpoint) if tokenizer is not None else ()
    return PromptRenderer("chat", template, system_prompt or None, stops)


def end_of_turn_ids(template: ChatTemplate, tokenizer: Tokenizer, checkpoint: str | Path | None = None) -> tuple[int, ...]:
    """The ids that end an assistant turn: the single token the template writes right after a reply (when it
    is one token of the vocabulary), the tokenizer's EOS, and generation_config.json's eos ids."""
    ids: list[int] = []
    try:
        text = template.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL}],
                               add_generation_prompt=False)
    except UserError:  # a template that refuses this conversation: the configured EOS ids still stop
        text = ""
    after = text.split(_SENTINEL, 1)[1] if _SENTINEL in text else ""
    head = after.lstrip(" ")
    # an added (special) token the text after the reply starts with, the longest: never a plain piece such as "\n"
    added = {tok.content: tid for tid, tok in tokenizer.backend.get_added_tokens_decoder().items()}
    closing = max((t for t in added if t and head.startswith(t)), key=len, default=None)
    if closing is not None:
        ids.append(added[closing])
    if tokenizer.eos_id is not None:
        ids.append(tokenizer.eos_id)
    if checkpoint is not None:
        gen = Path(checkpoint) / "generation_config.json"
        if gen.exists():
            eos = json.loads(gen.read_text()).get("eos_token_id")
            ids.extend(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
    return tuple(dict.fromkeys(int(i) for i in ids))
