import math

import pytest
import torch

from posttrain.rl.advantages import dr_grpo_advantages, group_relative_advantages, grpo_advantages, has_signal


def test_grpo_matches_hand_computed_values():
    # rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt(1/3) = 0.57735
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    v = torch.ones_like(r, dtype=torch.bool)
    adv = grpo_advantages(r, v, eps=0.0)
    expected = 0.5 / math.sqrt(1 / 3)
    assert torch.allclose(adv, torch.tensor([[expected, -expected, -expected, expected]]), atol=1e-6)


def test_dr_grpo_is_unnormalised():
    r = torch.tensor([[3.0, 1.0, 2.0]])
    v = torch.ones_like(r, dtype=torch.bool)
    assert torch.allclose(dr_grpo_advantages(r, v), torch.tensor([[1.0, -1.0, 0.0]]))


def test_errored_samples_are_excluded_not_scored_zero():
    # the third sample errored: its NaN reward must neither count as 0 nor poison the group
    r = torch.tensor([[1.0, 0.0, float("nan"), 1.0]])
    v = torch.tensor([[True, True, False, True]])
    adv = dr_grpo_advantages(r, v)
    mean = 2 / 3
    assert torch.allclose(adv, torch.tensor([[1 - mean, -mean, 0.0, 1 - mean]]), atol=1e-6)
    assert torch.isfinite(grpo_advantages(r, v)).all()


def test_zero_variance_group_has_zero_advantage_and_no_signal():
    r = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    v = torch.ones_like(r, dtype=torch.bool)
    adv = grpo_advantages(r, v)
    assert torch.equal(adv[0], torch.zeros(3))
    assert has_signal(r, v).tolist() == [False, True]


def test_single_valid_sample_has_no_signal():
    r = torch.tensor([[1.0, float("nan")]])
    v = torch.tensor([[True, False]])
    assert has_signal(r, v).tolist() == [False]
    assert torch.equal(grpo_advantages(r, v), torch.zeros(1, 2))


def test_dispatch_rejects_unknown_kind():
    r = torch.zeros(1, 2)
    v = torch.ones(1, 2, dtype=torch.bool)
    assert torch.equal(group_relative_advantages(r, v, "dr_grpo"), torch.zeros(1, 2))
    try:
        group_relative_advantages(r, v, "ppo")
    except ValueError as exc:
        assert "grpo" in str(exc)
    else:
        raise AssertionError("unknown estimator accepted")


def test_grpo_batch_centres_per_group_and_scales_by_the_batch_std():
    from posttrain.rl.advantages import grpo_batch_advantages

    # an outcome group and a group that differs only by a small shaping term
    r = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.125]])
    v = torch.ones_like(r, dtype=torch.bool)
    flat = r.flatten()
    std = math.sqrt(((flat - flat.mean()) ** 2).sum().item() / (flat.numel() - 1))  # unbiased, over the batch
    mean = r.mean(-1, keepdim=True)
    assert torch.allclose(grpo_batch_advantages(r, v, eps=0.0), (r - mean) / std, atol=1e-6)
    per_group = grpo_advantages(r, v)
    batch = group_relative_advantages(r, v, "grpo_batch")
    # per-group normalisation blows the shaping-only group up to the outcome group's size; the batch std does not
    assert per_group[1].abs().max() > 1.4 and batch[1].abs().max() < 0.25 < batch[0].abs().min()
    # an errored sample is out of the group's mean and the batch's std
    r2 = torch.tensor([[1.0, 0.0, float("nan")], [1.0, 1.0, 0.0]])
    v2 = torch.tensor([[True, True, False], [True, True, True]])
    adv = grpo_batch_advantages(r2, v2, eps=0.0)
    valid = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    assert adv[0, 2] == 0.0 and torch.isfinite(adv).all()
    assert adv[0, 0].item() == pytest.approx(0.5 / valid.std().item(), rel=1e-5)


@pytest.mark.slow
def test_a_std_floor_keeps_small_shaping_differences_small_and_leaves_outcome_groups_as_grpo():
    # one group told apart only by a process score (std 0.044), one whose outcome varies (std 0.52)
    r = torch.tensor([[0.25, 0.25, 0.25, 0.125], [1.0, 0.0, 1.0, 0.0]])
    v = torch.ones_like(r, dtype=torch.bool)
    plain = grpo_advantages(r, v, eps=0.0)
    floored = grpo_advantages(r, v, eps=0.0, std_floor=0.2)
    assert plain[0].abs().max() > 1.4  # plain GRPO scales the 0.125 difference up to unit size
    torch.testing.assert_close(floored[0], (r[0] - r[0].mean()) / 0.2)  # here: the difference / the floor
    torch.testing.assert_close(floored[1], plain[1])  # std above the floor: plain GRPO
    torch.testing.assert_close(group_relative_advantages(r, v, "grpo", 0.2), grpo_advantages(r, v, std_floor=0.2))
