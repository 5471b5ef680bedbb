"""A-Patch: scale each trajectory's GRPO advantages by what its diagnosis says it got wrong.

Applied after group normalisation, as in the paper. A sample's scale is the mean weight of
its turn tags, clamped to [min_scale, max_scale]; `checker_error` and `gt_error` are left
out (they say nothing about the policy) and a sample with no remaining tag keeps scale 1.
Weights come from the capability state (dynamic, the paper's setting) or are the fixed
base weights (static). The only module of `seal.tocf` that imports torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import torch

from seal.bfcl.tags import EXCLUDED_TAGS
from seal.tocf.apatch_config import APatchConfig
from seal.tocf.weights import UNKNOWN_TAG_WEIGHT


def tag_weights(config: APatchConfig, capability) -> dict[str, float]:
    """The weights `config.weight_source` names: a capability state's live weights
    (dynamic) or its config's base weights (static)."""
    if config.weight_source == "static":
        return dict(capability.config.base_weights)
    return dict(capability.weights)


def sample_scale(
    tags: Sequence[str], weights: Mapping[str, float], min_scale: float, max_scale: float
) -> float:
    counted = [weights.get(tag, UNKNOWN_TAG_WEIGHT) for tag in tags if tag not in EXCLUDED_TAGS]
    if not counted:
        return 1.0
    return min(max_scale, max(min_scale, sum(counted) / len(counted)))


def apply_apatch(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    sample_tags: Sequence[Sequence[str]],
    config: APatchConfig,
    *,
    step: int,
    weights: Mapping[str, float],
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the patched advantages (a new tensor, [batch, response_len]) and metrics.

    `sample_tags[i]` are sample i's turn tags; `weights` the tag weights of
    `config.weight_source` (`tag_weights` picks them from a capability state). Metrics: `active`
    (0 during warm-up or when disabled), `scaled_count` (samples whose advantages changed),
    `tag_frac/<tag>` (fraction of samples carrying the tag) and, only while active,
    `mean_scale` (the mean factor the samples' advantages were multiplied by, 1 for a
    sample left unchanged), `scaled_frac` and `weight/<tag>`, all under "apatch/".
    """
    if len(sample_tags) != advantages.shape[0]:
        raise ValueError(f"{len(sample_tags)} tag lists for {advantages.shape[0]} samples")

    scales = torch.tensor(
        [sample_scale(tags, weights, config.min_scale, config.max_scale) for tags in sample_tags],
        dtype=advantages.dtype,
        device=advantages.device,
    )
    active = config.enable and step >= config.warmup_steps
    if not active:
        patched, scaled_count = advantages.clone(), 0
    else:
        # A zero advantage (a group with equal rewards) stays zero whatever its scale, so
        # only nonzero advantages of the chosen sign count as touched: the renormalising mean and
        # the count cover the samples that carry a gradient.
        if config.apply_to == "positive":
            touched_tokens = advantages > 0
        elif config.apply_to == "negative":
            touched_tokens = advantages < 0
        else:
            touched_tokens = advantages != 0
        touched_tokens &= response_mask.bool()
        touched = touched_tokens.any(dim=1)
        if config.renormalize and touched.any():
            scales = scales / scales[touched].mean()
        patched = torch.where(touched_tokens, advantages * scales[:, None], advantages)
        scaled_count = int((touched & (scales != 1)).sum())
        # What each sample's advantages were multiplied by: 1 where none was touched (a
        # group of equal rewards), so the mean says what A-Patch did, not what the tags
        # asked for (a batch of such groups scales nothing: mean 1, share 0).
        applied = torch.where(touched, scales, torch.ones_like(scales))

    # Off (disabled or in warm-up), A-Patch scales nothing: no scale or weight is reported,
    # which would read like a SEAL run's.
    metrics = {"apatch/active": float(active), "apatch/scaled_count": float(scaled_count)}
    carriers = Counter(tag for tags in sample_tags for tag in set(tags))
    for tag, count in sorted(carriers.items()):
        metrics[f"apatch/tag_frac/{tag}"] = count / len(sample_tags)
    if active:
        metrics["apatch/mean_scale"] = applied.mean().item() if len(sample_tags) else 1.0
        metrics["apatch/scaled_frac"] = scaled_count / len(sample_tags) if len(sample_tags) else 0.0
        for tag, weight in weights.items():
            metrics[f"apatch/weight/{tag}"] = float(weight)
    return patched, metrics
