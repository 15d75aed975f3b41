"""The models an agent runs on: any `Engine` with a tokenizer (token in, token out), or a chat endpoint with native tools.

Covers: the `AgentModel` protocol the runtime calls (`prefix`, `codec`, `sample`), `TextCodec`
(context entries in the built-in text call format, `format.py`, encoded once each with the
engine's tokenizer), and `EngineModel`: an `Engine` (the local engine, `MockEngine`, a scripted
agent, an OpenAI-compatible server given a tokenizer) sampled with `agenerate` on the exact context
ids, so many concurrent episodes share the local engine's batch and every turn's ids are what the
learner trains on. `as_agent_model` accepts either kind.
Does not cover: the chat endpoint itself (`openai_chat.py`), the loop (`runtime.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from posttrain.agent import format as fmt
from posttrain.agent.context import Codec, ContextWindow, Entry, EntryKind
from posttrain.agent.episode import ToolCall
from posttrain.agent.tools import Tool
from posttrain.engine.base import Engine, TextTokenizer
from posttrain.errors import UserError
from posttrain.pricing import Price
from posttrain.types import Completion, SamplingParams


class AgentModelError(UserError, TypeError):
    """Something that cannot drive an agent (an engine without a tokenizer, say)."""


@dataclass(slots=True)
class Sampled:
    """One model call's result. `calls` is None when the calls are to be parsed out of the text."""

    completion: Completion
    context_ids: list[int]
    context_tokens: int
    calls: list[ToolCall] | None = None
    cost_usd: float = 0.0
    format_error: str = ""  # native calls that could not be read
    completion_tokens: int | None = None  # the endpoint's count (None: the completion's ids are the count)


@runtime_checkable
class AgentModel(Protocol):
    native_tools: bool  # the model returns structured calls (no text format, no format errors of ours)
    codec: Codec

    def prefix(self, tools: list[Tool], system: str) -> Entry:
        """The stable first entry: system text and tool schemas."""
        ...

    async def sample(self, window: ContextWindow, tools: list[Tool], params: SamplingParams) -> Sampled: ...


class TextCodec:
    """Entries in the built-in text format, each encoded once (no BOS except on the prefix)."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tokenizer = tokenizer

    def render(self, kind: EntryKind, content: str, name: str = "") -> str:
        if kind == "task":
            return fmt.render_task(content)
        if kind == "observation":
            return fmt.render_observation(name, content)
        if kind == "error":
            return fmt.render_format_error(content)
        if kind == "summary":
            return fmt.render_summary(content)
        if kind == "note":
            return fmt.render_note(content)
        return content  # prefix and listing (already rendered), assistant (its own text)

    def entry(self, kind: EntryKind, content: str, turn: int = 0, name: str = "", call_id: str = "") -> Entry:
        ids = self.tokenizer.encode(self.render(kind, content, name), add_bos=kind == "prefix")
        return Entry(kind, content, ids, len(ids), turn, name, call_id)

    def summary(self, text: str, sampled_ids: list[int], turn: int) -> Entry:
        head = self.tokenizer.encode(fmt.SUMMARY_OPEN, add_bos=False)
        tail = self.tokenizer.encode(fmt.SUMMARY_CLOSE, add_bos=False)
        ids = head + sampled_ids + tail
        return Entry("summary", text, ids, len(ids), turn)


class EngineModel:
    """An `Engine` driven token in, token out in the built-in text call format."""

    native_tools = False

    def __init__(self, engine: Engine, price: Price | None = None, listing: fmt.Listing = "json") -> None:
        if engine.tokenizer is None:
            raise AgentModelError(
                "an agent on an engine needs the engine's tokenizer (token in, token out); for an OpenAI-compatible "
                "endpoint without one, use its native tools (posttrain.agent.openai_chat.ChatEndpointModel)")
        self.engine = engine
        self.codec: Codec = TextCodec(engine.tokenizer)
        self.price = price
        self.listing = listing  # how the prefix lists the tools (`format.render_prefix`)
        self._prefixes: dict[str, Entry] = {}

    def prefix(self, tools: list[Tool], system: str) -> Entry:
        text = fmt.render_prefix([t.schema() for t in tools], system, self.listing)
        e = self._prefixes.get(text)
        if e is None:  # encoded once per prefix text: every episode starts from the same ids
            e = self._prefixes[text] = self.codec.entry("prefix", text)
        return Entry(e.kind, e.content, list(e.ids), e.n_tokens)

    async def sample(self, window: ContextWindow, tools: list[Tool], params: SamplingParams) -> Sampled:
        ctx = list(window.ids)
        p = dataclasses.replace(params, n=1)
        (completion,), = await self.engine.agenerate([ctx], p)
        cost = self.price.cost(len(ctx), len(completion.token_ids)) if self.price is not None else 0.0
        return Sampled(completion, ctx, len(ctx), None, cost)


def as_agent_model(model: object, price: Price | None = None, listing: fmt.Listing = "json") -> AgentModel:
    """An `AgentModel` as given, or an `Engine` wrapped in `EngineModel` (tools listed as `listing` says)."""
    if isinstance(model, AgentModel):
        return model
    if isinstance(model, Engine):
        return EngineModel(model, price, listing)
    raise AgentModelError(f"cannot drive an agent with a {type(model).__name__}: give an Engine or an AgentModel")
