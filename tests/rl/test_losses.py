import math

import pytest
import torch

from posttrain.rl.losses import aggregate_loss, clipped_policy_loss, k3_kl, loss_normalizer, truncated_importance_weights


def test_clipped_loss_on_policy_is_minus_advantage():
    logp = torch.log(torch.tensor([[0.5, 0.25]]))
    loss, clipped = clipped_policy_loss(logp, logp.clone(), torch.tensor([2.0]))
    assert torch.allclose(loss, torch.tensor([[-2.0, -2.0]]))
    assert not clipped.any()


def test_clip_higher_is_asymmetric():
    old = torch.zeros(1, 3)
    # ratios 1.5 (above 1 + 0.28), 0.5 (below 1 - 0.2), 1.1 (inside)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    loss_pos, clip_pos = clipped_policy_loss(logp, old, torch.tensor([1.0]), 0.2, 0.28)
    # positive advantage: min(r, clip(r)) -> 1.28, 0.5 (unclipped is smaller), 1.1
    assert torch.allclose(loss_pos, -torch.tensor([[1.28, 0.5, 1.1]]))
    assert clip_pos.tolist() == [[True, False, False]]
    loss_neg, clip_neg = clipped_policy_loss(logp, old, torch.tensor([-1.0]), 0.2, 0.28)
    # negative advantage: min(-r, -clip(r)) -> -1.5, -0.8, -1.1
    assert torch.allclose(loss_neg, torch.tensor([[1.5, 0.8, 1.1]]))
    assert clip_neg.tolist() == [[False, True, False]]


def test_per_token_advantages_broadcast():
    z = torch.zeros(2, 2)
    loss, _ = clipped_policy_loss(z, z, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert torch.allclose(loss, -torch.tensor([[1.0, 2.0], [3.0, 4.0]]))


def test_k3_kl_hand_values():
    logp = torch.log(torch.tensor([0.5, 0.5]))
    ref = torch.log(torch.tensor([0.5, 0.25]))
    kl = k3_kl(logp, ref)
    # delta = log(ref/p): 0 -> 0; log(0.5) -> 0.5 - log(0.5) - 1
    assert torch.allclose(kl, torch.tensor([0.0, 0.5 - math.log(0.5) - 1.0]))
    assert (kl >= 0).all()


LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


def test_token_mean_weighs_every_token_equally():
    assert aggregate_loss(LOSS, MASK, "token_mean").item() == pytest.approx(10 / 4)


def test_seq_mean_token_mean_averages_sequences():
    assert aggregate_loss(LOSS, MASK, "seq_mean_token_mean").item() == pytest.approx((2.0 + 4.0) / 2)


def test_dr_grpo_normalises_by_constant_length():
    assert aggregate_loss(LOSS, MASK, "seq_mean_token_sum_norm", max_len=5).item() == pytest.approx(10 / (2 * 5))


def test_masked_tokens_do_not_contribute():
    poisoned = LOSS.clone()
    poisoned[1, 1:] = 1e6
    assert aggregate_loss(poisoned, MASK, "token_mean") == aggregate_loss(LOSS, MASK, "token_mean")


def test_unknown_aggregation_is_rejected():
    with pytest.raises(ValueError, match="aggregation"):
        aggregate_loss(LOSS, MASK, "sum")


def test_seq_mean_token_mean_ignores_fully_masked_rows():
    loss = torch.tensor([[2.0, 2.0], [4.0, 0.0], [9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])  # the last row errored: out of the mean
    assert aggregate_loss(loss, mask, "seq_mean_token_mean").item() == pytest.approx((2.0 + 4.0) / 2)


def test_normalizer_makes_micro_batch_losses_sum_to_the_batch_loss():
    torch.manual_seed(0)
    loss, mask = torch.randn(6, 5), (torch.rand(6, 5) > 0.3).float()
    mask[4] = 0
    for mode in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"):
        whole = aggregate_loss(loss, mask, mode, max_len=5)
        norm = loss_normalizer(mask, mode, max_len=5)
        parts = sum(aggregate_loss(loss[i : i + 2], mask[i : i + 2], mode, 5, normalizer=norm) for i in range(0, 6, 2))
        assert float(parts) == pytest.approx(float(whole), rel=1e-5, abs=1e-6), mode


def test_truncated_importance_weights():
    old = torch.tensor([[-1.0, -1.0, -3.0]])
    behaviour = torch.tensor([[-1.0, -2.0, -1.0]])
    w = truncated_importance_weights(old, behaviour, cap=2.0)
    # equal -> 1; learner more likely than the sampler -> e^1 capped at 2; less likely -> e^-2
    assert w.tolist()[0] == pytest.approx([1.0, 2.0, math.exp(-2.0)])
    assert not w.requires_grad
    with pytest.raises(ValueError, match="positive cap"):
        truncated_importance_weights(old, behaviour, cap=0.0)
