"""`MockEngine`: a scripted `Engine` for testing your own verifiers, environments and rollouts.

Covers: completions from a script (a list of texts handed out in order, one
per sample, or a function of the prompt), shaped as a real engine's would be
under the request's `SamplingParams`: `n` samples per prompt, stop strings cut
the text (finish reason `stop`), and, given a tokenizer, token ids (the text's
encoding, no BOS/EOS), `max_tokens` cutting them (finish reason `length`), `eos_id` ending a completion that stops on its own,
per-token `stream` deltas and prompt-token counts in `usage`. Every call is
recorded in `calls`. Like inspect_ai's `mockllm`, it needs no model, no torch
and no network.
Does not cover: probabilities (every logprob is 0.0: a script is certain),
seeds (a script is deterministic), a context limit it enforces (`max_context`
is only declared).

>>> engine = MockEngine(["42", "41"])
>>> [c.text for c in engine.generate(["12+30="], SamplingParams(n=2))[0]]
['42', '41']
>>> engine = MockEngine(lambda prompt: "no idea")
>>> engine.generate(["12+30="], SamplingParams())[0][0].text
'no idea'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posttrain.engine.base import CompletionDelta, Prompt, TextTokenizer
from posttrain.engine.detokenize import find_stop, text_deltas
from posttrain.errors import UserError
from posttrain.types import Completion, FinishReason, SamplingParams


class ScriptExhaustedError(UserError, LookupError):
    """A `MockEngine` was asked for more completions than its list of responses holds."""


@dataclass
class MockUsage:
    """Totals of the traffic a `MockEngine` answered (one request per prompt, as a remote engine counts)."""

    requests: int = 0
    prompt_tokens: int = 0  # counted with the tokenizer; 0 without one
    completion_tokens: int = 0
    cost_usd: float = 0.0


class MockEngine:
    """Answers every prompt from `responses`: a list (one text per sample, in order) or `f(prompt) -> text`.

    `tokenizer` (optional, e.g. `posttrain.models.char_tokenizer()`): token ids for
    completions and `encode`, `max_tokens`, per-token streaming. `cycle`: start the
    list again when it runs out (otherwise that is a `ScriptExhaustedError`).
    """

    def __init__(
        self,
        responses: Sequence[str] | Callable[[Prompt], str] = (),
        *,
        tokenizer: TextTokenizer | None = None,
        cycle: bool = False,
        max_context: int | None = None,
        max_concurrency: int = 16,
        eos_id: int | None = None,
    ) -> None:
        self.script: Callable[[Prompt], str] | None = responses if callable(responses) else None
        self.responses: list[str] = [] if callable(responses) else list(responses)
        if self.script is None and not self.responses:
            raise ValueError("MockEngine needs responses: a non-empty list of texts, or a function prompt -> text")
        self.cycle = cycle
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.max_concurrency = max_concurrency
        self.eos_id = eos_id  # given: a completion that ends on its own (no stop string hit, no length cut) ends with
        # this id, as the local engine's completions keep the EOS they stopped on
        self.usage = MockUsage()
        self.policy_version = 0
        self.calls: list[tuple[list[Prompt], SamplingParams]] = []
        self.weights: Mapping[str, Any] | None = None  # the last state `load_weights` got
        self._next = 0
        self._lock = threading.Lock()  # concurrent agenerate calls draw from one script

    def encode(self, prompts: list[str]) -> list[list[int]] | None:
        return None if self.tokenizer is None else [self.tokenizer.encode(p) for p in prompts]

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        with self._lock:
            self.calls.append((list(prompts), params))
            start = self._next
            try:
                groups = [[self._completion(p, params) for _ in range(params.n)] for p in prompts]
            except Exception:
                self._next = start  # a failed call takes no responses
                raise
            self.usage.requests += len(prompts)
            self.usage.prompt_tokens += sum(self._prompt_len(p) for p in prompts)
            self.usage.completion_tokens += sum(len(c.token_ids) for g in groups for c in g)
        return groups

    async def agenerate(self, prompts: list[Prompt], params: SamplingParams) -> list[list[Completion]]:
        return self.generate(prompts, params)

    def stream(self, prompts: list[Prompt], params: SamplingParams) -> Iterator[CompletionDelta]:
        """Per-token deltas with a tokenizer (the last carries the completion); one delta per completion without."""
        for i, group in enumerate(self.generate(prompts, params)):
            for j, c in enumerate(group):
                if self.tokenizer is None or not c.token_ids:
                    yield CompletionDelta(i, j, i, list(c.token_ids), list(c.logprobs), c.text, c.finish_reason, c)
                    continue
                pieces = text_deltas(self.tokenizer.decode, c.token_ids, c.text)
                last = len(c.token_ids) - 1
                for t, (tok, lp, piece) in enumerate(zip(c.token_ids, c.logprobs, pieces)):
                    done = t == last
                    yield CompletionDelta(i, j, i, [tok], [lp], piece, c.finish_reason if done else None, c if done else None)

    def load_weights(self, state: Mapping[str, Any], version: int) -> None:
        """Accept any state (there is no model): kept in `weights`; later completions carry `version`."""
        self.weights = state
        self.policy_version = version

    def sampler_state(self) -> int:
        """How far into `responses` the script is (a resumed run picks up the same responses)."""
        return self._next

    def load_sampler_state(self, state: int) -> None:
        self._next = int(state)

    # ---- one completion

    def _text(self, prompt: Prompt) -> str:
        if self.script is not None:
            return self.script(prompt)
        if self._next >= len(self.responses):
            if not self.cycle:
                raise ScriptExhaustedError(
                    f"MockEngine was asked for completion {self._next + 1} but holds {len(self.responses)} responses "
                    "(pass cycle=True to repeat them)"
                )
            self._next = 0
        text = self.responses[self._next]
        self._next += 1
        return text

    def _completion(self, prompt: Prompt, params: SamplingParams) -> Completion:
        text = self._text(prompt)
        if not isinstance(text, str):
            raise TypeError(f"MockEngine responses must be text, got {type(text).__name__}")
        if self.tokenizer is None:
            at = find_stop(text, params.stop) if params.stop else -1
            return Completion([], text[:at] if at >= 0 else text, [], FinishReason.STOP, self.policy_version)
        ids = self.tokenizer.encode(text, add_bos=False)
        finish = FinishReason.STOP
        if len(ids) > params.max_tokens:
            ids, finish = ids[: params.max_tokens], FinishReason.LENGTH
            text = self.tokenizer.decode(ids)
        if params.stop:  # as an engine stops: at the first token whose text completes a stop string
            for k in range(1, len(ids) + 1):
                upto = self.tokenizer.decode(ids[:k])
                at = find_stop(upto, params.stop)
                if at >= 0:
                    ids, text, finish = ids[:k], upto[:at], FinishReason.STOP
                    break
            else:
                ids = self._with_eos(ids, finish, params)
        else:
            ids = self._with_eos(ids, finish, params)
        return Completion(ids, text, [0.0] * len(ids), finish, self.policy_version)

    def _with_eos(self, ids: list[int], finish: FinishReason, params: SamplingParams) -> list[int]:
        """`ids` and `eos_id` (when given) if the completion ended on its own with room for it."""
        if self.eos_id is None or finish is not FinishReason.STOP or len(ids) >= params.max_tokens:
            return ids
        return ids + [self.eos_id]

    def _prompt_len(self, prompt: Prompt) -> int:
        if not isinstance(prompt, str):
            return len(prompt)
        return len(self.tokenizer.encode(prompt)) if self.tokenizer is not None else 0
