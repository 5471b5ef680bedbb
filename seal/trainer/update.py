"""The actor update of one GRPO step, from rollout samples to an optimizer step.

Samples (prompt ids, response ids, a mask on generated tokens) become padded matrices;
log-probabilities are computed over chunks of positions under activation checkpointing,
because full vocabulary-wide logits of a 16k-token episode would not fit; `policy_update`
makes one pass, each mini-batch one optimizer step, each micro-batch's loss weighted so
the accumulated gradient equals the mini-batch's. Details: docs/design.md, "The paper's
recipe".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from seal.algos.loss import PolicyLossConfig, actor_loss
from seal.trainer.precision import MixedPrecision

# --- padding -----------------------------------------------------------------------------


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [b, L] prompt + response, right-padded
    attention_mask: torch.Tensor  # [b, L]
    response_start: torch.Tensor  # [b] index of each row's first response token
    response_ids: torch.Tensor  # [b, R] right-padded with 0 (masked out)
    response_mask: torch.Tensor  # [b, R] 1 on generated tokens
    index: list[int]  # which samples of the step these rows are

    @property
    def response_len(self) -> int:
        return self.response_ids.shape[1]


def collate(samples: Sequence, index: list[int], pad_id: int, device: torch.device) -> MicroBatch:
    """`samples` are rollout.driver.EpisodeSample-like (prompt_ids, response_ids, response_mask)."""
    rows = [samples[i] for i in index]
    seq_len = max(len(s.prompt_ids) + len(s.response_ids) for s in rows)
    resp_len = max(max(len(s.response_ids) for s in rows), 1)
    input_ids = torch.full((len(rows), seq_len), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), seq_len), dtype=torch.long)
    response_ids = torch.zeros((len(rows), resp_len), dtype=torch.long)
    response_mask = torch.zeros((len(rows), resp_len), dtype=torch.float32)
    for row, s in enumerate(rows):
        ids = list(s.prompt_ids) + list(s.response_ids)
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        response_ids[row, : len(s.response_ids)] = torch.tensor(s.response_ids, dtype=torch.long)
        response_mask[row, : len(s.response_mask)] = torch.tensor(
            s.response_mask, dtype=torch.float32
        )
    starts = torch.tensor([len(s.prompt_ids) for s in rows])
    return MicroBatch(
        input_ids.to(device),
        attention.to(device),
        starts.to(device),
        response_ids.to(device),
        response_mask.to(device),
        list(index),
    )


def response_mask_matrix(samples: Sequence, width: int | None = None) -> torch.Tensor:
    """[N, width] with each sample's response mask (1 on generated tokens), right-padded
    with 0; `width` defaults to the longest response (at least 1)."""
    if width is None:
        width = max(max((len(s.response_mask) for s in samples), default=0), 1)
    mask = torch.zeros((len(samples), width))
    for i, s in enumerate(samples):
        mask[i, : len(s.response_mask)] = torch.tensor(s.response_mask, dtype=torch.float32)
    return mask


# --- log-probabilities -------------------------------------------------------------------


def _decoder(model: torch.nn.Module) -> torch.nn.Module:
    # Hugging Face causal LMs expose the transformer body without the output layer.
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None:
        raise TypeError(f"{type(model).__name__} has no get_decoder(); cannot chunk its logits")
    return decoder


def _chunk_logprobs(
    head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    logp = F.log_softmax(head(hidden).float(), dim=-1)
    token_logp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1) if with_entropy else torch.zeros_like(token_logp)
    return token_logp, entropy


def response_logprobs(
    model: torch.nn.Module, batch: MicroBatch, chunk_tokens: int = 1024, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and optionally entropies) of each response token, shape [b, R] like
    `batch.response_mask`; values at masked-out positions are meaningless (use the mask)."""
    hidden = _decoder(model)(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask
    ).last_hidden_state
    # The token at position t is predicted from the hidden state at t - 1.
    positions = (
        batch.response_start[:, None] + torch.arange(batch.response_len, device=hidden.device) - 1
    )
    positions = positions.clamp(0, hidden.shape[1] - 1)
    predictors = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
    head = model.get_output_embeddings()
    logps, entropies = [], []
    for start in range(0, batch.response_len, chunk_tokens):
        span = slice(start, start + chunk_tokens)
        args = (head, predictors[:, span], batch.response_ids[:, span], with_entropy)
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(*args)
        logps.append(lp)
        entropies.append(ent)
    logp = torch.cat(logps, dim=1)
    return logp, (torch.cat(entropies, dim=1) if with_entropy else None)


# --- the update --------------------------------------------------------------------------


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
    weights: MixedPrecision,
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
    """One pass over the samples in order; returns metrics averaged over mini-batches.
    Forward and backward run on `weights.compute`; `optimizer` steps `weights.master`,
    whose gradients add up in float32, and the compute copy follows each step."""
    policy = weights.compute
    device = next(policy.parameters()).device
    mask = response_mask_matrix(samples, advantages.shape[1]).to(advantages.dtype)
    sums: dict[str, float] = defaultdict(float)
    mini_batches = chunks(range(len(samples)), samples_per_mini_batch)
    policy.train()
    for mini in mini_batches:
        # A sequence mean divides by the configured mini-batch size, whatever the samples
        # (one without a generated token adds 0; a short last mini-batch weighs less), as
        # the release (a micro-batch's loss / the micro-batches configured) and verl (the
        # configured global batch size) divide.
        counts = {
            "global_num_tokens": int(mask[mini].sum()),
            "global_num_seqs": samples_per_mini_batch,
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
            weights.accumulate_grads()
            share = len(index) / len(mini)
            for key, value in metrics.items():
                # Loss terms already carry the global normalisation and add up; rates average.
                sums[key] += (
                    value / len(mini_batches)
                    if "loss" in key
                    else value * share / len(mini_batches)
                )
        grad_norm = torch.nn.utils.clip_grad_norm_(weights.master.parameters(), grad_clip)
        optimizer.step()
        weights.sync()
        sums["actor/grad_norm"] += float(grad_norm) / len(mini_batches)
    return dict(sums)
