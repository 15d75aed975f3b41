"""`LocalEngine`'s request intake: a prompt and its params checked, tokenised and made a `Request`.

Covers: the prompt's ids (text through the tokenizer, or ids checked against the vocabulary), the
one-line errors for an empty prompt, a bad id, an `n` wider than the batch and a prompt the context
cannot hold (`ContextLengthError`); the stop ids (the request's, plus EOS unless ignored); the context
limit (a request asking for more tokens than fit is clamped to what fits, noted once per engine); the
request ids and the `prompt_tokens_submitted` counter.
Does not cover: generators (the engine makes seeded ones on its device), queueing (engine/local/scheduler.py).
"""

from __future__ import annotations

import logging

import torch

from posttrain.engine.base import ContextLengthError, Prompt
from posttrain.engine.local.counters import EngineCounters
from posttrain.engine.local.sequence import Request
from posttrain.models.tokenizer import Tokenizer
from posttrain.types import SamplingParams

log = logging.getLogger(__name__)


class RequestIntake:
    """Checks prompts against the tokenizer, the vocabulary, the batch and the context; numbers requests."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, max_batch_rows: int, max_context: int | None,
                 counters: EngineCounters) -> None:
        self.tokenizer, self.vocab_size, self.max_batch_rows = tokenizer, vocab_size, max_batch_rows
        self.max_context, self.counters = max_context, counters
        self._clamp_noted = False
        self._next_id = 0

    def ids(self, prompt: Prompt, params: SamplingParams) -> list[int]:
        """The prompt's token ids, checked. Raises ValueError (ContextLengthError for a prompt too long)."""
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not ids:
            raise ValueError("empty prompt: every prompt needs at least one token")
        vocab = self.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"prompt token ids must lie in [0, {vocab}), got {min(ids)}..{max(ids)}")
        if params.n > self.max_batch_rows:
            raise ValueError(f"n={params.n} exceeds the engine's max_batch_rows={self.max_batch_rows}")
        if self.max_context is not None and len(ids) >= self.max_context:
            raise ContextLengthError(
                f"the prompt has {len(ids)} tokens; this model's context holds {self.max_context} "
                "(prompt and completion together)"
            )
        return ids

    def budget(self, prompt_len: int, max_tokens: int) -> int:
        """`max_tokens`, cut to what fits in the context after the prompt (said once per engine)."""
        if self.max_context is None or prompt_len + max_tokens <= self.max_context:
            return max_tokens
        room = self.max_context - prompt_len
        if not self._clamp_noted:
            self._clamp_noted = True
            log.warning(
                "a request asked for %d new tokens after a %d-token prompt; this model's context holds %d, so it gets %d "
                "(such completions end with finish reason 'length'; noted once per engine)",
                max_tokens, prompt_len, self.max_context, room,
            )
        return room

    def request(self, prompt: Prompt, params: SamplingParams, generator: torch.Generator | None, stream: bool,
                index: int) -> Request:
        """A checked `Request` for `params.n` samples of `prompt`. Raises ValueError on bad input."""
        ids = self.ids(prompt, params)
        stop_ids = set(params.stop_token_ids)
        if self.tokenizer.eos_id is not None and not params.ignore_eos:
            stop_ids.add(self.tokenizer.eos_id)
        max_tokens = self.budget(len(ids), params.max_tokens)
        req = Request(
            self._next_id, ids, params, generator, stream, index=index, stop_ids=frozenset(stop_ids), max_tokens=max_tokens
        )
        self._next_id += 1
        self.counters.prompt_tokens_submitted += len(ids) * params.n
        return req
