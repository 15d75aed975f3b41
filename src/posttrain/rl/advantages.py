"""Group-relative advantages (GRPO family) as pure tensor functions.

Covers: GRPO's (r - mean) / (std + eps) (optionally with a floor under the
std), Dr.GRPO's unnormalised r - mean, and
the group mean with the batch's std (`grpo_batch`: TRL's `scale_rewards="batch"`,
Lite PPO), computed over the valid (non-errored) samples only; errored
samples get advantage 0 and are also masked out of the loss by the caller.
Does not cover: value-function baselines (GAE / PPO critic).

Conventions: rewards [G, n] (G groups of n samples), valid [G, n] bool. The
std is the unbiased (n - 1) sample std, as in the GRPO paper's reference
code and TRL; a group with fewer than two valid samples has advantage 0.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _group_stats(rewards: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    v = valid.to(rewards.dtype)
    r = torch.where(valid, rewards, torch.zeros_like(rewards))  # NaN-safe for errored entries
    count = v.sum(-1, keepdim=True)  # [G, 1]
    mean = r.sum(-1, keepdim=True) / count.clamp(min=1)
    var = (((r - mean) * v) ** 2).sum(-1, keepdim=True) / (count - 1).clamp(min=1)
    return mean, var.sqrt(), count


def grpo_advantages(rewards: Tensor, valid: Tensor, eps: float = 1e-4, std_floor: float = 0.0) -> Tensor:
    """[G, n] -> [G, n]: (r - mean_g) / (max(std_g, std_floor) + eps) over valid samples; 0 where invalid.
    `std_floor` > 0 keeps a group whose rewards differ only a little (a shaping term) from being scaled up to
    unit-size advantages, and leaves groups whose outcome varies (std above the floor) as plain GRPO."""
    mean, std, count = _group_stats(rewards, valid)
    adv = (rewards - mean) / (std.clamp(min=std_floor) + eps)
    return torch.where(valid & (count > 1), adv, torch.zeros_like(adv))


def dr_grpo_advantages(rewards: Tensor, valid: Tensor) -> Tensor:
    """[G, n] -> [G, n]: r - mean_g (Dr.GRPO drops the std normalisation, which biases toward easy/hard groups)."""
    mean, _, count = _group_stats(rewards, valid)
    adv = rewards - mean
    return torch.where(valid & (count > 1), adv, torch.zeros_like(adv))


def grpo_batch_advantages(rewards: Tensor, valid: Tensor, eps: float = 1e-4) -> Tensor:
    """[G, n] -> [G, n]: (r - mean_g) / (std_batch + eps), std_batch the unbiased std of every valid reward
    in the batch. A group whose rewards differ only a little (a shaping term, a partial credit) keeps a small
    advantage instead of being scaled up to unit size as per-group normalisation does."""
    mean, _, count = _group_stats(rewards, valid)
    flat = rewards[valid]
    std = flat.std() if flat.numel() > 1 else torch.zeros((), dtype=rewards.dtype)
    adv = (rewards - mean) / (std + eps)
    return torch.where(valid & (count > 1), adv, torch.zeros_like(adv))


def group_relative_advantages(rewards: Tensor, valid: Tensor, kind: str = "grpo", std_floor: float = 0.0) -> Tensor:
    if kind == "grpo":
        return grpo_advantages(rewards, valid, std_floor=std_floor)
    if kind == "dr_grpo":
        return dr_grpo_advantages(rewards, valid)
    if kind == "grpo_batch":
        return grpo_batch_advantages(rewards, valid)
    raise ValueError(f"unknown advantage estimator {kind!r}: use 'grpo', 'grpo_batch' or 'dr_grpo'")


def has_signal(rewards: Tensor, valid: Tensor, tol: float = 1e-8) -> Tensor:
    """[G, n] -> [G] bool: the group's valid rewards differ (a zero-variance group teaches nothing)."""
    _, std, count = _group_stats(rewards, valid)
    return (std.squeeze(-1) > tol) & (count.squeeze(-1) > 1)
