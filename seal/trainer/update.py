"""The actor update of one GRPO step: mini-batches, micro-batches, gradient accumulation.

Each mini-batch of samples is one optimizer step. Its micro-batches are forwarded and
backpropagated one at a time, each loss aggregated with the mini-batch's token and
sequence counts, so the accumulated gradient is exactly the mini-batch loss's gradient
whatever the micro-batch size.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch

from seal.algos.loss import PolicyLossConfig, actor_loss
from seal.trainer.batch import collate
from seal.trainer.logprobs import response_logprobs


def chunks(items: Sequence[int], size: int) -> list[list[int]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


@torch.no_grad()
def batch_logprobs(
    model: torch.nn.Module,
    samples: Sequence,
    width: int,
    micro_batch_size: int,
    chunk_tokens: int,
    pad_id: int,
) -> torch.Tensor:
    """Log-probs of every sample's response tokens under `model`, [N, width] (no grad)."""
    device = next(model.parameters()).device
    out = torch.zeros((len(samples), width))
    for index in chunks(range(len(samples)), micro_batch_size):
        batch = collate(samples, index, pad_id, device)
        logp, _ = response_logprobs(model, batch, chunk_tokens)
        out[index, : batch.response_len] = logp.float().cpu()
    return out


def policy_update(
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    samples: Sequence,
    advantages: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    loss_config: PolicyLossConfig,
    *,
    samples_per_mini_batch: int,
    micro_batch_size: int,
    chunk_tokens: int,
    grad_clip: float,
    pad_id: int,
) -> dict[str, float]:
    """One pass over the samples in order; returns metrics averaged over mini-batches."""
    device = next(policy.parameters()).device
    mask = torch.zeros_like(advantages)
    for i, s in enumerate(samples):
        mask[i, : len(s.response_mask)] = torch.tensor(s.response_mask, dtype=mask.dtype)
    sums: dict[str, float] = defaultdict(float)
    mini_batches = chunks(range(len(samples)), samples_per_mini_batch)
    policy.train()
    for mini in mini_batches:
        counts = {
            "global_num_tokens": int(mask[mini].sum()),
            "global_num_seqs": int((mask[mini].sum(dim=1) > 0).sum()),
        }
        optimizer.zero_grad(set_to_none=True)
        for index in chunks(mini, micro_batch_size):
            batch = collate(samples, index, pad_id, device)
            width = batch.response_len
            logp, entropy = response_logprobs(
                policy, batch, chunk_tokens, with_entropy=loss_config.entropy_coeff != 0
            )
            loss, metrics = actor_loss(
                logp,
                old_logprobs[index, :width].to(device),
                advantages[index, :width].to(device),
                batch.response_mask,
                loss_config,
                ref_log_prob=None
                if ref_logprobs is None
                else ref_logprobs[index, :width].to(device),
                entropy=entropy,
                **counts,
            )
            loss.backward()
            share = len(index) / len(mini)
            for key, value in metrics.items():
                # Loss terms already carry the global normalisation and add up; rates average.
                sums[key] += (
                    value / len(mini_batches)
                    if "loss" in key
                    else value * share / len(mini_batches)
                )
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip)
        optimizer.step()
        sums["actor/grad_norm"] += float(grad_norm) / len(mini_batches)
    return dict(sums)
