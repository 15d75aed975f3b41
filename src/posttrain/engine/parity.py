"""Train-inference parity: the engine's behaviour logprobs against the learner's, for the same tokens.

Covers: `engine_learner_mismatch`, which re-scores completions with the
learner's own code path (`models.logprobs.token_logprobs` on a full forward)
and reports mean and max |delta log p| (`models.logprobs.logprob_mismatch`,
the same definition the Learner logs as mismatch_mean / mismatch_max).
Does not cover: correcting for the gap (the learner's job: truncated importance
weights, `rl/losses.py`'s `truncated_importance_weights`, for a sampling engine
that is not the learner's own module).
"""

from __future__ import annotations

import torch

from posttrain.models.llama import CausalLM
from posttrain.models.logprobs import logprob_mismatch, token_logprobs
from posttrain.types import Completion


@torch.no_grad()
def engine_learner_mismatch(
    model: CausalLM, prompts: list[list[int]], completions: list[Completion], temperature: float = 1.0
) -> dict[str, float]:
    """prompts[i] + completions[i] re-scored by a learner-style forward -> {"mismatch_mean", "mismatch_max"}.

    Only meaningful for completions sampled without top-k/top-p/min-p (the
    learner scores the temperature-scaled distribution).
    """
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    rows = [p + c.token_ids for p, c in zip(prompts, completions)]
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    sampler = torch.zeros((len(rows), width - 1))
    mask = torch.zeros((len(rows), width - 1), dtype=torch.bool)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, : len(rows[i])] = torch.tensor(rows[i])
        lo, hi = len(p) - 1, len(p) - 1 + len(c.token_ids)
        sampler[i, lo:hi] = torch.tensor(c.logprobs)
        mask[i, lo:hi] = True
    was_training = model.training
    model.eval()
    try:
        learner = token_logprobs(model(ids)[:, :-1], ids[:, 1:], temperature)  # right padding: real tokens unaffected
    finally:
        model.train(was_training)
    mean, worst = logprob_mismatch(sampler, learner, mask)
    return {"mismatch_mean": mean, "mismatch_max": worst}
