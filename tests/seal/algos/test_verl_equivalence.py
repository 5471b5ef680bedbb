"""seal.algos equals verl 0.9.1's own functions on random inputs.

verl is a test (and GPU-node) dependency only: seal.algos never imports it. Skipped where
verl is not installed.
"""

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.torch_functional import entropy_from_logits as verl_entropy  # noqa: E402
from verl.workers.config import FSDPActorConfig  # noqa: E402

from seal.algos.advantage import GRPOConfig, grpo_advantages  # noqa: E402
from seal.algos.loss import (  # noqa: E402
    AGG_MODES,
    KL_TYPES,
    PolicyLossConfig,
    aggregate_loss,
    clipped_policy_loss,
    entropy_from_logits,
    kl_penalty,
)

BATCH, LENGTH = 48, 24


def random_mask(generator, fully_masked_rows=(5,)):
    lengths = torch.randint(1, LENGTH + 1, (BATCH,), generator=generator)
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).float()
    mask[list(fully_masked_rows)] = 0.0
    return mask


def verl_actor_config(loss_agg_mode, clip_low=0.2, clip_high=0.2, clip_c=10.0):
    # The actor config exactly as verl's trainer builds it for the FSDP actor.
    return FSDPActorConfig(
        strategy="fsdp",
        rollout_n=8,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=clip_low,
        clip_ratio_low=clip_low,
        clip_ratio_high=clip_high,
        clip_ratio_c=clip_c,
        loss_agg_mode=loss_agg_mode,
    )


@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("reward_kind", ["binary", "continuous"])
def test_grpo_advantage_matches_verl(norm_by_std, reward_kind):
    generator = torch.Generator().manual_seed(0)
    # groups of 8 in shuffled order, plus two groups of one
    group_of = [f"task{k // 8}" for k in range(BATCH - 2)] + ["lone_a", "lone_b"]
    order = torch.randperm(BATCH, generator=generator).tolist()
    group_ids = np.array([group_of[i] for i in order], dtype=object)
    if reward_kind == "binary":
        rewards = torch.randint(0, 2, (BATCH,), generator=generator).float()
        rewards[group_ids == "task0"] = 1.0  # a group with all-equal rewards
    else:
        rewards = torch.rand(BATCH, generator=generator)
    mask = random_mask(generator, fully_masked_rows=())
    # verl reads an outcome reward placed on the last generated token
    token_rewards = torch.zeros(BATCH, LENGTH)
    last = mask.sum(-1).long() - 1
    token_rewards[torch.arange(BATCH), last] = rewards

    expected, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=token_rewards,
        response_mask=mask,
        index=group_ids,
        epsilon=1e-6,
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    ours = grpo_advantages(rewards, list(group_ids), mask, GRPOConfig(norm_by_std=norm_by_std))
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_aggregation_matches_verl(mode):
    generator = torch.Generator().manual_seed(1)
    losses = torch.randn(BATCH, LENGTH, generator=generator)
    mask = random_mask(generator)
    expected = core_algos.agg_loss(loss_mat=losses, loss_mask=mask, loss_agg_mode=mode)
    torch.testing.assert_close(aggregate_loss(losses, mask, mode), expected)

    # the global normalisers of a micro-batch, as verl's trainer passes them
    global_kwargs = (
        {"batch_num_tokens": 1000} if mode == "token-mean" else {"global_batch_size": 64}
    )
    ours_kwargs = {"global_num_tokens": 1000} if mode == "token-mean" else {"global_num_seqs": 64}
    expected = core_algos.agg_loss(
        loss_mat=losses, loss_mask=mask, loss_agg_mode=mode, **global_kwargs
    )
    torch.testing.assert_close(aggregate_loss(losses, mask, mode, **ours_kwargs), expected)


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize(("clip_low", "clip_high", "clip_c"), [(0.2, 0.2, 10.0), (0.1, 0.28, 3.0)])
def test_policy_loss_matches_verl_vanilla(mode, clip_low, clip_high, clip_c):
    generator = torch.Generator().manual_seed(2)
    old_log_prob = -torch.rand(BATCH, LENGTH, generator=generator) * 5
    # ratios from about e^-3 to e^3: every clip branch is taken, including the dual clip
    log_prob = old_log_prob + torch.randn(BATCH, LENGTH, generator=generator)
    advantages = torch.randn(BATCH, 1, generator=generator).expand(BATCH, LENGTH).contiguous()
    mask = random_mask(generator)

    verl_config = verl_actor_config(mode, clip_low, clip_high, clip_c)
    expected_loss, expected_metrics = core_algos.compute_policy_loss_vanilla(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=mode,
        config=verl_config,
    )
    config = PolicyLossConfig(
        clip_ratio_low=clip_low, clip_ratio_high=clip_high, clip_ratio_c=clip_c, loss_agg_mode=mode
    )
    loss, metrics = clipped_policy_loss(log_prob, old_log_prob, advantages, mask, config)
    torch.testing.assert_close(loss, expected_loss)
    assert expected_metrics["actor/pg_clipfrac_lower"] > 0  # the dual clip was exercised
    for key, value in expected_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("kl_type", KL_TYPES)
def test_kl_penalty_matches_verl(kl_type):
    generator = torch.Generator().manual_seed(3)
    log_prob = -torch.rand(BATCH, LENGTH, generator=generator) * 30  # far apart: clamps engage
    ref_log_prob = -torch.rand(BATCH, LENGTH, generator=generator) * 30
    expected = core_algos.kl_penalty(log_prob, ref_log_prob, kl_type)
    torch.testing.assert_close(kl_penalty(log_prob, ref_log_prob, kl_type), expected)


def test_entropy_matches_verl():
    logits = torch.randn(4, 6, 50, generator=torch.Generator().manual_seed(4)) * 3
    torch.testing.assert_close(entropy_from_logits(logits), verl_entropy(logits))
