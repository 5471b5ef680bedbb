"""GRPO group-relative advantages on hand-computed groups."""

import math

import pytest
import torch

from seal.algos.advantage import GRPOConfig, grpo_advantages, grpo_sample_advantages

# Interleaved groups: "a" = [1, 0, 0, 1], "b" = [1, 1, 1] (all equal), "c" = [1] (alone).
REWARDS = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0])
GROUPS = ["a", "b", "a", "c", "a", "b", "a", "b"]
A_STD = math.sqrt(1 / 3)  # unbiased: 4 * 0.25 / (4 - 1)


def test_normalised_by_group_std():
    advantages = grpo_sample_advantages(REWARDS, GROUPS)
    a = 0.5 / (A_STD + 1e-6)
    expected = torch.tensor([a, 0.0, -a, 1 / (1 + 1e-6), -a, 0.0, a, 0.0])
    torch.testing.assert_close(advantages, expected)


def test_without_std_is_reward_minus_group_mean():
    advantages = grpo_sample_advantages(REWARDS, GROUPS, GRPOConfig(norm_by_std=False))
    torch.testing.assert_close(advantages, torch.tensor([0.5, 0.0, -0.5, 1.0, -0.5, 0.0, 0.5, 0.0]))


def test_all_equal_rewards_give_exactly_zero():
    advantages = grpo_sample_advantages(torch.full((4,), 0.25), [7, 7, 7, 7])
    assert torch.equal(advantages, torch.zeros(4))


def test_group_of_one_keeps_its_reward():
    advantages = grpo_sample_advantages(torch.tensor([0.0, 0.75]), ["x", "y"])
    torch.testing.assert_close(advantages, torch.tensor([0.0, 0.75 / (1 + 1e-6)]))


def test_epsilon_bounds_tiny_std():
    advantages = grpo_sample_advantages(torch.tensor([0.0, 1e-6]), [0, 0], GRPOConfig(epsilon=1.0))
    std = 1e-6 / math.sqrt(2)
    torch.testing.assert_close(advantages, torch.tensor([-0.5e-6, 0.5e-6]) / (std + 1.0))


def test_broadcast_over_generated_tokens_only():
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    advantages = grpo_advantages(
        torch.tensor([1.0, 0.0]), ["g", "g"], mask, GRPOConfig(norm_by_std=False)
    )
    torch.testing.assert_close(advantages, torch.tensor([[0.5, 0.5, 0.0], [0.0, -0.5, -0.5]]))


def test_group_ids_must_match_rewards():
    with pytest.raises(ValueError, match="group ids"):
        grpo_sample_advantages(torch.zeros(3), ["a", "a"])
