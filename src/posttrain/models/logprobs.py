"""Log-probabilities of chosen tokens: the one function sampler and learner share.

Covers: per-token logprobs under a temperature-scaled distribution, for a
batch of already-computed logits, and for whole padded sequences.
Also `logprob_mismatch`: the train-inference gap (mean and max |delta log p|
over real tokens) between sampler and learner logprobs of the same tokens.
Does not cover: top-p/top-k renormalisation (the engine applies those to
sampling and reports the processed distribution's logprobs itself).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain.models.llama import CausalLM


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """logits [..., V], targets [...] -> log p(target) [...] under softmax(logits / temperature)."""
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def sequence_logprobs(
    model: CausalLM,
    input_ids: Tensor,  # [B, T] right-padded
    temperature: float = 1.0,
) -> Tensor:
    """log p(input_ids[:, t] | input_ids[:, :t]) for t >= 1 -> [B, T-1].

    Right padding sits after every real token, so a plain causal forward gives
    the real tokens exactly what a padded-free forward would.
    """
    logits = model(input_ids)  # [B, T, V]
    return token_logprobs(logits[:, :-1], input_ids[:, 1:], temperature)


def logprob_mismatch(sampler_logp: Tensor, learner_logp: Tensor, mask: Tensor) -> tuple[float, float]:
    """Mean and max |learner - sampler| log p over tokens where `mask` is set (all [B, T]); (0, 0) when none."""
    m = mask.bool()
    if not bool(m.any()):
        return 0.0, 0.0
    diff = (learner_logp.float() - sampler_logp.float()).abs()[m]
    return float(diff.mean()), float(diff.max())
