"""The actor objective on hand-computed cases: aggregation, dual clip, KL, entropy."""

import math

import pytest
import torch

from seal.algos.loss import (
    PolicyLossConfig,
    actor_loss,
    aggregate_loss,
    clipped_policy_loss,
    entropy_from_logits,
    kl_penalty,
)

LOSSES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the last sequence has no tokens


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 4) / 3),
        ("seq-mean-token-sum", (3 + 4) / 2),
        ("seq-mean-token-mean", (1.5 + 4) / 2),
    ],
)
def test_aggregation_by_hand(mode, expected):
    assert aggregate_loss(LOSSES, MASK, mode).item() == pytest.approx(expected)


def test_aggregation_ignores_nan_in_padding():
    losses = LOSSES.clone()
    losses[0, 2] = float("nan")
    assert aggregate_loss(losses, MASK, "token-mean").item() == pytest.approx(7 / 3)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_all_masked_batch_gives_zero(mode):
    assert aggregate_loss(LOSSES, torch.zeros_like(MASK), mode).item() == 0.0


@pytest.mark.parametrize(
    ("mode", "count_kwarg", "count"),
    [
        ("token-mean", "global_num_tokens", 3),
        ("seq-mean-token-sum", "global_num_seqs", 2),
        ("seq-mean-token-mean", "global_num_seqs", 2),
    ],
)
def test_micro_batches_add_up_with_global_counts(mode, count_kwarg, count):
    whole = aggregate_loss(LOSSES, MASK, mode)
    parts = sum(
        aggregate_loss(LOSSES[i : i + 1], MASK[i : i + 1], mode, **{count_kwarg: count})
        for i in range(3)
    )
    assert parts.item() == pytest.approx(whole.item())


def test_unknown_aggregation_is_an_error():
    with pytest.raises(ValueError):
        aggregate_loss(LOSSES, MASK, "seq-sum")


# One token per case: (advantage, ratio) -> expected token loss with clip 0.2 and c = 10.
CASES = [
    (1.0, 1.5, -1.2),  # positive advantage, ratio above 1 + clip: clipped
    (1.0, 0.5, -0.5),  # positive advantage, ratio below 1 - clip: not clipped (pessimistic)
    (-1.0, 1.5, 1.5),  # negative advantage, ratio above: unclipped is larger
    (-1.0, 20.0, 10.0),  # negative advantage, ratio runaway: dual clip at -A * c
    (-1.0, 0.5, 0.8),  # negative advantage, ratio below: clipped
]


def case_tensors():
    advantages = torch.tensor([[a for a, _, _ in CASES]])
    log_prob = torch.tensor([[math.log(r) for _, r, _ in CASES]])
    return log_prob, torch.zeros_like(log_prob), advantages, torch.ones_like(log_prob)


def test_dual_clip_policy_loss_by_hand():
    log_prob, old, advantages, mask = case_tensors()
    loss, metrics = clipped_policy_loss(
        log_prob, old, advantages, mask, PolicyLossConfig(loss_agg_mode="token-mean")
    )
    assert loss.item() == pytest.approx(sum(e for _, _, e in CASES) / len(CASES))
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 5)  # cases 1 and 5
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 5)  # case 4
    assert metrics["actor/ppo_kl"] == pytest.approx(-sum(math.log(r) for _, r, _ in CASES) / 5)


def test_asymmetric_clip_and_dual_bound():
    log_prob, old, advantages, mask = case_tensors()
    config = PolicyLossConfig(
        clip_ratio_low=0.1, clip_ratio_high=0.3, clip_ratio_c=3.0, loss_agg_mode="token-mean"
    )
    loss, _ = clipped_policy_loss(log_prob, old, advantages, mask, config)
    expected = [-1.3, -0.5, 1.5, 3.0, 0.9]
    assert loss.item() == pytest.approx(sum(expected) / 5)


def test_policy_gradient_raises_probability_of_positive_advantage():
    log_prob = torch.zeros(1, 2, requires_grad=True)
    advantages = torch.tensor([[1.0, -1.0]])
    loss, _ = clipped_policy_loss(
        log_prob, torch.zeros(1, 2), advantages, torch.ones(1, 2), PolicyLossConfig()
    )
    loss.backward()
    assert log_prob.grad[0, 0] < 0 < log_prob.grad[0, 1]


def test_kl_estimators_by_hand():
    log_prob = torch.tensor([0.0])
    ref = torch.tensor([math.log(2.0)])
    assert kl_penalty(log_prob, ref, "kl").item() == pytest.approx(-math.log(2.0))
    assert kl_penalty(log_prob, ref, "mse").item() == pytest.approx(0.5 * math.log(2.0) ** 2)
    assert kl_penalty(log_prob, ref, "low_var_kl").item() == pytest.approx(
        2.0 - math.log(2.0) - 1.0
    )
    assert kl_penalty(log_prob, torch.tensor([50.0]), "low_var_kl").item() == 10.0  # clamped
    with pytest.raises(ValueError):
        kl_penalty(log_prob, ref, "k9")


def test_entropy_by_hand():
    uniform = torch.zeros(2, 4)
    torch.testing.assert_close(entropy_from_logits(uniform), torch.full((2,), math.log(4.0)))
    peaked = torch.tensor([[100.0, 0.0, 0.0]])
    assert entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)


def test_actor_loss_combines_terms():
    log_prob, old, advantages, mask = case_tensors()
    ref = torch.full_like(log_prob, -0.3)
    entropy = torch.full_like(log_prob, 2.0)
    config = PolicyLossConfig(entropy_coeff=0.01, kl_loss_coef=0.5, kl_loss_type="mse")
    loss, metrics = actor_loss(
        log_prob, old, advantages, mask, config, ref_log_prob=ref, entropy=entropy
    )
    pg, _ = clipped_policy_loss(log_prob, old, advantages, mask, config)
    kl = aggregate_loss(kl_penalty(log_prob, ref, "mse"), mask, config.loss_agg_mode)
    assert loss.item() == pytest.approx(pg.item() - 0.01 * 2.0 + 0.5 * kl.item())
    assert metrics["actor/kl_loss"] == pytest.approx(kl.item())
    assert metrics["actor/entropy"] == pytest.approx(2.0)


def test_actor_loss_requires_what_its_config_uses():
    log_prob, old, advantages, mask = case_tensors()
    with pytest.raises(ValueError, match="ref_log_prob"):
        actor_loss(log_prob, old, advantages, mask, PolicyLossConfig())
    with pytest.raises(ValueError, match="entropy"):
        actor_loss(
            log_prob, old, advantages, mask, PolicyLossConfig(use_kl_loss=False, entropy_coeff=0.1)
        )
    loss, metrics = actor_loss(log_prob, old, advantages, mask, PolicyLossConfig(use_kl_loss=False))
    assert "actor/kl_loss" not in metrics and loss.item() == pytest.approx(metrics["actor/pg_loss"])


def test_config_validation():
    with pytest.raises(ValueError):
        PolicyLossConfig(loss_agg_mode="token-sum-ish")
    with pytest.raises(ValueError):
        PolicyLossConfig(kl_loss_type="full")
    with pytest.raises(ValueError):
        PolicyLossConfig(clip_ratio_c=1.0)
