"""Checks before the first step that need the tasks and the tokenizer: can any completion earn a reward at all?

Covers: `check_answer_room`: a completion cap (`sampling.max_tokens`, or a `[[domains]]` entry's own) shorter than
every gold answer of a domain (its `meta["solution"]` where the model writes a worked solution) makes every
reward 0, so no group has variance and nothing is learnt: a one-line `ConfigError` naming the length the
answers need; a cap that holds only some answers is a warning. Answers are measured on a sample of the
domain's tasks, each tokenized alone (in context a BPE tokenizer may merge across the boundary: an
approximation on the safe side of a few tokens).
Does not cover: the pure-config checks (`config.py`: `sampling.n = 1`, temperature 0), or agent domains (an
episode's length is its step budget, not one completion).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from posttrain.config import ConfigError

SAMPLE = 64  # tasks of each split measured, per domain
BUDGET = 2048  # tasks of each split measured over all domains: a run of 500 generated domains measures 4 of each
MIN_SAMPLE = 4
SLOW_S = 0.1  # a generator slower than this per task is measured on one task of each split (some take seconds)


def sample_size(domains: int) -> int:
    """Tasks of each split measured per domain: `SAMPLE`, less when `domains` x `SAMPLE` passes `BUDGET` (some
    generators take a second a task), never under `MIN_SAMPLE`."""
    return max(MIN_SAMPLE, min(SAMPLE, BUDGET // max(domains, 1)))


@dataclass(frozen=True)
class AnswerRoom:
    """How the gold answers of one domain's sampled tasks fit a completion cap."""

    domain: str
    max_tokens: int
    lengths: tuple[int, ...]  # tokens of each sampled gold answer

    @property
    def fitting(self) -> int:
        return sum(n <= self.max_tokens for n in self.lengths)


def answer_room(name: str, tasks: Sequence[Any], tokenizer: Any, max_tokens: int) -> AnswerRoom:
    """The token length of each task's gold answer (its worked solution when it has one; tasks without an answer,
    such as test-graded code, are left out)."""
    lengths = []
    for t in tasks:
        gold = t.meta.get("solution") or t.answer
        if gold:
            lengths.append(len(tokenizer.encode(str(gold), add_bos=False)))
    return AnswerRoom(name, max_tokens, tuple(lengths))


def check_answer_room(rooms: Sequence[AnswerRoom]) -> None:
    """Raise a `ConfigError` when a domain's cap holds none of its answers; warn when it holds under half."""
    for r in rooms:
        if not r.lengths:
            continue
        need = sorted(r.lengths)
        if r.fitting == 0:
            raise ConfigError(f"config: max_tokens = {r.max_tokens} cannot hold any gold answer of {r.domain} (the shortest "
                              f"takes {need[0]} tokens, the median {need[len(need) // 2]}): every reward would be 0; raise "
                              f"sampling.max_tokens (or the domain's max_tokens) to at least {need[-1]}")
        if r.fitting < len(need) / 2:
            warnings.warn(f"max_tokens = {r.max_tokens} holds only {r.fitting} of {len(need)} sampled gold answers of "
                          f"{r.domain} (the median takes {need[len(need) // 2]} tokens): raise sampling.max_tokens to "
                          f"{need[-1]} to let every answer fit", stacklevel=3)


def domain_rooms(domains: Sequence[Any], caps: Sequence[int], tokenizer: Any, seed: int = 0) -> list[AnswerRoom]:
    """One `AnswerRoom` per single-turn domain over `sample_size` held-out and as many training tasks."""
    rooms = []
    single = [(d, cap) for d, cap in zip(domains, caps) if d.rollouter == "single_turn"]
    k = sample_size(len(single))
    for d, cap in single:
        t0 = time.perf_counter()
        first = list(d.held_out(1, seed=seed))
        n = k if time.perf_counter() - t0 < SLOW_S else 1
        tasks = (first if n == 1 else list(d.held_out(n, seed=seed))) + list(d.source.take(n, "train", seed=seed))
        rooms.append(answer_room(d.name, tasks, tokenizer, cap))
    return rooms
