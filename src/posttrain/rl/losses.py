"""Policy-gradient losses, KL penalty and loss aggregation as pure tensor functions.

Covers: the PPO/GRPO clipped surrogate with asymmetric clipping (DAPO's
clip-higher), the k3 KL estimator to a reference policy, and the three loss
aggregations in use (token-level mean, per-sequence mean, Dr.GRPO's
constant-length normalisation).
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


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1 (>= 0, unbiased)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


def aggregate_loss(loss: Tensor, mask: Tensor, mode: str = "token_mean", max_len: int | None = None) -> Tensor:
    """[B, T] per-token loss -> scalar.

    token_mean: every token in the batch weighs the same (DAPO).
    seq_mean_token_mean: mean within each sequence, then over sequences (original GRPO).
    seq_mean_token_sum_norm: token sum divided by B * max_len, a constant (Dr.GRPO),
        so long sequences are not down-weighted.
    """
    mask = mask.to(loss.dtype)
    if mode == "token_mean":
        return (loss * mask).sum() / mask.sum().clamp(min=1.0)
    if mode == "seq_mean_token_mean":
        per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq.mean()
    if mode == "seq_mean_token_sum_norm":
        length = max_len if max_len is not None else loss.shape[-1]
        return (loss * mask).sum() / (loss.shape[0] * length)
    raise ValueError(f"unknown loss aggregation {mode!r}")
