"""RL: advantage and loss math as pure functions, the learner, rollout, and the training loop."""

from posttrain.rl.advantages import dr_grpo_advantages, group_relative_advantages, grpo_advantages, has_signal
from posttrain.rl.losses import (
    aggregate_loss,
    clipped_policy_loss,
    k3_kl,
    loss_normalizer,
    truncated_importance_weights,
)

__all__ = [
    "aggregate_loss",
    "clipped_policy_loss",
    "dr_grpo_advantages",
    "group_relative_advantages",
    "grpo_advantages",
    "has_signal",
    "k3_kl",
    "loss_normalizer",
    "truncated_importance_weights",
]
