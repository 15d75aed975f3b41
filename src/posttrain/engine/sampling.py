"""Logit processing and token sampling as small pure functions.

Covers: temperature, top-k, top-p (nucleus) and min-p filtering (HF's order),
greedy and multinomial choice, and the logprob of the chosen token under the
processed distribution (what the behaviour policy really was).
Does not cover: repetition penalties or logit bias; the speculative rejection
rule (engine/local/spec_decode.py); stop strings (text: engine/detokenize.py).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def process_logits(
    logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0
) -> Tensor:
    """[..., V] raw logits -> [..., V] logits of the distribution to sample from (-inf where excluded).

    temperature == 0 (greedy) leaves the scale alone: greedy logprobs are
    reported under the unscaled, filtered distribution.
    """
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass strictly before it already reaches top_p (the first token always stays)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    if min_p > 0.0:  # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
        top = logits.max(dim=-1, keepdim=True).values
        logits = logits.masked_fill(logits < top + math.log(min_p), float("-inf"))
    return logits


def process_for(logits: Tensor, params) -> Tensor:
    """`process_logits` with a `SamplingParams`' settings."""
    return process_logits(logits, params.temperature, params.top_k, params.top_p, params.min_p)


def choose(processed: Tensor, greedy: bool, generator: torch.Generator | None) -> Tensor:
    """[B, V] processed logits -> chosen tokens [B]."""
    if greedy:
        return processed.argmax(-1)
    return torch.multinomial(torch.softmax(processed, -1), 1, generator=generator).squeeze(-1)


def sample_tokens(
    logits: Tensor,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    min_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """[B, V] raw logits -> (tokens [B], logprobs [B]) of the chosen tokens."""
    processed = process_logits(logits, temperature, top_k, top_p, min_p)
    logp = torch.log_softmax(processed, dim=-1)
    tokens = choose(processed, temperature == 0, generator)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
