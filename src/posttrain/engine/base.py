"""The `Engine` protocol every generator implements, and the streaming record it yields.

Covers: the contract the trainer, evaluation, agents and the HTTP server code
against: `generate` (n completions per prompt, grouped in prompt order),
`stream` (per-token deltas as they are produced), `load_weights` (new policy
weights tagged with a version; cached state computed with older weights is
dropped), and `policy_version`.
Does not cover: any implementation (engine/local.py, and the adapters).

>>> class EchoEngine:
...     policy_version = 0
...     def generate(self, prompts, params):
...         return [[Completion([], "", [], FinishReason.LENGTH)] * params.n for _ in prompts]
...     def stream(self, prompts, params):
...         yield from ()
...     def load_weights(self, state, version):
...         self.policy_version = version
>>> isinstance(EchoEngine(), Engine)
True
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from posttrain.types import Completion, FinishReason, SamplingParams

Prompt = str | list[int]


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
class Engine(Protocol):
    """A policy that samples completions."""

    policy_version: int

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt, `params.n` completions (token ids, text, logprobs, finish reason, version)."""
        ...

    def stream(self, prompts: list[Prompt], params: SamplingParams) -> Iterator[CompletionDelta]:
        """The same completions as `generate`, delivered token by token as they are produced."""
        ...

    def load_weights(self, state: dict, version: int) -> None:
        """Adopt new policy weights; completions from now on carry `version`."""
        ...
