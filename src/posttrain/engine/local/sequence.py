"""Typed state of requests and their sequences inside `LocalEngine`.

Covers: `Request` (one prompt, its params, its random generator, its n
samples, its prefill progress) and `Sequence` (one sample: tokens so far,
logprobs, where its KV lives, its finish state, its incremental text and
stop-string bookkeeping).
Does not cover: scheduling decisions (engine/local/scheduler.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from posttrain.engine.detokenize import IncrementalText
from posttrain.types import Completion, FinishReason, SamplingParams


class RequestStatus(str, enum.Enum):
    WAITING = "waiting"  # submitted, no cache row yet
    PREFILL = "prefill"  # its prompt is being prefilled, chunk by chunk, in a prompt-store row
    RUNNING = "running"  # its samples decode in running rows
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    id: int
    prompt: list[int]  # [T_prompt]
    params: SamplingParams
    generator: torch.Generator | None  # None: the engine's own
    stream: bool = False
    index: int = 0  # position of the prompt in its generate/stream call
    stop_ids: frozenset[int] = frozenset()
    max_tokens: int = 0  # the completion budget: params.max_tokens, cut to what the context leaves
    status: RequestStatus = RequestStatus.WAITING
    n_cached: int = 0  # prompt tokens whose KV is in the stage row
    prompt_row: int = -1  # row of the prompt store holding its prompt KV
    samples: list["Sequence"] = field(default_factory=list)
    unfinished: int = 0

    @property
    def completions(self) -> list[Completion]:
        return [s.completion for s in self.samples]


@dataclass(eq=False)
class Sequence:
    request: Request
    index: int  # sample index within the request
    all: list[int]  # prompt + generated tokens
    row: int  # running row holding its KV
    n_cached: int  # tokens whose KV is cached (all but the newest), counting the prompt
    base: int  # tokens of `all` kept outside the row (the shared prompt, in cascade mode): row slot = position - base
    out: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None
    stop_at: int = -1  # text index where a stop string begins
    text: IncrementalText | None = None  # the decoded output so far, when streamed or stop strings are watched
    sent_text: int = 0  # chars of text already streamed
    draft_cached: int = 0  # tokens whose KV the draft model holds
    lookup_at: int = -1  # prompt lookup: index in `all` of the source token aligned with the next one (-1: none)
    completion: Completion | None = None
