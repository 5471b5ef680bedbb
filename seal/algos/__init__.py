"""The GRPO objective in plain torch (no verl): group-relative advantages and the actor loss."""

from seal.algos.advantage import GRPOConfig, grpo_advantages, grpo_sample_advantages
from seal.algos.loss import (
    PolicyLossConfig,
    actor_loss,
    aggregate_loss,
    clipped_policy_loss,
    entropy_from_logits,
    kl_penalty,
)

__all__ = [
    "GRPOConfig",
    "PolicyLossConfig",
    "actor_loss",
    "aggregate_loss",
    "clipped_policy_loss",
    "entropy_from_logits",
    "grpo_advantages",
    "grpo_sample_advantages",
    "kl_penalty",
]
