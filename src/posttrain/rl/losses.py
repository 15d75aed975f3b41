"""Policy-gradient losses, KL penalty and loss aggregation as pure tensor functions.

Covers: the PPO/GRPO clipped surrogate with asymmetric clipping (DAPO's
clip-higher), truncated importance weights between the learner's pre-update
policy and the behaviour policy that sampled (decoupled PPO: the clip is
taken against the learner's own old logprobs, the weight corrects for a
sampler that is not the learner's module: another engine, another precision,
an older policy), the k3 KL estimator to a reference policy, and the three
loss aggregations in use (token-level mean, per-sequence mean, Dr.GRPO's
constant-length normalisation), with the normaliser separable so gradient
accumulation over micro-batches gives the same loss as one pass.
Does not cover: value losses, sequence-level (GSPO) ratios.

Shapes: per-token tensors are [B, T] (B sequences, T completion positions);
`mask` [B, T] is 1.0 on completion tokens that count, 0.0 elsewhere.
"""

from __future__ import annotations

import torch
from torch import Tensor


def clipped_policy_loss(
    logp: Tensor,  # [B, T] current policy
    old_logp: Tensor,  # [B, T] behaviour policy
    advantages: Tensor,  # [B] or [B, T]
    clip_low: float = 0.2,
    clip_high: float = 0.28,
) -> tuple[Tensor, Tensor]:
    """Per-token loss -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A), and where clipping was active.

    Returns (loss [B, T], clipped [B, T] bool).
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    return loss, clipped < unclipped


def truncated_importance_weights(
    learner_old_logp: Tensor,  # [B, T] the learner's policy before this update
    behaviour_logp: Tensor,  # [B, T] the policy that sampled (the engine's logprobs)
    cap: float = 2.0,
) -> Tensor:
    """Per-token weight min(pi_old / mu, cap), without gradient (truncated importance sampling).

    1.0 wherever sampler and learner agree; a token the sampler over-weighted
    counts less, and no token counts more than `cap` times.
    """
    if cap <= 0:
        raise ValueError(f"truncated importance sampling needs a positive cap, got {cap}")
    return torch.exp(learner_old_logp.detach() - behaviour_logp.detach()).clamp(max=cap)


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1 (>= 0, unbiased)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


def loss_normalizer(mask: Tensor, mode: str = "token_mean", max_len: int | None = None) -> Tensor:
    """The denominator `aggregate_loss` divides by for a [B, T] mask (a 0-d tensor).

    token_mean: the number of counted tokens; seq_mean_token_mean: the number of
    sequences with at least one counted token (fully masked rows, errored samples,
    do not dilute the mean); seq_mean_token_sum_norm: B * max_len.
    """
    mask = mask.float()
    if mode == "token_mean":
        return mask.sum().clamp(min=1.0)
    if mode == "seq_mean_token_mean":
        return (mask.sum(-1) > 0).sum().float().clamp(min=1.0)
    if mode == "seq_mean_token_sum_norm":
        length = max_len if max_len is not None else mask.shape[-1]
        return torch.tensor(float(mask.shape[0] * length))
    raise ValueError(f"unknown loss aggregation {mode!r}")


def aggregate_loss(
    loss: Tensor, mask: Tensor, mode: str = "token_mean", max_len: int | None = None, normalizer: Tensor | None = None
) -> Tensor:
    """[B, T] per-token loss -> scalar.

    token_mean: every token in the batch weighs the same (DAPO).
    seq_mean_token_mean: mean within each sequence, then over the sequences that
        have any counted token (original GRPO).
    seq_mean_token_sum_norm: token sum divided by B * max_len, a constant (Dr.GRPO),
        so long sequences are not down-weighted.
    `normalizer` (from `loss_normalizer` over a whole minibatch) replaces the
    denominator, so the losses of a minibatch's micro-batches sum to its loss.
    """
    mask = mask.to(loss.dtype)
    if normalizer is None:
        normalizer = loss_normalizer(mask, mode, max_len)
    if mode in ("token_mean", "seq_mean_token_sum_norm"):
        return (loss * mask).sum() / normalizer
    if mode == "seq_mean_token_mean":
        per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq.sum() / normalizer
    raise ValueError(f"unknown loss aggregation {mode!r}")
