"""The `Engine` protocol every generator implements, and the records it exchanges.

Covers: the contract the trainer, the rollouters, evaluation, agents and the
HTTP server code against, and nothing they may probe for:
- `generate` (n completions per prompt, grouped in prompt order) and its
  awaitable twin `agenerate` (the same result; concurrent callers of one
  engine share its batch);
- `stream` (per-token deltas as they are produced);
- `load_weights(state, version)` (new policy weights tagged with a version;
  cached state computed with older weights is dropped) and `policy_version`;
- `encode(prompts)`: text prompts as the token ids the engine will see,
  so a caller can store exactly what was sampled from (None when the engine
  only sees text, a remote server without a local tokenizer);
- declared optional capabilities, `None` when the engine lacks them:
  `tokenizer` (encode/decode in the engine's own vocabulary), `usage`
  (request/token/cost totals, kept by remote engines) and `max_context`
  (the model's context length: a request asking for more tokens than fit is
  clamped, with a note in the log, not failed);
- `max_concurrency`: how many requests a caller should keep in flight;
- `sampler_state` / `load_sampler_state`: the sampling RNG, for exact resume.
Does not cover: any implementation (the local engine, the adapters).

>>> class EchoEngine:
...     policy_version = 0
...     tokenizer = usage = max_context = None
...     max_concurrency = 1
...     def encode(self, prompts):
...         return None
...     def generate(self, prompts, params):
...         return [[Completion([], "", [], FinishReason.LENGTH)] * params.n for _ in prompts]
...     async def agenerate(self, prompts, params):
...         return self.generate(prompts, params)
...     def stream(self, prompts, params):
...         yield from ()
...     def load_weights(self, state, version):
...         self.policy_version = version
...     def sampler_state(self):
...         return None
...     def load_sampler_state(self, state):
...         pass
>>> isinstance(EchoEngine(), Engine)
True
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from posttrain.errors import UserError
from posttrain.types import Completion, FinishReason, SamplingParams

Prompt = str | list[int]


class ContextLengthError(UserError, ValueError):
    """A prompt that alone fills the model's context: no room is left for a completion (a request
    that merely asks for too many tokens is clamped instead)."""


def context_overflow(prompt_tokens: int | None, max_context: int | None) -> str | None:
    """Why a prompt of `prompt_tokens` leaves no room for one sampled token in `max_context` (None: it fits, or
    either count is unknown): the reason training and evaluation record for a task the model cannot read."""
    if prompt_tokens is None or max_context is None or prompt_tokens < max_context:
        return None
    return f"the prompt has {prompt_tokens} tokens; the model's context holds {max_context}"


@dataclass(slots=True)
class CompletionDelta:
    """What one completion gained in one engine step.

    `prompt_index` and `sample_index` place it: `generate(...)[prompt_index][sample_index]`.
    `text` is the newly visible text (text that could still turn out to be the
    start of a stop string is held back until it cannot). The final delta of a
    completion has `finish_reason` set and carries the whole `Completion`.
    """

    prompt_index: int
    sample_index: int
    request_id: int  # engine-wide id of the prompt's request (what `LocalEngine.submit` returned)
    token_ids: list[int]
    logprobs: list[float]  # of the processed distribution each token was drawn from
    text: str
    finish_reason: FinishReason | None = None
    completion: Completion | None = field(default=None, repr=False)


@runtime_checkable
class TextTokenizer(Protocol):
    """What callers may ask of an engine's tokenizer."""

    def encode(self, text: str, add_bos: bool = True) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@runtime_checkable
class EngineUsage(Protocol):
    """Running totals an engine keeps of its own traffic (remote engines: from the server's answers)."""

    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


@runtime_checkable
class Engine(Protocol):
    """A policy that samples completions."""

    policy_version: int
    tokenizer: TextTokenizer | None
    usage: EngineUsage | None
    max_context: int | None
    max_concurrency: int

    def encode(self, prompts: list[str]) -> list[list[int]] | None:
        """The token ids each prompt becomes inside the engine (None: the engine sees only text)."""
        ...

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (token ids, text, logprobs, finish reason, version)."""
        ...

    async def agenerate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """`generate` for async callers; concurrent calls on one engine may be batched together."""
        ...

    def stream(self, prompts: list[Prompt], params: SamplingParams) -> Iterator[CompletionDelta]:
        """The same completions as `generate`, delivered token by token as they are produced."""
        ...

    def load_weights(self, state: Mapping[str, Any], version: int) -> None:
        """Adopt new policy weights (every parameter, names as in the model's state dict);
        completions from now on carry `version`."""
        ...

    def sampler_state(self) -> Any:
        """The engine's own sampling RNG state (what a checkpoint needs to resume to the same samples)."""
        ...

    def load_sampler_state(self, state: Any) -> None:
        """Restore what `sampler_state` returned."""
        ...
