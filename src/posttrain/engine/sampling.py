"""Logit processing and token sampling as small pure functions.

Covers: temperature, top-k and top-p (nucleus) filtering, greedy and
multinomial choice, and the logprob of the chosen token under the processed
distribution (what the behaviour policy really was).
Does not cover: stop-string matching or repetition penalties.
"""

from __future__ import annotations

import torch
from torch import Tensor


def process_logits(logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """[B, V] raw logits -> [B, V] logits of the distribution to sample from (-inf where excluded)."""
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
    return logits


def sample_tokens(
    logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """[B, V] raw logits -> (tokens [B], logprobs [B]) of the chosen tokens.

    Greedy when temperature == 0; its logprobs are then reported under the
    unscaled distribution.
    """
    processed = process_logits(logits, temperature, top_k, top_p)
    logp = torch.log_softmax(processed, dim=-1)
    if temperature == 0:
        tokens = processed.argmax(-1)
    else:
        tokens = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
