"""The GRPO actor objective: clipped policy loss with dual clip, KL to a reference policy,
entropy bonus, and the ways token losses are aggregated into one number.

All inputs are [batch, response_len] with a response mask that is 1 on generated tokens.
The actor loss (`actor_loss`; the dual-clip policy term: `clipped_policy_loss`) is

    aggregate(loss) - entropy_coeff * aggregate(entropy) + kl_loss_coef * aggregate(kl(log_prob, ref))
"""

from __future__ import annotations

import torch

from seal.algos.grpo_config import AGG_MODES, KL_TYPES, PolicyLossConfig


def needs_reference(config: PolicyLossConfig) -> bool:
    """Whether the loss needs the reference policy's log-probs: whenever the KL loss is
    on, whatever its coefficient. verl 0.9.1 decides the same (`need_reference_policy`:
    use_kl_loss or use_kl_in_reward, which this project never sets), and with
    kl_loss_coef 0 computes the KL, logs it and adds nothing. The one rule for the
    trainers (which build the reference) and `actor_loss` (which requires its log-probs);
    to train without a reference, set use_kl_loss=false."""
    return config.use_kl_loss


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # where() rather than a product: a NaN in a masked-out position must not leak in.
    return torch.where(mask.bool(), values, 0.0).sum() / (mask.sum() + 1e-8)


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    global_num_tokens: int | None = None,
    global_num_seqs: int | None = None,
) -> torch.Tensor:
    """One scalar from token losses.

    token-mean: sum over all tokens / number of tokens. seq-mean-token-sum: each sequence's
    token sum, averaged over sequences. seq-mean-token-mean: each sequence's token mean,
    averaged over sequences. Sequences without a generated token add nothing and, without
    a global count, are not counted (verl's rule). When a mini-batch is split into
    micro-batches, pass the mini-batch's token or sequence count as `global_num_tokens` /
    `global_num_seqs` so that the micro-batch losses add up to the mini-batch's loss. An
    all-masked batch gives 0, not NaN.
    """
    mask = mask.to(loss_mat.dtype)
    masked = torch.where(mask.bool(), loss_mat, 0.0) * mask
    if mode == "token-mean":
        num_tokens = mask.sum().clamp(min=1) if global_num_tokens is None else global_num_tokens
        return masked.sum() / num_tokens
    tokens_per_seq = mask.sum(dim=-1)
    seq_losses = masked.sum(dim=-1)
    if mode == "seq-mean-token-mean":
        seq_losses = seq_losses / (tokens_per_seq + 1e-8)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss_agg_mode {mode!r}; expected one of {AGG_MODES}")
    has_tokens = tokens_per_seq > 0
    num_seqs = has_tokens.sum().clamp(min=1) if global_num_seqs is None else global_num_seqs
    return torch.where(has_tokens, seq_losses, 0.0).sum() / num_seqs


def clipped_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: PolicyLossConfig,
    *,
    global_num_tokens: int | None = None,
    global_num_seqs: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The dual-clip PPO loss and its diagnostics: the fraction of tokens clipped by the
    ratio clip and by the dual clip, and the approximate KL to the old policy. The global
    counts are as in `aggregate_loss`. For a token with ratio rho = exp(log_prob -
    old_log_prob) and advantage A:

        clipped = max(-A * rho, -A * clip(rho, 1 - clip_low, 1 + clip_high))
        loss    = min(clipped, -A * clip_c) if A < 0 else clipped        (dual clip)

    The dual clip bounds how hard one negative-advantage token whose ratio has run far
    above 1 can push."""
    # Clamping the log-ratio keeps exp() finite when a token's probability collapses.
    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    ratio_clipped = -advantages * ratio.clamp(1 - config.clip_ratio_low, 1 + config.clip_ratio_high)
    clipped = torch.maximum(unclipped, ratio_clipped)
    dual_bound = -advantages * config.clip_ratio_c
    negative = advantages < 0
    token_losses = torch.where(negative, torch.minimum(clipped, dual_bound), clipped)

    loss = aggregate_loss(
        token_losses,
        response_mask,
        config.loss_agg_mode,
        global_num_tokens=global_num_tokens,
        global_num_seqs=global_num_seqs,
    )
    metrics = {
        "actor/pg_clipfrac": masked_mean((ratio_clipped > unclipped).float(), response_mask).item(),
        "actor/pg_clipfrac_lower": masked_mean(
            ((clipped > dual_bound) & negative).float(), response_mask
        ).item(),
        "actor/ppo_kl": masked_mean(-log_ratio, response_mask).item(),
    }
    return loss, metrics


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_type: str) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled tokens' log-probs.

    kl: log_prob - ref (k1, unbiased, high variance). mse: half the squared difference (k2).
    low_var_kl: exp(ref - log_prob) - (ref - log_prob) - 1 (k3, unbiased and never
    negative), with the log-ratio and the result clamped to stay finite.
    """
    if kl_type == "kl":
        return log_prob - ref_log_prob
    if kl_type == "mse":
        return 0.5 * (log_prob - ref_log_prob).square()
    if kl_type == "low_var_kl":
        log_ratio = (ref_log_prob - log_prob).clamp(-20.0, 20.0)
        return (log_ratio.exp() - log_ratio - 1).clamp(-10.0, 10.0)
    raise ValueError(f"unknown kl_type {kl_type!r}; expected one of {KL_TYPES}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax of `logits` over the last dimension."""
    return torch.logsumexp(logits, dim=-1) - (logits.softmax(dim=-1) * logits).sum(dim=-1)


def actor_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: PolicyLossConfig,
    *,
    ref_log_prob: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    global_num_tokens: int | None = None,
    global_num_seqs: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Policy loss, minus the entropy bonus, plus the KL term, each aggregated the same
    way (global counts as in `aggregate_loss`). `ref_log_prob` is required when the KL loss
    is on; `entropy` (per token) when `entropy_coeff` is not 0."""
    counts = {"global_num_tokens": global_num_tokens, "global_num_seqs": global_num_seqs}
    loss, metrics = clipped_policy_loss(
        log_prob, old_log_prob, advantages, response_mask, config, **counts
    )
    metrics["actor/pg_loss"] = loss.item()
    mode = config.loss_agg_mode
    if config.entropy_coeff:
        if entropy is None:
            raise ValueError("entropy_coeff is set but no per-token entropy was given")
        entropy_term = aggregate_loss(entropy, response_mask, mode, **counts)
        loss = loss - config.entropy_coeff * entropy_term
        metrics["actor/entropy"] = entropy_term.item()
    if needs_reference(config):
        if ref_log_prob is None:
            raise ValueError("use_kl_loss is on but no ref_log_prob was given")
        kl_term = aggregate_loss(
            kl_penalty(log_prob, ref_log_prob, config.kl_loss_type),
            response_mask,
            mode,
            **counts,
        )
        loss = loss + config.kl_loss_coef * kl_term
        metrics["actor/kl_loss"] = kl_term.item()
    return loss, metrics
