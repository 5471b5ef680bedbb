"""GRPO's group-relative advantages from outcome rewards.

The samples of one task form a group; every generated token of a sample carries its
reward's distance from the group mean, in units of the group's (unbiased) standard
deviation unless `norm_by_std` is off (Dr. GRPO):  A_i = (r_i - mean) / (std + eps).

A group whose rewards are all equal teaches nothing and gets 0. A group of one has no
baseline; like verl 0.9.1 we take mean 0 and std 1 there, so its advantage is its reward
(divided by 1 + eps), which keeps runs comparable with verl's.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from seal.algos.grpo_config import GRPOConfig


def _dense_group_index(group_ids: Sequence[Hashable]) -> torch.Tensor:
    positions: dict[Hashable, int] = {}
    return torch.tensor(
        [positions.setdefault(g, len(positions)) for g in group_ids], dtype=torch.long
    )


def grpo_sample_advantages(
    rewards: torch.Tensor, group_ids: Sequence[Hashable], config: GRPOConfig | None = None
) -> torch.Tensor:
    """One advantage per sample ([batch]) from one reward per sample ([batch])."""
    config = config or GRPOConfig()
    if len(group_ids) != rewards.shape[0]:
        raise ValueError(f"{len(group_ids)} group ids for {rewards.shape[0]} rewards")
    group = _dense_group_index(group_ids).to(rewards.device)
    num_groups = int(group.max()) + 1 if len(group_ids) else 0
    zeros = rewards.new_zeros(num_groups)
    sizes = zeros.index_add(0, group, torch.ones_like(rewards))
    means = zeros.index_add(0, group, rewards) / sizes
    centred = rewards - means[group]
    stds = (zeros.index_add(0, group, centred.square()) / (sizes - 1).clamp(min=1)).sqrt()

    single = sizes[group] == 1
    centred = torch.where(single, rewards, centred)
    if not config.norm_by_std:
        return centred
    return centred / (torch.where(single, torch.ones_like(rewards), stds[group]) + config.epsilon)


def grpo_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[Hashable],
    response_mask: torch.Tensor,
    config: GRPOConfig | None = None,
) -> torch.Tensor:
    """Token-level advantages ([batch, response_len]): each sample's advantage on its
    generated tokens, 0 elsewhere."""
    return grpo_sample_advantages(rewards, group_ids, config).unsqueeze(-1) * response_mask
